"""The watchdog that keeps API calls to their deadline."""

from __future__ import annotations

import socket

from neuron_dra.agent.apiclient.deadline import Watchdog


def test_a_nearer_deadline_is_kept_while_a_far_one_waits() -> None:
    """The watchdog is woken only for a deadline nearer than its nearest: one that comes
    after a far one must still end its call in time."""
    watchdog = Watchdog()
    far_end, far_peer = socket.socketpair()
    near_end, near_peer = socket.socketpair()
    with far_end, far_peer, near_end, near_peer:
        far = watchdog.watch(far_end, 3600)
        near = watchdog.watch(near_end, 0.05)
        near_end.settimeout(30)
        # The blocked read ends when the watchdog shuts the socket down: b"" at once.
        assert near_end.recv(1) == b""
        assert watchdog.done(near)
        assert not watchdog.done(far)


def test_finished_calls_do_not_pile_up() -> None:
    watchdog = Watchdog()
    end, peer = socket.socketpair()
    with end, peer:
        for _ in range(10_000):
            assert not watchdog.done(watchdog.watch(end, 3600))
        assert len(watchdog._heap) <= 64 + 1
