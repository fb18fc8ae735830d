"""Deciding what the API server serves from its answers to dry runs.

The answers here come from a model of each release's ResourceSlice handling
(fields of a disabled gate dropped, then the release's validation), applied to
the slices the driver really builds; the decisions are pure functions of them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from neuron_dra.agent.objects.slice import decode
from neuron_dra.agent.slices.features import (
    Answer,
    Uses,
    accepted_layout,
    choose_layout,
    judge,
    log_lines,
    taint_probe,
)
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.resources.limits import CounterLayout, validate_slice
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from tests.sysfs_tree import FakeNode

Json = dict[str, Any]
OWN, BESIDE = CounterLayout.OWN_SLICE, CounterLayout.BESIDE_DEVICES
BOTH, NODE = UltraServerDevices.BOTH, UltraServerDevices.NODE


def served(release_layout: CounterLayout, gate: bool, body: Json) -> Json | None:
    """What a server answers a dry-run create of `body`: the object, or None (422).

    `release_layout`: the layout that release validates (1.34: beside; 1.35+: own slice);
    `gate`: DRAPartitionableDevices, whose fields a server without it drops first.
    """
    obj = copy.deepcopy(body)
    if not gate:
        obj["spec"].pop("sharedCounters", None)
        for device in obj["spec"].get("devices") or []:
            device.pop("consumesCounters", None)
    return None if validate_slice(obj, release_layout) else obj


def judge_json(sent: Sequence[Json], returned: Sequence[Json | None]) -> Answer:
    """`judge` of slices as the API server's JSON, decoded as the probe decodes them."""
    return judge([decode(s) for s in sent], [None if r is None else decode(r) for r in returned])


def answer(root: Any, layout: CounterLayout, release: CounterLayout, gate: bool) -> Answer:
    options = SliceOptions("us-0", counter_layout=layout)
    sent = build_slices(discover(root).inventory, options)
    returned: list[Json | None] = []
    for body in sent:  # as the probe does: stop at the first refusal
        returned.append(served(release, gate, body))
        if returned[-1] is None:
            break
    return judge_json(sent, returned)


@pytest.mark.parametrize(
    ("release", "gate", "answers", "chosen"),
    [
        # 1.34 and 1.35 as shipped: the gate is off, the fields vanish in either layout.
        (BESIDE, False, {OWN: Answer.DROPPED, BESIDE: Answer.DROPPED}, None),
        (OWN, False, {OWN: Answer.DROPPED, BESIDE: Answer.DROPPED}, None),
        # 1.34 with the gate on: a device may only use its own slice's counters.
        (BESIDE, True, {OWN: Answer.REFUSED, BESIDE: Answer.KEPT}, BESIDE),
        # 1.35+ with the gate on (1.36 and 1.37 by default): counters or devices per slice.
        (OWN, True, {OWN: Answer.KEPT, BESIDE: Answer.REFUSED}, OWN),
    ],
)
def test_the_layout_each_release_keeps(
    fake_node: FakeNode,
    release: CounterLayout,
    gate: bool,
    answers: dict[CounterLayout, Answer],
    chosen: CounterLayout | None,
) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-a", 0))
    got = {layout: answer(root, layout, release, gate) for layout in CounterLayout}
    assert got == answers
    assert choose_layout(got) is chosen
    if chosen is None:  # accepted without counters: what a forced `both` still publishes
        assert accepted_layout(got) is OWN


def test_judge_needs_every_slice_and_every_counter() -> None:
    counters: Json = {"spec": {"sharedCounters": [{"name": "neuron-node", "counters": {}}]}}
    devices: Json = {
        "spec": {
            "devices": [
                {"name": "d0", "consumesCounters": [{"counterSet": "neuron-node", "counters": {}}]}
            ]
        }
    }
    sent: list[Json] = [counters, devices]
    assert judge_json(sent, sent) is Answer.KEPT
    assert judge_json(sent, [counters, None]) is Answer.REFUSED
    assert judge_json(sent, [None]) is Answer.REFUSED  # the probe stops at the first refusal
    assert judge_json(sent, [counters, {"spec": {"devices": [{"name": "d0"}]}}]) is Answer.DROPPED
    assert judge_json(sent, [{"spec": {}}, devices]) is Answer.DROPPED


def test_the_newest_layout_wins_when_both_keep_counters() -> None:
    assert choose_layout({OWN: Answer.KEPT, BESIDE: Answer.KEPT}) is OWN
    assert choose_layout({OWN: Answer.REFUSED}) is None
    assert accepted_layout({OWN: Answer.REFUSED, BESIDE: Answer.REFUSED}) is None


def test_an_upgrade_is_one_line_naming_version_and_layouts() -> None:
    before, after = Uses(BOTH, BESIDE), Uses(BOTH, OWN)
    assert log_lines("v1.36.3", "trn2u-0", before, after, auto=True) == [
        (
            logging.INFO,
            "API server v1.36.3 serves counters in their own slice: re-laying pool trn2u-0 "
            "(was: counters beside devices)",
        )
    ]
    assert log_lines("v1.34.4", "trn2u-0", after, before, auto=True) == [
        (
            logging.INFO,
            "API server v1.34.4 serves counters beside devices: re-laying pool trn2u-0 "
            "(was: counters in their own slice)",
        )
    ]


