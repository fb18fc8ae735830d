"""Which held devices the slices treat as held: those held long enough."""

from __future__ import annotations

from neuron_dra.agent.slices.holdoff import already_held, hold_off

AFTER = 60.0


def test_a_new_hold_waits_and_says_when_it_is_due() -> None:
    state = hold_off({}, frozenset({"neurondevice3"}), now=100.0, after_s=AFTER)
    assert state.withdrawn == frozenset()
    assert state.since == {"neurondevice3": 100.0}
    assert state.next_due == 160.0


def test_a_hold_long_enough_is_withdrawn() -> None:
    state = hold_off({"neurondevice3": 100.0}, frozenset({"neurondevice3"}), 160.0, AFTER)
    assert (state.withdrawn, state.next_due) == (frozenset({"neurondevice3"}), None)


def test_a_hold_that_ends_first_is_forgotten_and_never_withdrawn() -> None:
    """A claim of a few seconds: nothing to withdraw, nothing left waiting, and a new
    hold of the same device starts its own wait."""
    first = hold_off({}, frozenset({"neurondevice3"}), 100.0, AFTER)
    ended = hold_off(first.since, frozenset(), 105.0, AFTER)
    assert (ended.since, ended.withdrawn, ended.next_due) == ({}, frozenset(), None)
    again = hold_off(ended.since, frozenset({"neurondevice3"}), 150.0, AFTER)
    assert (again.withdrawn, again.next_due) == (frozenset(), 210.0)


def test_the_next_due_is_the_earliest_waiting_hold() -> None:
    since = {"neurondevice0": 10.0, "neurondevice1": 30.0, "neurondevice2": 0.0}
    held = frozenset(since)
    state = hold_off(since, held, 65.0, AFTER)
    assert state.withdrawn == {"neurondevice2"}
    assert state.next_due == 70.0


def test_devices_held_at_start_are_due_at_once() -> None:
    """A restarted agent keeps what a previous instance withdrew withdrawn."""
    held = frozenset({"neurondevice0", "neuronnode"})
    state = hold_off(already_held(held, 5.0, AFTER), held, 5.0, AFTER)
    assert (state.withdrawn, state.next_due) == (held, None)


def test_zero_withdraws_at_once() -> None:
    state = hold_off({}, frozenset({"neurondevice0"}), 7.0, 0.0)
    assert (state.withdrawn, state.next_due) == (frozenset({"neurondevice0"}), None)
