"""Who may read /metrics: a bearer token the API server vouches for, of a user it
lets `get` the non-resource URL /metrics.

The check of kube-rbac-proxy and controller-runtime's metrics filter
(`WithAuthenticationAndAuthorization`): the token goes to a TokenReview, the
user it names to a SubjectAccessReview for `get` on `/metrics`. Verdicts are
kept a while, per token (its SHA-256, not the token), so that a scraper costs
the API server two calls per token and `ALLOWED_TTL_S`, not two per scrape.

The API server is reached through a `Create` the agent injects (its own client:
this room does not import it), which raises on any failure; a failure is
answered 503 and not kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

Json = dict[str, Any]
Create = Callable[[str, Json], Awaitable[Json]]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
METRICS_PATH = "/metrics"
# How long a verdict is kept: as kube-rbac-proxy, a grant a while, a refusal briefly,
# so that a binding just made is seen soon.
ALLOWED_TTL_S = 60.0
DENIED_TTL_S = 10.0
MAX_KEPT = 256  # verdicts kept at most, the oldest forgotten first

OK, UNAUTHORIZED, FORBIDDEN, UNAVAILABLE = 200, 401, 403, 503


class Authorizer:
    def __init__(self, create: Create, clock: Callable[[], float] = time.monotonic) -> None:
        self._create = create
        self._clock = clock
        self._kept: OrderedDict[bytes, tuple[int, float]] = OrderedDict()
        # One review at a time: a flood of made-up tokens costs the API server one call
        # at a time, not one per open connection.
        self._reviewing = asyncio.Lock()

    async def status(self, authorization: str | None) -> int:
        """The HTTP status for a request with this Authorization header: OK, UNAUTHORIZED
        (no bearer token, or one the API server does not know), FORBIDDEN (a user not
        allowed to get /metrics) or UNAVAILABLE (the API server did not answer)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return UNAUTHORIZED
        key = hashlib.sha256(token.encode()).digest()
        if (kept := self._kept_verdict(key)) is not None:
            return kept  # without waiting for another token's review
        async with self._reviewing:
            if (kept := self._kept_verdict(key)) is not None:
                return kept
            try:
                verdict = await self._review(token)
            except Exception as err:
                log.warning("metrics authorization unavailable: %s", err)
                return UNAVAILABLE
            ttl = ALLOWED_TTL_S if verdict == OK else DENIED_TTL_S
            self._kept[key] = (verdict, self._clock() + ttl)
            self._kept.move_to_end(key)
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
            return verdict

    def _kept_verdict(self, key: bytes) -> int | None:
        kept = self._kept.get(key)
        return kept[0] if kept is not None and kept[1] > self._clock() else None

    async def _review(self, token: str) -> int:
        review = await self._create(
            TOKEN_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
             "spec": {"token": token}},
        )  # fmt: skip
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return UNAUTHORIZED
        user = status.get("user") or {}
        spec: Json = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        access = await self._create(
            ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
             "spec": spec},
        )  # fmt: skip
        allowed = bool((access.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics scrape refused", extra={"user": spec["user"]})
        return OK if allowed else FORBIDDEN