def test_losing_counters_warns_and_says_what_is_published() -> None:
    lines = log_lines("v1.35.4", "n", Uses(BOTH, OWN), Uses(NODE, None), auto=True)
    assert lines == [
        (
            logging.WARNING,
            "API server v1.35.4 serves no shared counters: re-laying pool n "
            "(was: counters in their own slice); publishing only the whole-node device",
        )
    ]
    lines = log_lines("v1.36.3", "n", Uses(NODE, None), Uses(BOTH, OWN), auto=True)
    assert lines == [
        (
            logging.INFO,
            "API server v1.36.3 serves counters in their own slice: re-laying pool n "
            "(was: no shared counters)",
        )
    ]


def test_first_probe_and_unchanged_probes() -> None:
    [(level, line)] = log_lines("v1.37.2", "n", None, Uses(BOTH, OWN), auto=True)
    assert level == logging.INFO
    assert line == (
        "API server v1.37.2 serves shared counters: publishing pool n with counters in "
        "their own slice"
    )
    [(level, line)] = log_lines("v1.34.4", "n", None, Uses(NODE, None), auto=True)
    assert level == logging.WARNING and "publishing only the whole-node device" in line
    assert log_lines("v1.34.4", "n", None, Uses(NODE, None), auto=False) == []
    assert log_lines("v1.34.4", "n", None, Uses(BOTH, None), auto=True) == []  # no UltraServer
    assert log_lines("v1.37.2", "n", Uses(BOTH, OWN), Uses(BOTH, OWN), auto=True) == []


def test_taints_are_reported_when_they_come_and_go() -> None:
    [(level, line)] = log_lines("v", "n", None, Uses(taints=False), auto=True)
    assert (level, line) == (
        logging.WARNING,
        "the API server drops device taints: unhealthy devices are withdrawn",
    )
    assert log_lines("v", "n", Uses(taints=False), Uses(taints=False), auto=True) == []
    [(level, line)] = log_lines("v", "n", Uses(taints=False), Uses(), auto=True)
    assert level == logging.INFO and "serves device taints" in line


def test_informational_taints_are_one_line_when_off_and_when_they_change() -> None:
    [(level, line)] = log_lines("v1.34.4", "n", None, Uses(notices=False), auto=True)
    assert level == logging.INFO and "drops or refuses informational device taints" in line
    assert log_lines("v", "n", Uses(notices=False), Uses(notices=False), auto=True) == []
    assert log_lines("v1.37.2", "n", None, Uses(), auto=True) == []  # served: nothing to say
    [(_, line)] = log_lines("v", "n", Uses(notices=False), Uses(), auto=True)
    assert "serves informational device taints" in line


def test_probes_dry_run_slices_of_the_nodes_own_pool(fake_node: FakeNode) -> None:
    """A dry run passes admission too, and the plugin may write only its node's pool."""
    probe = taint_probe("trn2-7")
    assert (probe["spec"]["driver"], probe["spec"]["nodeName"]) == ("neuron.aws.com", "trn2-7")
    assert probe["spec"]["pool"]["name"] == "trn2-7"
    assert validate_slice(probe, OWN) == []
    # The counter-layout probe dry-runs the very slices the node publishes.
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-a", 0))
    for layout in CounterLayout:
        sent = build_slices(discover(root).inventory, SliceOptions("trn2-7", counter_layout=layout))
        assert {s["spec"]["pool"]["name"] for s in sent} == {"trn2-7"}


def test_cores_are_one_line_at_start_and_one_per_change() -> None:
    [(level, line)] = log_lines("v1.35.4", "n", None, Uses(BOTH, None), auto=True, cores=True)
    assert (level, line) == (
        logging.WARNING,
        "the API server drops shared counters (DRAPartitionableDevices off): NeuronCores are "
        "not published as devices, whole devices only",
    )
    first = log_lines("v1.37.2", "n", None, Uses(BOTH, OWN, cores=True), auto=True, cores=True)
    assert first[-1] == (
        logging.INFO,
        "publishing each logical NeuronCore as a device, drawing on its device's counter",
    )
    assert (
        log_lines(
            "v",
            "n",
            Uses(BOTH, OWN, cores=True),
            Uses(BOTH, OWN, cores=True),
            auto=True,
            cores=True,
        )
        == []
    )
    [(level, line)] = log_lines(
        "v1.34.4", "n", Uses(BOTH, OWN, cores=True), Uses(BOTH, BESIDE), auto=False, cores=True
    )[1:]
    assert line == (
        "NeuronCores are not published as devices: with counters beside devices they break a "
        "ResourceSlice limit"
    )
    # An operator who turned cores off hears nothing of them.
    assert log_lines("v1.35.4", "n", None, Uses(BOTH, None), auto=True, cores=False) == []
