from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory, UltraServer
from neuron_dra.resources.limits import CounterLayout, validate_pool, validate_slice
from neuron_dra.resources.slices import (
    CoreLayout,
    SliceOptions,
    UltraServerDevices,
    build_slices,
)
from neuron_dra.resources.taints import Notice, Unhealthy
from tests.sysfs_tree import FakeNode, write

Json = dict[str, Any]


def slices_of(root: Path, **options: Any) -> list[Json]:
    return build_slices(discover(root).inventory, SliceOptions(node_name="node-a", **options))


def devices_of(slices: list[Json]) -> dict[str, Json]:
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def partition(devices: dict[str, Json], attribute: str) -> set[frozenset[int]]:
    """Sets of device ids that share one value of `attribute`."""
    groups: dict[str, set[int]] = defaultdict(set)
    for device in devices.values():
        value = device["attributes"].get(attribute)
        if value is not None:
            groups[value["string"]].add(device["attributes"]["deviceId"]["int"])
    return {frozenset(g) for g in groups.values()}


NODES = [(name, None) for name in sorted(INSTANCE_TYPES)] + [
    ("trn2u.48xlarge", FakeUltraServer("us-1", 3))
]


@pytest.mark.parametrize("layout", list(CounterLayout))
@pytest.mark.parametrize(("name", "ultraserver"), NODES)
def test_every_instance_type_passes_the_v1_limits(
    fake_node: FakeNode, name: str, ultraserver: FakeUltraServer | None, layout: CounterLayout
) -> None:
    root = fake_node(name, ultraserver=ultraserver)
    for mode in UltraServerDevices:
        for unhealthy in ((), (Unhealthy(0, "MemEccUncorrected"),)):
            slices = slices_of(
                root,
                ultraserver_devices=mode,
                node_uid="u-1",
                unhealthy=unhealthy,
                counter_layout=layout,
            )
            assert validate_pool(slices, layout) == []
            assert all(validate_slice(s, layout) == [] for s in slices)


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_group_ids_reproduce_the_connected_sets(fake_node: FakeNode, name: str) -> None:
    root = fake_node(name)
    inventory = discover(root).inventory
    devices = devices_of(slices_of(root, ultraserver_devices=UltraServerDevices.DEVICES))
    expected = inventory.connected_sets()
    published = {
        int(attr.split("devicegroup")[1].split("_")[0])
        for d in devices.values()
        for attr in d["attributes"]
        if "devicegroup" in attr
    }
    assert published == set(expected)
    for size, sets in expected.items():
        got = partition(devices, f"resource.aws.com/devicegroup{size}_id")
        if name == "trn1.32xlarge" and size == 1:
            # trn1 pairs share an EFA NIC, so the NIC address groups pairs, as the EFA driver's.
            assert got == {frozenset({i, i + 1}) for i in range(0, 16, 2)}
        else:
            assert got == set(sets)


def efa_hash(*addresses: str) -> str:
    return hashlib.sha256(",".join(sorted(set(addresses))).encode()).hexdigest()[:16]


def test_trn2_group_ids_match_the_efa_driver(fake_node: FakeNode) -> None:
    devices = devices_of(slices_of(fake_node("trn2.48xlarge")))
    attributes = devices["neurondevice2"]["attributes"]
    assert attributes["resource.aws.com/devicegroup1_id"] == {"string": "0000:b3:00.0"}
    row0 = ("0000:c9:00.0", "0000:b4:00.0", "0000:b3:00.0", "0000:ca:00.0")
    assert attributes["resource.aws.com/devicegroup4_id"] == {"string": efa_hash(*row0)}
    row1 = ("0000:6c:00.0", "0000:57:00.0", "0000:56:00.0", "0000:6d:00.0")
    assert attributes["resource.aws.com/devicegroup8_id"] == {"string": efa_hash(*row0, *row1)}


def test_torus_attributes(fake_node: FakeNode) -> None:
    attributes = devices_of(slices_of(fake_node("trn1n.32xlarge")))["neurondevice9"]["attributes"]
    assert attributes["topology_x"] == {"int": 2}
    assert attributes["topology_y"] == {"int": 1}
    assert attributes["topology4_id"] == {"int": 2}
    assert attributes["topology8_id"] == {"int": 1}


def test_a_trn2_device_publishes_the_documented_attributes(fake_node: FakeNode) -> None:
    device = devices_of(slices_of(fake_node("trn2.48xlarge", lnc=1)))["neurondevice0"]
    assert set(device["attributes"]) == {
        "deviceId",
        "instanceType",
        "neuronDriverVersion",
        "draDriverVersion",
        "resourceType",
        "topology_x",
        "topology_y",
        "topology4_id",
        "topology8_id",
        "logicalNeuronCore",
        "serialNumber",
        "deviceName",
        "resource.aws.com/devicegroup1_id",
        "resource.aws.com/devicegroup4_id",
        "resource.aws.com/devicegroup8_id",
        "resource.aws.com/devicegroup16_id",
    }
    assert device["attributes"]["instanceType"] == {"string": "trn2.48xlarge"}
    assert device["attributes"]["neuronDriverVersion"] == {"string": "2.24.7.0"}
    assert device["attributes"]["resourceType"] == {"string": "neuron_device"}
    assert device["attributes"]["logicalNeuronCore"] == {"int": 1}
    assert device["capacity"] == {"cores": {"value": "8"}, "memory": {"value": "96Gi"}}


