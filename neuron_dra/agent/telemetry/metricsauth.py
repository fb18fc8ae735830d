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

A token not kept costs a review, so reviews of new tokens are bounded three
ways: one at a time, the lock held until the review ends even when the scrape
that asked gave up (its verdict is then kept for the next one); at most
`SOURCE_REVIEWS_PER_S` (bursts of `SOURCE_REVIEW_BURST`) from one client address;
and at most `REVIEWS_PER_S` (bursts of `REVIEW_BURST`) from all addresses
together. Past either a scrape with a new token is answered 429 without asking
the API server. Grants and refusals are kept apart, each to `MAX_KEPT`: a flood
of made-up tokens cannot push a scraper's grant out.

A grant that has expired is still served for `RENEW_GRACE_S` while it is
reviewed again in the background, from a budget of its own (`RENEWALS_PER_S`),
never waiting behind new tokens: a client flooding the endpoint with made-up
tokens neither delays nor refuses a scraper granted before. The renewal's
verdict replaces the grant: a token no longer valid, or a user no longer
allowed, is refused from then on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from cachetools import LRUCache, TLRUCache

from neuron_dra.agent.objects.review import decode_access_allowed, decode_token_review

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
# An expired grant is served this long while its renewal runs; past it, the token is
# new again (a renewal that keeps failing: the API server is down).
RENEW_GRACE_S = ALLOWED_TTL_S
# Reviews of tokens not kept: a few scrapers each show one token a minute (a new one
# when their projected token rotates, hourly).
REVIEWS_PER_S = 5.0
REVIEW_BURST = 10
SOURCE_REVIEWS_PER_S = 1.0
SOURCE_REVIEW_BURST = 3
MAX_SOURCES = 1024  # client addresses with a budget of their own; the least recent forgotten
# Renewals of grants: MAX_KEPT grants each renewed once a minute need 4.3 a second.
RENEWALS_PER_S = 5.0
RENEWAL_BURST = 10

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


class SourceBuckets:
    """A `TokenBucket` per client address; past `size` addresses the least recently
    seen is forgotten (it comes back with a full bucket)."""

    def __init__(self, rate: float, burst: int, clock: Clock, size: int = MAX_SOURCES) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._buckets: LRUCache[str, TokenBucket] = LRUCache(size)

    def take(self, source: str) -> bool:
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = self._buckets[source] = TokenBucket(self._rate, self._burst, self._clock)
        return bucket.take()


@dataclass(frozen=True)
class _Verdict:
    status: HTTPStatus
    renew_at: float  # due for renewal (a grant) from then
    expires_at: float  # forgotten then


def _expires_at(_key: bytes, verdict: _Verdict, _now: float) -> float:
    return verdict.expires_at


class _Kept:
    """Verdicts until they expire, the least recently used forgotten past `size`."""

    def __init__(self, size: int, clock: Clock) -> None:
        self._clock = clock
        self._verdicts: TLRUCache[bytes, _Verdict, float] = TLRUCache(
            size, _expires_at, timer=clock
        )

    def get(self, key: bytes) -> tuple[HTTPStatus, bool] | None:
        """The verdict kept for `key`, and whether it is due for renewal."""
        kept = self._verdicts.get(key)
        if kept is None:
            return None
        return kept.status, kept.renew_at <= self._clock()

    def put(self, key: bytes, verdict: HTTPStatus, ttl_s: float, grace_s: float = 0.0) -> None:
        now = self._clock()
        self._verdicts[key] = _Verdict(verdict, now + ttl_s, now + ttl_s + grace_s)

    def pop(self, key: bytes) -> None:
        self._verdicts.pop(key, None)


class Authorizer:
    """The verdicts on /metrics requests' tokens, with the reviews they take bounded
    (module docstring)."""

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
        self._sources = SourceBuckets(SOURCE_REVIEWS_PER_S, SOURCE_REVIEW_BURST, clock)
        self._renewals = TokenBucket(RENEWALS_PER_S, RENEWAL_BURST, clock)
        self._reviewing = asyncio.Lock()
        self._renewing: set[bytes] = set()
        self._running: set[asyncio.Task[HTTPStatus]] = set()

    async def status(self, authorization: str | None, source: str = "") -> HTTPStatus:
        """The HTTP status for a request with this Authorization header from client
        address `source`: OK, UNAUTHORIZED (no bearer token, or one the API server does
        not know), FORBIDDEN (a user not allowed to get /metrics), TOO_MANY (too many new
        tokens of late) or UNAVAILABLE (the API server did not answer)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return UNAUTHORIZED
        key = hashlib.sha256(token.encode()).digest()
        if (kept := self._kept(key, token)) is not None:
            return kept  # without waiting for another token's review
        await self._reviewing.acquire()
        # Released by the review, or here when there is none: no await in between.
        if (kept := self._kept(key, token)) is not None:
            self._reviewing.release()
            return kept
        # The address's own budget first: a flood from one address spends its own.
        if not self._sources.take(source) or not self._bucket.take():
            self._reviewing.release()
            self._on_review(TOO_MANY)
            return TOO_MANY
        review = self._start(self._review_and_keep(key, token))
        # A scrape that gives up leaves the review running, and the lock held, to its end.
        return await asyncio.shield(review)

    def _kept(self, key: bytes, token: str) -> HTTPStatus | None:
        """The verdict kept for the token; a grant due for renewal is renewed meanwhile."""
        if (grant := self._grants.get(key)) is not None:
            verdict, due = grant
            if due and key not in self._renewing and self._renewals.take():
                self._renewing.add(key)
                self._start(self._renew(key, token))
            return verdict
        refusal = self._refusals.get(key)
        return refusal[0] if refusal is not None else None

    def _start(self, work: Coroutine[Any, Any, HTTPStatus]) -> asyncio.Task[HTTPStatus]:
        task = asyncio.get_running_loop().create_task(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def _review_and_keep(self, key: bytes, token: str) -> HTTPStatus:
        try:
            return await self._reviewed(key, token)
        finally:
            self._reviewing.release()

    async def _renew(self, key: bytes, token: str) -> HTTPStatus:
        """Review a granted token again, its grant served meanwhile: a failure leaves the
        grant to its grace's end, a refusal replaces it."""
        try:
            return await self._reviewed(key, token)
        finally:
            self._renewing.discard(key)

    async def _reviewed(self, key: bytes, token: str) -> HTTPStatus:
        """The API server's verdict on `token`, kept under `key`; unavailable when it
        gives none."""
        try:
            verdict = await self._review(token)
            self._keep(key, verdict)
        except Exception as err:
            log.warning("metrics authorization unavailable: %s", err)
            verdict = UNAVAILABLE
        self._on_review(verdict)
        return verdict

    def _keep(self, key: bytes, verdict: HTTPStatus) -> None:
        if verdict == OK:
            self._grants.put(key, verdict, ALLOWED_TTL_S, RENEW_GRACE_S)
        else:
            self._grants.pop(key)
            self._refusals.put(key, verdict, DENIED_TTL_S)

    async def _review(self, token: str) -> HTTPStatus:
        review = await self._create(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        reviewed = decode_token_review(review)
        if not reviewed.authenticated:
            return UNAUTHORIZED
        user = reviewed.user
        spec: Json = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {key: list(values) for key, values in user.extra.items()}
        access = await self._create(
            ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = decode_access_allowed(access)
        if not allowed:
            log.info("metrics scrape refused", extra={"user": spec["user"]})
        return OK if allowed else FORBIDDEN
