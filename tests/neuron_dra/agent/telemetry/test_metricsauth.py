"""Who may read /metrics: the verdicts kept, and what a flood of tokens costs the API server."""

from __future__ import annotations

import asyncio
from collections import Counter
from http import HTTPStatus
from typing import Any

import pytest

from neuron_dra.agent.telemetry import metricsauth
from neuron_dra.agent.telemetry.metricsauth import (
    ACCESS_REVIEWS,
    DENIED_TTL_S,
    MAX_KEPT,
    RESULTS,
    REVIEW_BURST,
    REVIEWS_PER_S,
    SOURCE_REVIEW_BURST,
    TOKEN_REVIEWS,
    Authorizer,
)

Json = dict[str, Any]
PATIENCE_S = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ApiServer:
    """Answers reviews as the API server would: `scraper` allowed, `stranger` known but
    not allowed, any other token unknown. Counts the TokenReviews asked."""

    def __init__(self) -> None:
        self.token_reviews: list[str] = []
        self.failing = 0  # the next calls that raise, as a connection that fails
        self.gate: asyncio.Event | None = None  # reviews wait for it when set

    async def create(self, path: str, body: Json) -> Json:
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            self.failing -= 1
            raise ConnectionError("connection refused")
        if path == TOKEN_REVIEWS:
            token = body["spec"]["token"]
            self.token_reviews.append(token)
            if token not in ("scraper", "stranger"):
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": token}}}
        assert path == ACCESS_REVIEWS
        return {"status": {"allowed": body["spec"]["user"] == "scraper"}}


def test_a_flood_of_made_up_tokens_costs_at_most_the_bucket_of_reviews() -> None:
    """From many addresses: the budget of all addresses together bounds the reviews."""
    api, clock = ApiServer(), Clock()
    authorizer = Authorizer(api.create, clock)

    async def main(prefix: str) -> list[int]:
        return [
            await authorizer.status(f"Bearer {prefix}-{n}", f"10.{prefix}.0.{n}")
            for n in range(100)
        ]

    answers = asyncio.run(main("1"))
    assert len(api.token_reviews) == REVIEW_BURST
    assert answers.count(401) == REVIEW_BURST and answers.count(429) == 100 - REVIEW_BURST
    clock.now += 1.0
    asyncio.run(main("2"))
    assert len(api.token_reviews) == REVIEW_BURST + REVIEWS_PER_S


def test_a_flood_from_one_address_spends_that_addresss_budget_alone() -> None:
    api, clock = ApiServer(), Clock()
    authorizer = Authorizer(api.create, clock)

    async def main() -> tuple[list[HTTPStatus], HTTPStatus]:
        flood = [await authorizer.status(f"Bearer bogus-{n}", "10.0.0.66") for n in range(100)]
        return flood, await authorizer.status("Bearer scraper", "10.0.0.9")

    flood, scraper = asyncio.run(main())
    assert flood.count(HTTPStatus.UNAUTHORIZED) == SOURCE_REVIEW_BURST and scraper == 200
    clock.now += 1.0
    assert asyncio.run(authorizer.status("Bearer bogus-x", "10.0.0.66")) == 401
    assert asyncio.run(authorizer.status("Bearer bogus-y", "10.0.0.66")) == 429
    assert len(api.token_reviews) == SOURCE_REVIEW_BURST + 1 + 1


def test_each_token_not_kept_is_counted_by_result() -> None:
    api, counted = ApiServer(), Counter[str]()
    authorizer = Authorizer(
        api.create, Clock(), review_burst=5, on_review=lambda r: counted.update([RESULTS[r]])
    )

    async def main() -> None:
        for n, token in enumerate(("scraper", "scraper", "stranger", "bogus", "new-1")):
            await authorizer.status(f"Bearer {token}", f"10.0.0.{n}")
        api.failing = 1
        assert await authorizer.status("Bearer new-2", "10.0.1.0") == 503
        assert await authorizer.status("Bearer new-3", "10.0.1.1") == 429

    asyncio.run(main())
    assert counted == {
        "allowed": 1,
        "forbidden": 1,
        "unauthorized": 2,
        "unavailable": 1,
        "limited": 1,
    }


def test_a_refusal_is_kept_until_it_expires() -> None:
    api, clock = ApiServer(), Clock()
    authorizer = Authorizer(api.create, clock)
    assert asyncio.run(authorizer.status("Bearer stranger")) == 403
    assert asyncio.run(authorizer.status("Bearer stranger")) == 403
    assert api.token_reviews == ["stranger"]
    clock.now += DENIED_TTL_S
    assert asyncio.run(authorizer.status("Bearer stranger")) == 403
    assert api.token_reviews == ["stranger", "stranger"]


def test_a_grant_is_kept_under_a_flood_of_bogus_tokens() -> None:
    api, clock = ApiServer(), Clock()
    authorizer = Authorizer(api.create, clock, review_burst=10 * MAX_KEPT)

    async def main() -> int:
        assert await authorizer.status("Bearer scraper") == 200
        for n in range(4 * MAX_KEPT):
            assert await authorizer.status(f"Bearer bogus-{n}", f"10.0.{n // 256}.{n % 256}") == 401
        return await authorizer.status("Bearer scraper")

    assert asyncio.run(main()) == 200
    assert api.token_reviews.count("scraper") == 1


def test_an_unavailable_api_server_is_not_kept() -> None:
    api = ApiServer()
    authorizer = Authorizer(api.create, Clock())
    api.failing = 1
    assert asyncio.run(authorizer.status("Bearer scraper")) == 503
    assert asyncio.run(authorizer.status("Bearer scraper")) == 200


def test_concurrent_scrapes_with_one_token_share_one_review() -> None:
    api = ApiServer()
    authorizer = Authorizer(api.create, Clock())

    async def main() -> list[int]:
        api.gate = asyncio.Event()
        scrapes = [asyncio.create_task(authorizer.status("Bearer scraper")) for _ in range(5)]
        await asyncio.sleep(0)  # every scrape is waiting for the one review
        api.gate.set()
        return list(await asyncio.wait_for(asyncio.gather(*scrapes), PATIENCE_S))

    assert asyncio.run(main()) == [200] * 5
    assert api.token_reviews == ["scraper"]


def test_a_review_outlives_the_scrape_that_gave_up_and_its_verdict_is_kept() -> None:
    """The scrape's timeout does not end the review: the next token waits for it
    (one review at a time), and the same token is answered from its verdict."""
    api = ApiServer()
    authorizer = Authorizer(api.create, Clock())

    async def main() -> None:
        api.gate = asyncio.Event()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(authorizer.status("Bearer scraper"), 0.01)
        other = asyncio.create_task(authorizer.status("Bearer stranger"))
        await asyncio.sleep(0.01)
        assert not other.done()
        assert api.token_reviews == []  # the other token waits for the first review
        api.gate.set()
        assert await asyncio.wait_for(other, PATIENCE_S) == 403
        assert await authorizer.status("Bearer scraper") == 200
        assert api.token_reviews == ["scraper", "stranger"]

    asyncio.run(main())


def test_no_bearer_token_asks_nothing() -> None:
    api = ApiServer()
    authorizer = Authorizer(api.create, Clock())
    for header in (None, "", "Basic abc", "Bearer ", "Bearer"):
        assert asyncio.run(authorizer.status(header)) == 401
    assert api.token_reviews == []
    assert metricsauth.UNAUTHORIZED == 401
