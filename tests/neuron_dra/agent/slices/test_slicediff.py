"""The publisher's comparison of stored and desired slices (pure; the API side is in e2e)."""

from __future__ import annotations

import copy
from typing import Any

from neuron_dra.agent.objects.slice import ResourceSlice, decode
from neuron_dra.agent.slices.slicediff import (
    Pairing,
    adopt,
    dropped_fields,
    pair,
    replacement,
    same,
    split_pool,
)

Json = dict[str, Any]
TAINT = {"key": "neuron.aws.com/unhealthy", "value": "MemEccUncorrected", "effect": "NoExecute"}
COUNTERS = [{"name": "neuron-node", "counters": {"devices": {"value": "2"}}}]
CONSUMES = [{"counterSet": "neuron-node", "counters": {"devices": {"value": "1"}}}]


def device(name: str, *taints: Json, **fields: Any) -> Json:
    found: Json = {"name": name, "attributes": {"deviceId": {"int": int(name[-1])}}, **fields}
    if taints:
        found["taints"] = [dict(t) for t in taints]
    return found


def slice_(
    name: str | None, pool: str = "node-a", generation: int = 1, place: int = 0, **spec: Any
) -> Json:
    """A slice as the driver lays it out (`name` None) or as the server stores it, which
    keeps the generated name's fixed part."""
    metadata: Json = {"generateName": f"node-a-neuron.aws.com-{place}-"}
    if name:
        metadata["name"] = name
    metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "node-a"}]
    pool_ = {"name": pool, "generation": generation, "resourceSliceCount": 1}
    return {
        "metadata": metadata,
        "spec": {"driver": "neuron.aws.com", "nodeName": "node-a", "pool": pool_, **spec},
    }


def stored_(name: str, **fields: Any) -> ResourceSlice:
    """A slice as the server stores it, decoded as the publisher decodes its answers."""
    return decode(slice_(name, **fields))


def test_a_taint_time_the_server_added_is_no_difference() -> None:
    stored = [stored_("s1", devices=[device("d0"), device("d1", dict(TAINT, timeAdded="T0"))])]
    desired = [slice_(None, devices=[device("d0"), device("d1", TAINT)])]
    assert not same(stored, desired)  # what the server holds is not what was sent
    assert same(stored, adopt(desired, stored, frozenset()))


def test_a_stored_taint_keeps_its_time_and_a_new_one_gets_its_own() -> None:
    stored = [stored_("s1", devices=[device("d0"), device("d1", dict(TAINT, timeAdded="T0"))])]
    sick = dict(TAINT, value="DeviceMissing", timeAdded="T2")
    desired = [
        slice_(None, devices=[device("d0", sick), device("d1", dict(TAINT, timeAdded="T1"))])
    ]
    [adopted] = adopt(desired, stored, frozenset())
    d0, d1 = adopted["spec"]["devices"]
    assert d1["taints"] == [dict(TAINT, timeAdded="T0")]  # the problem was published at T0
    assert d0["taints"] == [sick]
    assert desired[0]["spec"]["devices"][1]["taints"][0]["timeAdded"] == "T1"  # not mutated
    # Another value or effect is another taint: its time is its own.
    moved = [slice_(None, devices=[device("d0"), device("d1", dict(TAINT, effect="NoSchedule"))])]
    [other] = adopt(moved, stored, frozenset())
    assert "timeAdded" not in other["spec"]["devices"][1]["taints"][0]
    assert not same(stored, [other])


def test_a_dropped_field_is_named_and_left_out_of_comparisons() -> None:
    sent = slice_(
        "s1",
        sharedCounters=COUNTERS,
        devices=[device("d0", consumesCounters=CONSUMES), device("d1", consumesCounters=CONSUMES)],
    )
    stored = stored_("s1", devices=[device("d0"), device("d1")])
    dropped = dropped_fields(sent, stored)
    assert sorted(dropped) == [
        ("spec", "devices", "[]", "consumesCounters"),
        ("spec", "sharedCounters"),
    ]
    assert not same([stored], [sent])
    assert same([stored], adopt([sent], [stored], dropped))
    again = slice_("s1", devices=[device("d0"), device("d1")])
    assert dropped_fields(again, decode(copy.deepcopy(again))) == frozenset()


def test_empty_values_are_what_the_server_omits() -> None:
    sent = slice_(None, devices=[])
    stored = stored_("s1")
    assert dropped_fields(sent, stored) == frozenset()
    assert same([stored], [sent])


def test_slices_of_another_pool_are_foreign() -> None:
    ours, old = stored_("b-ours"), stored_("a-old", pool="node-a-old")
    assert split_pool([ours, old], "node-a") == ([ours], [old])


def test_slices_pair_by_place_then_by_content() -> None:
    devices = stored_("a-devices", place=1, devices=[device("d0"), device("d1")])
    counters = stored_("b-counters", place=0, sharedCounters=COUNTERS)
    wanted_counters = slice_(None, generation=2, place=0, sharedCounters=COUNTERS)
    wanted_devices = slice_(
        None, generation=2, place=1, devices=[device("d0"), device("d1", TAINT)]
    )
    plan = pair([devices, counters], [wanted_counters, wanted_devices])
    # By list position the device slice would have become the counter slice.
    assert plan.updates == ((counters, wanted_counters), (devices, wanted_devices))
    assert (plan.creates, plan.deletes) == ((), ())

    # A slice only becomes one of its own place: the new place is created.
    grown = pair([devices], [wanted_counters, wanted_devices])
    assert (grown.updates, grown.creates) == (((devices, wanted_devices),), (wanted_counters,))
    shrunk = pair([devices, counters], [wanted_devices])
    assert (shrunk.updates, shrunk.deletes) == (((devices, wanted_devices),), (counters,))


def test_slices_named_otherwise_are_replaced_so_the_walk_meets_devices_first() -> None:
    """Slices of a driver that named them without a place (or by hand) are not updated
    in place, where their random names would keep ordering the allocator's walk."""
    old_json = slice_("node-a-neuron.aws.com-x7k2p", devices=[device("d0")])
    old_json["metadata"]["generateName"] = "node-a-neuron.aws.com-"
    hand_made_json = slice_("mine", devices=[device("d1")])
    del hand_made_json["metadata"]["generateName"]
    old, hand_made = decode(old_json), decode(hand_made_json)
    wanted = slice_(None, generation=2, devices=[device("d0")])
    assert not same([old], [wanted])
    plan = pair([old, hand_made], [wanted])
    assert (plan.updates, plan.creates, plan.deletes) == ((), (wanted,), (hand_made, old))


def test_among_slices_of_one_place_the_same_content_is_kept() -> None:
    first = stored_("s1", devices=[device("d0")])
    second = stored_("s2", devices=[device("d1")])
    wanted = slice_(None, generation=2, devices=[device("d1")])
    assert pair([first, second], [wanted]) == Pairing(((second, wanted),), (), (first,))


def test_an_update_keeps_what_others_put_on_the_slice() -> None:
    stored_json = slice_("s1", devices=[device("d0")])
    stored_json["metadata"].update(resourceVersion="7", labels={"team": "ml"}, managedFields=[{}])
    stored = decode(stored_json)
    body = replacement(stored, slice_(None, generation=2, devices=[device("d1")]))
    assert body["metadata"]["name"] == "s1" and body["metadata"]["resourceVersion"] == "7"
    assert body["metadata"]["labels"] == {"team": "ml"}
    assert "managedFields" not in body["metadata"]
    assert body["metadata"]["generateName"] == stored.generate_name
    assert body["spec"]["devices"] == [device("d1")]
