"""Who may read /metrics: a bearer token the API server vouches for, of a user it
lets `get` the non-resource URL /metrics.

The check of kube-rbac-proxy and controller-runtime's metrics filter
(`WithAuthenticationAndAuthorization`): the token goes to a TokenReview, the
user it names to a SubjectAccessReview for `get` on `/metrics`. Verdicts are
kept a while, per token (its SHA-256, not the token), so that a scraper costs
the API server two calls per token and `ALLOWED_TTL_S`, not two per scrape.

The API server is reached through a `Create` the agent injects (its own client,
of one connection, apart from the one prepares use: this room does not import
it), which raises on any failure; a failure is answered 503 and not kept.

A token not kept costs a review, so reviews are bounded twice: one at a time,
the lock held until the review ends even when the scrape that asked gave up
(its verdict is then kept for the next one), and at most `REVIEWS_PER_S` with
bursts of `REVIEW_BURST`; past that a scrape with a new token is answered 429
without asking the API server. Grants and refusals are kept apart, each to
`MAX_KEPT`: a flood of made-up tokens cannot push a scraper's grant out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

log = logging.getLogger(__name__)

Json = dict[str, Any]
Create = Callable[[str, Json], Awaitable[Json]]
Clock = Callable[[], float]
# Told the outcome of each token not kept: a review's verdict, UNAVAILABLE, or TOO_MANY
# (not reviewed), for `REVIEWS_METRIC`.
OnReview = Callable[[HTTPStatus], None]
REVIEWS_METRIC = "neuron_dra_metrics_token_reviews_total"
RESULTS = {
    HTTPStatus.OK: "allowed",
    HTTPStatus.UNAUTHORIZED: "unauthorized",
    HTTPStatus.FORBIDDEN: "forbidden",
    HTTPStatus.SERVICE_UNAVAILABLE: "unavailable",
    HTTPStatus.TOO_MANY_REQUESTS: "limited",
}

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
METRICS_PATH = "/metrics"
# How long a verdict is kept: as kube-rbac-proxy, a grant a while, a refusal briefly,
# so that a binding just made is seen soon.
ALLOWED_TTL_S = 60.0
DENIED_TTL_S = 10.0
MAX_KEPT = 256  # grants kept at most, and refusals apart: the least recently used forgotten
# Reviews of tokens not kept: a few scrapers each show one token a minute.
REVIEWS_PER_S = 5.0
REVIEW_BURST = 10

OK, UNAUTHORIZED, FORBIDDEN = HTTPStatus.OK, HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN
TOO_MANY, UNAVAILABLE = HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.SERVICE_UNAVAILABLE


class TokenBucket:
    """`rate` takes a second, at most `burst` at once."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self._rate, self._burst, self._clock = rate, float(burst), clock
        self._tokens, self._at = float(burst), clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


class _Kept:
    """Verdicts until they expire, the least recently used forgotten past `size`."""

    def __init__(self, size: int, clock: Clock) -> None:
        self._size, self._clock = size, clock
        self._verdicts: OrderedDict[bytes, tuple[HTTPStatus, float]] = OrderedDict()

    def get(self, key: bytes) -> HTTPStatus | None:
        kept = self._verdicts.get(key)
        if kept is None:
            return None
        if kept[1] <= self._clock():
            del self._verdicts[key]
            return None
        self._verdicts.move_to_end(key)
        return kept[0]

    def put(self, key: bytes, verdict: HTTPStatus, ttl_s: float) -> None:
        self._verdicts[key] = (verdict, self._clock() + ttl_s)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self._size:
            self._verdicts.popitem(last=False)


class Authorizer:
    def __init__(
        self,
        create: Create,
        clock: Clock = time.monotonic,
        *,
        reviews_per_s: float = REVIEWS_PER_S,
        review_burst: int = REVIEW_BURST,
        on_review: OnReview = lambda _: None,
    ) -> None:
        self._create = create
        self._on_review = on_review
        self._grants, self._refusals = _Kept(MAX_KEPT, clock), _Kept(MAX_KEPT, clock)
        self._bucket = TokenBucket(reviews_per_s, review_burst, clock)
        self._reviewing = asyncio.Lock()
        self._running: set[asyncio.Task[HTTPStatus]] = set()

    async def status(self, authorization: str | None) -> HTTPStatus:
        """The HTTP status for a request with this Authorization header: OK, UNAUTHORIZED
        (no bearer token, or one the API server does not know), FORBIDDEN (a user not
        allowed to get /metrics), TOO_MANY (too many new tokens of late) or UNAVAILABLE
        (the API server did not answer)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return UNAUTHORIZED
        key = hashlib.sha256(token.encode()).digest()
        if (kept := self._kept(key)) is not None:
            return kept  # without waiting for another token's review
        await self._reviewing.acquire()
        # Released by the review, or here when there is none: no await in between.
        if (kept := self._kept(key)) is not None:
            self._reviewing.release()
            return kept
        if not self._bucket.take():
            self._reviewing.release()
            self._on_review(TOO_MANY)
            return TOO_MANY
        review = asyncio.get_running_loop().create_task(self._review_and_keep(key, token))
        self._running.add(review)
        review.add_done_callback(self._running.discard)
        # A scrape that gives up leaves the review running, and the lock held, to its end.
        return await asyncio.shield(review)

    def _kept(self, key: bytes) -> HTTPStatus | None:
        return self._grants.get(key) or self._refusals.get(key)

    async def _review_and_keep(self, key: bytes, token: str) -> HTTPStatus:
        try:
            verdict = await self._review(token)
            if verdict == OK:
                self._grants.put(key, verdict, ALLOWED_TTL_S)
            else:
                self._refusals.put(key, verdict, DENIED_TTL_S)
        except Exception as err:
            log.warning("metrics authorization unavailable: %s", err)
            verdict = UNAVAILABLE
        finally:
            self._reviewing.release()
        self._on_review(verdict)
        return verdict

    async def _review(self, token: str) -> HTTPStatus:
        review = await self._create(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
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
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = bool((access.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics scrape refused", extra={"user": spec["user"]})
        return OK if allowed else FORBIDDEN
