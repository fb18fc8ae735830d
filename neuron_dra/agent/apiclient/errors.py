"""The one error type for Kubernetes API failures, importable without the client."""

from __future__ import annotations


class ApiError(Exception):
    """The API server answered with an error status, or could not be reached (status 0)."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        # How long the server asked to be left alone (Retry-After, or a Status's
        # details.retryAfterSeconds), if it said.
        self.retry_after_s = retry_after_s

    @property
    def no_answer(self) -> bool:
        """The server did not decide (unreachable, overloaded, failing): ask again later."""
        return self.status in (0, 429) or self.status >= 500