def test_inf2_line_has_no_torus_attributes(fake_node: FakeNode) -> None:
    device = devices_of(slices_of(fake_node("inf2.24xlarge")))["neurondevice4"]
    attributes = device["attributes"]
    assert "topology_x" not in attributes and "logicalNeuronCore" not in attributes
    assert "topology4_id" not in attributes  # 4 does not divide 6
    assert attributes["resource.aws.com/devicegroup3_id"] == {"string": "3-5"}
    assert attributes["resource.aws.com/devicegroup6_id"] == {"string": "0-5"}


def test_slice_shape_follows_upstream_drivers(fake_node: FakeNode) -> None:
    [s] = slices_of(fake_node("inf2.xlarge"), node_uid="1234")
    assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
    assert s["metadata"] == {
        "generateName": "node-a-neuron.aws.com-0-",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": "node-a",
                "uid": "1234",
                "controller": True,
            }
        ],
    }
    assert s["spec"]["driver"] == "neuron.aws.com"
    assert s["spec"]["nodeName"] == "node-a"
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in s["spec"]["devices"]] == ["neurondevice0"]


def test_slices_are_deterministic(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    assert slices_of(root) == slices_of(root)


def per_device(value: int, devices: range = range(16)) -> Json:
    return {f"neurondevice{i}": {"value": str(value)} for i in devices}


def test_ultraserver_devices_and_node_draw_on_one_counter_per_device(fake_node: FakeNode) -> None:
    [s] = slices_of(fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 2)))
    assert s["spec"]["sharedCounters"] == [{"name": "neuron-node", "counters": per_device(1)}]
    devices = devices_of([s])
    assert len(devices) == 17
    node = devices["neuronnode"]
    assert node["consumesCounters"] == [{"counterSet": "neuron-node", "counters": per_device(1)}]
    assert devices["neurondevice3"]["consumesCounters"] == [
        {"counterSet": "neuron-node", "counters": per_device(1, range(3, 4))}
    ]
    assert node["attributes"]["resourceType"] == {"string": "neuron_node"}
    assert node["attributes"]["ultraserverServerId4"] == {"string": "us-1"}
    assert node["attributes"]["ultraserverNodeId4"] == {"int": 2}
    assert node["attributes"]["ultraserverModes"] == {"string": "1_2_4"}
    assert node["capacity"] == {"cores": {"value": "128"}, "memory": {"value": "1536Gi"}}


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        (UltraServerDevices.NODE, ["neuronnode"]),
        (UltraServerDevices.DEVICES, [f"neurondevice{i}" for i in range(16)]),
    ],
)
def test_without_counters_one_kind_is_published(
    fake_node: FakeNode, mode: UltraServerDevices, names: list[str]
) -> None:
    [s] = slices_of(fake_node("trn2u.48xlarge"), ultraserver_devices=mode)
    assert [d["name"] for d in s["spec"]["devices"]] == names
    assert "sharedCounters" not in s["spec"]
    assert all("consumesCounters" not in d for d in s["spec"]["devices"])


def test_only_ultraserver_nodes_have_a_node_device(fake_node: FakeNode) -> None:
    [s] = slices_of(fake_node("trn2.48xlarge"), ultraserver_devices=UltraServerDevices.NODE)
    assert len(s["spec"]["devices"]) == 16 and "sharedCounters" not in s["spec"]


