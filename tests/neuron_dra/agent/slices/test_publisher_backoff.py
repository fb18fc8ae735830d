"""The slice publisher against an API server that answers LISTs but not watches: it
backs off instead of listing again at its first step, honours Retry-After, and what
it sends a minute is the fleet's figure (docs/operators/reliability.md). An outage
ended by a LIST that answered is over: the next one starts from the first step.

Waits are recorded, not slept.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable

import pytest

from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.kube import Kube
from neuron_dra.agent.slices.publisher import BACKOFF_INITIAL_S, BACKOFF_MAX_S, SlicePublisher
from tests.neuron_dra.agent.stressed_api import NAME, Server, Sleep, first_minute, waits_of


def publish(server: Server, kube: Kube, passes: int, *, lists: int = 0) -> list[float]:
    """Run a publisher (no slices wanted) until it has waited `passes` times, or the
    server has served `lists` LISTs."""

    def run(sleep: Sleep) -> Awaitable[None]:
        backoff = Backoff(BACKOFF_INITIAL_S, BACKOFF_MAX_S, random.Random(3))
        return SlicePublisher(
            kube, NAME, lambda generation, uid: [], backoff=backoff, sleep=sleep
        ).run()

    return waits_of(server, run, passes, lists=lists)


@pytest.mark.parametrize(("watch", "retry_after"), [("429", "1"), ("410", None)])
def test_a_server_refusing_every_watch_is_not_stormed(
    api: tuple[Server, Kube], watch: str, retry_after: str | None
) -> None:
    server, kube = api
    server.watch, server.retry_after = watch, retry_after
    waits = publish(server, kube, 16)
    assert server.requests.count("LIST") == server.requests.count("WATCH") == 16
    # Growing, never back at the first step although every LIST succeeded.
    assert waits[8] > 4 * BACKOFF_MAX_S / 10, waits
    assert min(waits) >= float(retry_after or 0)
    # The steady pace: a pass every 30-60 s once the backoff is at its cap.
    assert all(w >= 30 for w in waits[-3:]), waits
    assert first_minute(waits) <= 30, (first_minute(waits), waits)


def test_a_watch_that_delivers_resets_the_backoff(api: tuple[Server, Kube]) -> None:
    server, kube = api
    server.watch = "event"
    waits = publish(server, kube, 1, lists=5)
    # Each watch delivered an event and ended: listed again at once, never a wait.
    assert waits == []


def test_an_answered_list_ends_an_outage(api: tuple[Server, Kube]) -> None:
    server, kube = api
    server.watch, server.retry_after = "410", None
    server.list_codes = [503] * 5 + [200] + [503] * 2
    waits = publish(server, kube, 8)
    first, watch, second = waits[:5], waits[5], waits[6:]
    assert first[4] > 8 * BACKOFF_INITIAL_S, waits  # grown over the first outage
    assert watch <= BACKOFF_INITIAL_S, waits  # the watch's own backoff, at its first step
    # The second outage (a control-plane upgrade after a downgrade) starts afresh.
    assert second[0] <= BACKOFF_INITIAL_S, waits
