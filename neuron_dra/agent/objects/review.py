"""TokenReview and SubjectAccessReview answers: what the metrics endpoint reads, typed.

The metrics endpoint asks the API server who a bearer token is (TokenReview) and
whether that user may read the metrics path (SubjectAccessReview); it reads the
verdicts and the user they name, and nothing else of the answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuron_dra.agent.objects import fields as f


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    uid: str
    groups: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class TokenReview:
    authenticated: bool
    user: UserInfo


def decode_token_review(obj: Any) -> TokenReview:
    """A TokenReview answer; ObjectError naming the field of a wrong type."""
    review = f.as_object(obj, "the TokenReview")
    status = f.obj(review, "status", "")
    user = f.obj(status, "user", "status")
    at = "status.user"
    extra = f.obj(user, "extra", at)
    return TokenReview(
        authenticated=f.opt_bool(status, "authenticated", "status") is True,
        user=UserInfo(
            username=f.text(user, "username", at),
            uid=f.text(user, "uid", at),
            groups=f.strings(user, "groups", at),
            extra={key: f.strings(extra, key, f"{at}.extra") for key in extra},
        ),
    )


def decode_access_allowed(obj: Any) -> bool:
    """Whether a SubjectAccessReview answer allows; ObjectError naming the field of a
    wrong type."""
    review = f.as_object(obj, "the SubjectAccessReview")
    return f.opt_bool(f.obj(review, "status", ""), "allowed", "status") is True