def test_unknown_ultraserver_membership_publishes_devices_only(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    write(root, "sys/class/neuron_device/node_id_4", "busy")
    [s] = slices_of(root)
    assert len(s["spec"]["devices"]) == 16 and "sharedCounters" not in s["spec"]


def test_gaps_leave_other_groups_intact(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    (root / "dev/neuron5").unlink()
    healthy = devices_of(slices_of(fake_node("trn2.48xlarge", name="healthy")))
    devices = devices_of(slices_of(root))
    assert "neurondevice5" not in devices
    for name, device in devices.items():
        assert device == healthy[name] | {"attributes": device["attributes"]}
        assert (
            device["attributes"]["resource.aws.com/devicegroup4_id"]
            == (healthy[name]["attributes"]["resource.aws.com/devicegroup4_id"])
        )


def test_unknown_instance_type_publishes_the_sets_its_sysfs_shows(fake_node: FakeNode) -> None:
    root = fake_node("inf2.48xlarge")
    write(root, "sys/devices/virtual/dmi/id/product_name", "inf9.2xlarge")
    devices = devices_of(slices_of(root))
    assert len(devices) == 12
    device = devices["neurondevice7"]
    attributes = device["attributes"]
    assert attributes["instanceType"] == {"string": "inf9.2xlarge"}
    # The ring of 12 its connected_devices lists: aligned arcs of every dividing size.
    groups = {a.split("/")[1]: v["string"] for a, v in attributes.items() if "devicegroup" in a}
    assert groups == {
        "devicegroup1_id": "7",
        "devicegroup2_id": "6-7",
        "devicegroup3_id": "6-8",
        "devicegroup4_id": "4-7",
        "devicegroup6_id": "6-11",
        "devicegroup12_id": "0-11",
    }
    assert attributes["topology4_id"] == {"int": 1} and "topology8_id" not in attributes
    assert "topology_x" not in attributes and "logicalNeuronCore" not in attributes
    assert device["capacity"] == {"cores": {"value": "2"}}  # no memory: sysfs does not say


def test_missing_driver_version_drops_only_that_attribute(fake_node: FakeNode) -> None:
    root = fake_node("trn1.2xlarge")
    (root / "sys/module/neuron/version").unlink()
    [s] = slices_of(root)
    attributes = s["spec"]["devices"][0]["attributes"]
    assert "neuronDriverVersion" not in attributes and "instanceType" in attributes
    assert validate_slice(s) == []


@pytest.mark.parametrize(
    ("break_it", "error"),
    [
        (lambda d: d["attributes"].update({"x": {"string": "y" * 65}}), "at most 64 characters"),
        (lambda d: d["attributes"].update({"bad-name": {"int": 1}}), "not a C identifier"),
        (lambda d: d["attributes"].update({"v": {"version": "2.24.7.0"}}), "not a semantic"),
        (lambda d: d["attributes"].update({"two": {"int": 1, "string": "a"}}), "exactly one of"),
        (lambda d: d["attributes"].update({f"a{i}": {"int": i} for i in range(20)}), "at most 32"),
        (lambda d: d.update({"name": "Neuron_0"}), "is not a DNS label"),
        (lambda d: d["capacity"].update({"cores": {"value": "eight"}}), "is not a quantity"),
        (
            lambda d: d.update({"consumesCounters": [{"counterSet": "x", "counters": {}}]}),
            "is not in spec.sharedCounters",
        ),
    ],
)
def test_the_limits_check_catches_violations(
    fake_node: FakeNode, break_it: Any, error: str
) -> None:
    [s] = slices_of(fake_node("trn2.48xlarge"))
    broken = copy.deepcopy(s)
    break_it(broken["spec"]["devices"][0])
    problems = validate_slice(broken)
    assert any(error in p for p in problems), problems


def test_the_limits_check_counts_devices(fake_node: FakeNode) -> None:
    [s] = slices_of(fake_node("trn2.48xlarge"))
    s["spec"]["devices"] = [dict(s["spec"]["devices"][0], name=f"d{i}") for i in range(129)]
    assert validate_slice(s) == ["spec.devices: 129 devices, at most 128 allowed"]


def test_an_unhealthy_device_is_tainted(fake_node: FakeNode) -> None:
    unhealthy = (Unhealthy(5, "MemEccUncorrected", "NoExecute"),)
    [s] = slices_of(fake_node("trn2.48xlarge"), unhealthy=unhealthy)
    devices = devices_of([s])
    assert devices["neurondevice5"]["taints"] == [
        {"key": "neuron.aws.com/unhealthy", "value": "MemEccUncorrected", "effect": "NoExecute"}
    ]
    assert [n for n, d in devices.items() if "taints" in d] == ["neurondevice5"]
    assert validate_slice(s) == []


def test_a_taint_is_dated_when_the_problem_was_first_seen(fake_node: FakeNode) -> None:
    # 2023-11-14T22:13:20.9Z: the API stores whole seconds, so the fraction goes.
    unhealthy = (Unhealthy(5, "MemEccUncorrected", since=1_700_000_000.9),)
    devices = devices_of(slices_of(fake_node("trn2.48xlarge"), unhealthy=unhealthy))
    assert devices["neurondevice5"]["taints"] == [
        {
            "key": "neuron.aws.com/unhealthy",
            "value": "MemEccUncorrected",
            "effect": "NoSchedule",
            "timeAdded": "2023-11-14T22:13:20Z",
        }
    ]


def test_the_whole_node_device_keeps_the_first_failures_taint(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    first = Unhealthy(9, "nc_hang", since=1_700_000_000)
    later = Unhealthy(2, "MemEccUncorrected", since=1_700_000_100)
    for unhealthy in ((first,), (later, first)):
        devices = devices_of(slices_of(root, unhealthy=unhealthy))
        [taint] = devices["neuronnode"]["taints"]
        assert (taint["value"], taint["timeAdded"]) == ("nc_hang", "2023-11-14T22:13:20Z")


def test_without_taints_an_unhealthy_device_is_withdrawn(fake_node: FakeNode) -> None:
    unhealthy = (Unhealthy(5, "DeviceMissing"),)
    [s] = slices_of(fake_node("trn2u.48xlarge"), unhealthy=unhealthy, device_taints=False)
    names = [d["name"] for d in s["spec"]["devices"]]
    assert "neurondevice5" not in names and len(names) == 15
    assert "neuronnode" not in names  # the whole node is not whole any more
    assert not any("taints" in d for d in s["spec"]["devices"])


def test_the_whole_node_device_carries_its_devices_taint(fake_node: FakeNode) -> None:
    unhealthy = (Unhealthy(9, "nc_hang"),)
    devices = devices_of(slices_of(fake_node("trn2u.48xlarge"), unhealthy=unhealthy))
    assert devices["neuronnode"]["taints"][0]["value"] == "nc_hang"


def test_notices_are_informational_taints_of_the_device_and_its_cores(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2.48xlarge")
    notices = (
        Notice(5, "neuron.aws.com/unwatched", "NoHealthSource", 1_700_000_000),
        Notice(5, "neuron.aws.com/corrected-ecc", "Hbm", 1_700_000_100),
    )
    unhealthy = (Unhealthy(5, "MemEccUncorrected", since=1_700_000_200),)
    slices = slices_of(root, unhealthy=unhealthy, notices=notices, cores=True)
    devices = devices_of(slices)
    assert [
        (t["key"], t["value"], t["effect"], t["timeAdded"])
        for t in devices["neurondevice5"]["taints"]
    ] == [
        ("neuron.aws.com/unhealthy", "MemEccUncorrected", "NoSchedule", "2023-11-14T22:16:40Z"),
        ("neuron.aws.com/corrected-ecc", "Hbm", "None", "2023-11-14T22:15:00Z"),
        ("neuron.aws.com/unwatched", "NoHealthSource", "None", "2023-11-14T22:13:20Z"),
    ]
    tainted = sorted(n for n, d in devices.items() if "taints" in d)
    # LNC 2: the device's four logical cores with it.
    assert tainted == [
        "neuroncore20",
        "neuroncore21",
        "neuroncore22",
        "neuroncore23",
        "neurondevice5",
    ]
    assert [validate_slice(s) for s in slices] == [[] for _ in slices]


def test_the_whole_node_device_carries_each_notice_first_seen(fake_node: FakeNode) -> None:
    notices = (
        Notice(3, "neuron.aws.com/corrected-ecc", "Sram", 1_700_000_100),
        Notice(7, "neuron.aws.com/corrected-ecc", "Hbm", 1_700_000_000),
        Notice(1, "neuron.aws.com/unwatched", "NoHealthSource", 1_700_000_500),
    )
    devices = devices_of(slices_of(fake_node("trn2u.48xlarge"), notices=notices))
    assert [(t["key"], t["value"], t["effect"]) for t in devices["neuronnode"]["taints"]] == [
        ("neuron.aws.com/corrected-ecc", "Hbm", "None"),
        ("neuron.aws.com/unwatched", "NoHealthSource", "None"),
    ]


# --- where the shared counters go ----------------------------------------------

COUNTER_SET = [{"name": "neuron-node", "counters": per_device(1)}]


def test_counters_beside_devices_stay_in_the_one_slice(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    default = slices_of(root)
    assert default == slices_of(root, counter_layout=CounterLayout.BESIDE_DEVICES)
    [s] = default
    assert s["spec"]["sharedCounters"] == COUNTER_SET
    assert s["spec"]["pool"]["resourceSliceCount"] == 1
    assert len(s["spec"]["devices"]) == 17


def test_counters_in_their_own_slice_lead_the_pool(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 2))
    counters, devices = slices_of(root, node_uid="u-1", counter_layout=CounterLayout.OWN_SLICE)
    assert counters["spec"] == {
        "driver": "neuron.aws.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 2},
        "sharedCounters": COUNTER_SET,
    }  # no `devices` key at all: 1.35+ refuse even an empty list beside counters
    # Owned alike, each in its place: the counters first, then the devices.
    assert counters["metadata"]["ownerReferences"] == devices["metadata"]["ownerReferences"]
    assert counters["metadata"]["generateName"] == "node-a-neuron.aws.com-0-"
    assert devices["metadata"]["generateName"] == "node-a-neuron.aws.com-1-"
    assert "sharedCounters" not in devices["spec"]
    assert devices["spec"]["pool"] == counters["spec"]["pool"]
    published = devices_of([devices])
    assert len(published) == 17
    assert published["neuronnode"]["consumesCounters"] == [
        {"counterSet": "neuron-node", "counters": per_device(1)}
    ]
    # The devices are the same in both layouts; only the counters moved.
    beside = slices_of(root, node_uid="u-1", counter_layout=CounterLayout.BESIDE_DEVICES)
    assert devices_of(beside) == published


@pytest.mark.parametrize(("name", "ultraserver"), NODES)
def test_the_layout_matters_only_where_counters_are_published(
    fake_node: FakeNode, name: str, ultraserver: FakeUltraServer | None
) -> None:
    root = fake_node(name, ultraserver=ultraserver)
    for mode in UltraServerDevices:
        beside = slices_of(root, ultraserver_devices=mode)
        own = slices_of(root, ultraserver_devices=mode, counter_layout=CounterLayout.OWN_SLICE)
        if any("sharedCounters" in s["spec"] for s in beside):
            assert (len(beside), len(own)) == (1, 2)
        else:
            assert own == beside


def test_both_layouts_are_deterministic_to_the_byte(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    for layout in CounterLayout:
        first, second = (json.dumps(slices_of(root, counter_layout=layout)) for _ in range(2))
        assert first == second


def big_ultraserver_node(devices: int) -> NodeInventory:
    """More devices than one slice holds: no instance type has them, the rules still apply."""
    return NodeInventory(
        instance_type=None,
        driver_version="2.24.7.0",
        lnc=None,
        devices=tuple(NeuronDevice(i, 8, ()) for i in range(devices)),
        ultraserver=UltraServer("us-0", "us-0", 0, 0, (1, 2, 4)),
    )


@pytest.mark.parametrize(
    ("layout", "cores", "shape"),
    [
        # (devices per slice, counter sets per slice), in pool order
        (CounterLayout.BESIDE_DEVICES, False, [(31, 1)]),  # 1.34: the counters' slice only
        (CounterLayout.OWN_SLICE, True, [(None, 1), (64, 0), (64, 0), (64, 0), (64, 0), (15, 0)]),
    ],
)
def test_a_pool_of_many_devices_counts_its_slices(
    layout: CounterLayout, cores: bool, shape: list[tuple[int | None, int]]
) -> None:
    options = SliceOptions("node-a", counter_layout=layout, cores=cores)
    slices = build_slices(big_ultraserver_node(30), options)  # 30 devices of 8 cores
    found = [
        (
            len(s["spec"]["devices"]) if "devices" in s["spec"] else None,
            len(s["spec"].get("sharedCounters", [])),
        )
        for s in slices
    ]
    assert found == shape
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(shape)}
    assert validate_pool(slices, layout) == []


def test_the_node_device_reaches_at_most_64_devices() -> None:
    # A counter per device, 32 to a set, and a device draws on at most 2 sets: no Neuron
    # node comes near, and the check names the rule a bigger one would break.
    options = SliceOptions("node-a", counter_layout=CounterLayout.OWN_SLICE)
    assert (
        validate_pool(build_slices(big_ultraserver_node(64), options), CounterLayout.OWN_SLICE)
        == []
    )
    problems = validate_pool(
        build_slices(big_ultraserver_node(65), options), CounterLayout.OWN_SLICE
    )
    assert problems == [
        "slice 2: spec.devices[1].consumesCounters: 3 counter sets, at most 2 allowed"
    ]


def test_each_release_refuses_the_other_layout(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    beside = slices_of(root, counter_layout=CounterLayout.BESIDE_DEVICES)
    own = slices_of(root, counter_layout=CounterLayout.OWN_SLICE)
    assert validate_pool(beside, CounterLayout.OWN_SLICE) == [
        "slice 0: spec: only one of sharedCounters or devices is allowed"
    ]
    problems = validate_pool(own, CounterLayout.BESIDE_DEVICES)
    assert len(problems) == 17
    assert problems[0] == (
        "slice 1: spec.devices[0].consumesCounters[0].counterSet: 'neuron-node' "
        "is not in spec.sharedCounters"
    )


def own_slice_pool(fake_node: FakeNode) -> list[Json]:
    return slices_of(fake_node("trn2u.48xlarge"), counter_layout=CounterLayout.OWN_SLICE)


@pytest.mark.parametrize(
    ("break_it", "error"),
    [
        (
            lambda p: p[0]["spec"].update(devices=[]),
            "slice 0: spec: only one of sharedCounters or devices is allowed",
        ),
        (lambda p: p.pop(0), "is not in the pool's sharedCounters"),
        (
            lambda p: p[0]["spec"]["sharedCounters"][0].update(name="other"),
            "'neuron-node' is not in the pool's sharedCounters",
        ),
        (
            lambda p: p[1]["spec"].update(sharedCounters=[]),
            "slice 1: spec: only one of sharedCounters or devices is allowed",
        ),
        (
            lambda p: p.append(copy.deepcopy(p[0])),
            "'neuron-node' is also in slice 0: counter set names are unique in a pool",
        ),
        (
            lambda p: p.append(copy.deepcopy(p[1])),
            "'neurondevice0' is also in slice 1: device names are unique in a pool",
        ),
        (
            lambda p: p[1]["spec"]["pool"].update(resourceSliceCount=1),
            "slice 1: spec.pool.resourceSliceCount: 1, the pool has 2",
        ),
        (
            lambda p: p[1]["spec"]["pool"].update(generation=2),
            "pool: the slices disagree on spec.pool.generation",
        ),
        (
            lambda p: p[0]["spec"].update(
                sharedCounters=[
                    {"name": f"set{i}", "counters": {"c": {"value": "1"}}} for i in range(9)
                ]
            ),
            "slice 0: spec.sharedCounters: 9 counter sets, at most 8 allowed",
        ),
        (
            lambda p: p[0]["spec"]["sharedCounters"][0].update(
                counters={f"c{i}": {"value": "1"} for i in range(33)}
            ),
            "slice 0: spec.sharedCounters[0].counters: 33 counters, at most 32 allowed",
        ),
        (
            lambda p: p[1]["spec"]["devices"][0]["consumesCounters"].extend(
                {"counterSet": f"set{i}", "counters": {"c": {"value": "1"}}} for i in range(2)
            ),
            "slice 1: spec.devices[0].consumesCounters: 3 counter sets, at most 2 allowed",
        ),
    ],
)
def test_the_pool_check_catches_own_slice_violations(
    fake_node: FakeNode, break_it: Any, error: str
) -> None:
    pool = own_slice_pool(fake_node)
    assert validate_pool(pool, CounterLayout.OWN_SLICE) == []
    break_it(pool)
    problems = validate_pool(pool, CounterLayout.OWN_SLICE)
    assert any(error in p for p in problems), problems


def test_the_1_34_rules_count_counters_per_slice(fake_node: FakeNode) -> None:
    [s] = slices_of(fake_node("trn2u.48xlarge"))
    s["spec"]["sharedCounters"] = [
        {"name": f"set{i}", "counters": {f"c{j}": {"value": "1"} for j in range(11)}}
        for i in range(3)
    ]
    problems = validate_slice(s, CounterLayout.BESIDE_DEVICES)
    assert "spec.sharedCounters: 33 counters, at most 32 allowed" in problems
    # Three sets of 11 break no rule of 1.35+, where only a set's own size is capped.
    assert not any("spec.sharedCounters:" in p for p in validate_slice(s, CounterLayout.OWN_SLICE))


def test_counters_beside_devices_cannot_span_slices(fake_node: FakeNode) -> None:
    # Past 128 devices the 1.34 layout has no valid form; the check says so. (The agent
    # then publishes no cores there.)
    root = fake_node("trn2.48xlarge", lnc=1)  # 16 devices, 128 cores
    options = SliceOptions("node-a", counter_layout=CounterLayout.BESIDE_DEVICES, cores=True)
    problems = validate_pool(
        build_slices(discover(root).inventory, options), options.counter_layout
    )
    assert problems[0] == (
        "slice 1: spec.devices[0].consumesCounters[0].counterSet: 'neuron-node' "
        "is not in spec.sharedCounters"
    )
    options = SliceOptions("node-a", counter_layout=CounterLayout.OWN_SLICE, cores=True)
    assert (
        validate_pool(build_slices(discover(root).inventory, options), options.counter_layout) == []
    )


# --- NeuronCores as devices --------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "lnc", "ultraserver", "cores", "per_core_device", "slices"),
    [
        # The numbers of the layout (1.35+): a counter slice, then devices 64 to a slice.
        ("trn2.48xlarge", 2, None, 64, 4, 3),  # 16 + 64 = 80 devices
        ("trn2.48xlarge", 1, None, 128, 8, 4),  # 16 + 128 = 144
        ("trn2u.48xlarge", 1, FakeUltraServer("us-1", 0), 128, 8, 4),  # 16 + 1 + 128 = 145
        ("inf2.48xlarge", None, None, 24, 2, 2),  # 12 + 24 = 36
        ("inf1.24xlarge", None, None, 64, 4, 3),  # 16 + 64 = 80
    ],
)
def test_each_logical_core_is_a_device_of_its_devices_counter(  # noqa: PLR0917
    fake_node: FakeNode,
    instance_type: str,
    lnc: int | None,
    ultraserver: FakeUltraServer | None,
    cores: int,
    per_core_device: int,
    slices: int,
) -> None:
    root = fake_node(instance_type, lnc=lnc, ultraserver=ultraserver)
    pool = slices_of(root, counter_layout=CounterLayout.OWN_SLICE, cores=True)
    assert len(pool) == slices and validate_pool(pool, CounterLayout.OWN_SLICE) == []
    [counter_set] = pool[0]["spec"]["sharedCounters"]
    devices = devices_of(pool)
    found = {n: d for n, d in devices.items() if n.startswith("neuroncore")}
    assert sorted(found) == sorted(f"neuroncore{i}" for i in range(cores))
    count = len(counter_set["counters"])
    assert counter_set["counters"] == per_device(per_core_device, range(count))
    # Core 5 is on device 5 // per_core_device and takes one of its counter.
    core = found["neuroncore5"]
    parent = 5 // per_core_device
    assert core["attributes"]["resourceType"] == {"string": "neuron_core"}
    assert core["attributes"]["deviceId"] == {"int": parent}
    assert core["attributes"]["coreId"] == {"int": 5}
    assert core["consumesCounters"] == [
        {"counterSet": "neuron-node", "counters": per_device(1, range(parent, parent + 1))}
    ]
    # The whole device takes every core of its counter.
    assert devices[f"neurondevice{parent}"]["consumesCounters"] == [
        {
            "counterSet": "neuron-node",
            "counters": per_device(per_core_device, range(parent, parent + 1)),
        }
    ]


def test_cores_follow_their_devices_health(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")  # LNC 2: device 1 has cores 4-7
    unhealthy = (Unhealthy(1, "nc_hang"),)
    options: dict[str, Any] = {"counter_layout": CounterLayout.OWN_SLICE, "cores": True}
    tainted = devices_of(slices_of(root, unhealthy=unhealthy, **options))
    assert [n for n, d in tainted.items() if "taints" in d] == [
        "neurondevice1",
        "neuroncore4",
        "neuroncore5",
        "neuroncore6",
        "neuroncore7",
    ]
    withdrawn = devices_of(slices_of(root, unhealthy=unhealthy, device_taints=False, **options))
    assert {"neurondevice1", "neuroncore4", "neuroncore7"}.isdisjoint(withdrawn)
    assert {"neurondevice2", "neuroncore8"} <= set(withdrawn)


def test_cores_are_published_only_when_asked_and_never_on_a_node_only_pool(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 0))
    assert not any(n.startswith("neuroncore") for n in devices_of(slices_of(root)))
    node_only = slices_of(root, cores=True, ultraserver_devices=UltraServerDevices.NODE)
    assert list(devices_of(node_only)) == ["neuronnode"]
    # Without the node device, cores alone are reason for counters.
    devices_only = slices_of(
        root,
        cores=True,
        ultraserver_devices=UltraServerDevices.DEVICES,
        counter_layout=CounterLayout.OWN_SLICE,
    )
    assert "neuronnode" not in devices_of(devices_only)
    assert len(devices_of(devices_only)) == 16 + 64
    assert devices_only[0]["spec"]["sharedCounters"][0]["counters"] == per_device(4)


def walk(slices: list[Json]) -> list[str]:
    """Device names in the order the allocator meets them: slices by name (generated
    names sort by their fixed part), then by position in the slice."""
    ordered = sorted(slices, key=lambda s: str(s["metadata"]["generateName"]))
    return [d["name"] for s in ordered for d in s["spec"].get("devices") or []]


@pytest.mark.parametrize("instance_type", ["trn2.48xlarge", "trn2u.48xlarge", "inf2.48xlarge"])
@pytest.mark.parametrize("lnc", [1, 2])
def test_whole_devices_come_before_every_core_in_the_walk(
    fake_node: FakeNode, instance_type: str, lnc: int
) -> None:
    root = fake_node(instance_type, lnc=lnc if instance_type.startswith("trn2") else None)
    slices = slices_of(root, counter_layout=CounterLayout.OWN_SLICE, cores=True)
    order = walk(slices)
    cores = [i for i, name in enumerate(order) if name.startswith("neuroncore")]
    assert cores and cores == list(range(cores[0], len(order)))  # all cores, last
    assert len({s["metadata"]["generateName"] for s in slices}) == len(slices)
    # Asked to, the first core leads, then every whole device, then the other cores.
    leading = walk(
        slices_of(root, counter_layout=CounterLayout.OWN_SLICE, cores=True, core_leads=True)
    )
    behind = [i for i, name in enumerate(leading) if name.startswith("neuroncore")]
    assert leading[0] == "neuroncore0"
    assert behind[1:] == list(range(behind[1], len(leading)))
    assert not any(n.startswith("neuroncore") for n in leading[1 : behind[1]])
    assert sorted(leading) == sorted(order)


def test_the_first_core_published_leads_when_the_first_device_is_held(
    fake_node: FakeNode,
) -> None:
    root = fake_node("trn2.48xlarge", lnc=2)
    held = frozenset({"neurondevice0"})
    order = walk(
        slices_of(
            root, counter_layout=CounterLayout.OWN_SLICE, cores=True, held=held, core_leads=True
        )
    )
    # Device 0's cores are withdrawn: device 1's first leads.
    assert order[:2] == ["neuroncore4", "neurondevice0"]


# 1.34 takes cores only where the pool fits one slice of 128: at LNC 2.
@pytest.mark.parametrize(
    ("layout", "lnc"), [(CounterLayout.BESIDE_DEVICES, 2), (CounterLayout.OWN_SLICE, 1)]
)
def test_cores_of_devices_held_whole_are_not_published(
    fake_node: FakeNode, layout: CounterLayout, lnc: int
) -> None:
    root = fake_node("trn2u.48xlarge", lnc=lnc)
    every = slices_of(root, counter_layout=layout, cores=True)
    assert validate_pool(every, layout) == []
    two = frozenset({"neurondevice0", "neurondevice7"})
    held = slices_of(root, counter_layout=layout, cores=True, held=two)
    before, after = devices_of(every), devices_of(held)
    gone = set(before) - set(after)
    per = 8 // lnc
    cores = {f"neuroncore{n}" for d in (0, 7) for n in range(d * per, d * per + per)}
    # Their cores and the node device share their counters: both go.
    assert gone == cores | {"neuronnode"}
    # The held devices stay as they were, counters and all, and so does everything else.
    assert after == {n: d for n, d in before.items() if n in after}
    shared = [s["spec"].get("sharedCounters") for s in every if "sharedCounters" in s["spec"]]
    assert shared == [s["spec"]["sharedCounters"] for s in held if "sharedCounters" in s["spec"]]
    assert validate_pool(held, layout) == []
    # Held whole, all of them: the pool is the devices and its counters.
    everything = frozenset(f"neurondevice{i}" for i in range(16))
    bare = devices_of(slices_of(root, counter_layout=layout, cores=True, held=everything))
    assert sorted(bare) == sorted(everything)


def test_cores_as_consumable_capacity(fake_node: FakeNode) -> None:
    """The layout measured against partitions (bench/scale.py `capacity`): each device
    shareable, a claim taking physical cores in steps of one logical core, all of them
    when it names no amount; memory not divided."""
    slices = slices_of(fake_node("trn2.48xlarge"), cores=CoreLayout.CAPACITY)
    devices = devices_of(slices)
    assert len(devices) == 16 and not any("consumesCounters" in d for d in devices.values())
    device = devices["neurondevice0"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["cores"] == {
        "value": "8",
        "requestPolicy": {"default": "8", "validRange": {"min": "2", "max": "8", "step": "2"}},
    }
    assert device["capacity"]["memory"]["requestPolicy"] == {
        "default": "0",
        "validRange": {"min": "0"},
    }


# Counters come with cores, or with the node device.
@pytest.mark.parametrize(
    ("instance", "cores"),
    [("trn2.48xlarge", True), ("trn2u.48xlarge", True), ("trn2u.48xlarge", False)],
)
def test_a_device_held_whole_keeps_its_counters(
    fake_node: FakeNode, instance: str, cores: bool
) -> None:
    """What shares its counter (its cores, the node device) is withdrawn; the held
    device is published as it was, drawing on its counter: an allocator that records a
    device's consumption when it allocates it must record the same whatever form the
    pool had then."""
    root = fake_node(instance)
    layout = CounterLayout.OWN_SLICE
    every = devices_of(slices_of(root, counter_layout=layout, cores=cores))
    held = devices_of(
        slices_of(root, counter_layout=layout, cores=cores, held=frozenset({"neurondevice4"}))
    )
    assert held["neurondevice4"] == every["neurondevice4"]
    assert held["neurondevice4"]["consumesCounters"]
    assert held["neurondevice5"] == every["neurondevice5"]
    assert not any(f"neuroncore{n}" in held for n in range(16, 20))
    assert "neuronnode" not in held


def test_what_a_prepared_claim_has_is_never_withdrawn(fake_node: FakeNode) -> None:
    """A core an admin claim has, beside a device another claim holds whole (an
    allocator that exempts admin requests from counters allows it), stays published:
    an allocated device missing from its pool makes such an allocator stop handing out
    the pool's counters. So does a device an admin claim has beside a held node
    device."""
    layout = CounterLayout.OWN_SLICE
    root = fake_node("trn2u.48xlarge")
    held = devices_of(
        slices_of(
            root,
            counter_layout=layout,
            cores=True,
            held=frozenset({"neurondevice4"}),
            kept=frozenset({"neurondevice4", "neuroncore17"}),
        )
    )
    assert "neuroncore17" in held
    assert not any(f"neuroncore{n}" in held for n in (16, 18, 19))
    node = devices_of(
        slices_of(
            root,
            counter_layout=layout,
            cores=True,
            held=frozenset({"neuronnode"}),
            kept=frozenset({"neuronnode", "neurondevice3"}),
        )
    )
    assert sorted(node) == ["neurondevice3", "neuronnode"]
    assert all(d["consumesCounters"] for d in node.values())


def test_the_node_device_held_withdraws_every_device(fake_node: FakeNode) -> None:
    """Held, the node device has every counter: the devices and cores go, and it keeps
    drawing on all of them."""
    layout = CounterLayout.OWN_SLICE
    root = fake_node("trn2u.48xlarge")
    every = devices_of(slices_of(root, counter_layout=layout, cores=True))
    slices = slices_of(root, counter_layout=layout, cores=True, held=frozenset({"neuronnode"}))
    assert validate_pool(slices, layout) == []
    held = devices_of(slices)
    assert list(held) == ["neuronnode"]
    assert held["neuronnode"] == every["neuronnode"]


@pytest.mark.parametrize(
    ("layout", "lnc"), [(CounterLayout.BESIDE_DEVICES, 2), (CounterLayout.OWN_SLICE, 1)]
)
def test_a_held_core_withdraws_its_device_and_the_node_device(
    fake_node: FakeNode, layout: CounterLayout, lnc: int
) -> None:
    """A core held spends part of its device's counter: the whole device and the node
    device, which need all of it, go; the device's other cores, the held core and every
    other device stay as they were, counters and all."""
    root = fake_node("trn2u.48xlarge", lnc=lnc)
    per = 8 // lnc
    every = devices_of(slices_of(root, counter_layout=layout, cores=True))
    held_cores = frozenset({f"neuroncore{2 * per}", f"neuroncore{2 * per + 1}"})
    slices = slices_of(root, counter_layout=layout, cores=True, held=held_cores)
    assert validate_pool(slices, layout) == []
    held = devices_of(slices)
    assert set(every) - set(held) == {"neurondevice2", "neuronnode"}
    assert held == {n: d for n, d in every.items() if n in held}
    # Held whole as well, a device keeps its place; a core and device both held on
    # another device withdraw that device's cores, as a whole hold does.
    both = devices_of(
        slices_of(
            root,
            counter_layout=layout,
            cores=True,
            held=held_cores | {"neurondevice5"},
        )
    )
    assert "neurondevice5" in both
    assert not any(f"neuroncore{5 * per + n}" in both for n in range(per))
    assert "neurondevice2" not in both


def test_a_device_a_prepared_claim_has_stays_beside_its_held_core(fake_node: FakeNode) -> None:
    """An admin claim on a device whose core another claim holds (an allocator that
    exempts admin requests from counters allows it): the device stays published."""
    root = fake_node("trn2.48xlarge")
    held = devices_of(
        slices_of(
            root,
            counter_layout=CounterLayout.OWN_SLICE,
            cores=True,
            held=frozenset({"neuroncore0"}),
            kept=frozenset({"neuroncore0", "neurondevice0"}),
        )
    )
    assert "neurondevice0" in held and "neuroncore0" in held
