"""`limits.py` against the API server: every rule it states, refused by both.

The API server is the authority on what a ResourceSlice may be; the driver already
lets a dry run of its real slices decide the counter layout, and a refused write
re-probes. `limits.py` stays for what the server cannot give: a message before
anything is sent (`neuron-dra slices`, the unit tests of every instance type, the
agent's log), and the few rules the server does not state: those that span the
slices of a pool, which no single write can break, and one attribute published
under two spellings. This module proves it states the server's rules and no others: each
case breaks one rule of a valid pool, and the release's own server, dry-run,
must refuse what `limits.py` refuses. Where the driver is stricter on purpose
(the strictest rule of the releases it supports, so a pool stays valid across an
upgrade), the case says which releases accept it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from consts import DRIVER_NAME
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.resources.limits import CounterLayout, validate_pool, validate_slice
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.resources.taints import Unhealthy
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster

Obj = dict[str, Any]
BESIDE, OWN = CounterLayout.BESIDE_DEVICES, CounterLayout.OWN_SLICE
SLICES = "/apis/resource.k8s.io/v1/resourceslices"

pytestmark = [pytest.mark.e2e, pytest.mark.versions(check="slice limits")]


@dataclass(frozen=True)
class Server:
    cluster: Cluster
    minor: int
    layout: CounterLayout
    pool: list[Obj]  # valid, with counters and a tainted device, in this server's layout

    def refusal(self, slice_: Obj) -> str | None:
        """The server's reason for refusing `slice_` (dry run), or None if it takes it."""
        try:
            self.cluster.request("POST", SLICES, slice_, query={"dryRun": "All"})
        except ApiException as err:
            # 422 for a broken rule; 400 where the value cannot even be decoded.
            assert err.status in (400, 422), err
            return str(json.loads(err.body or "{}").get("message", err.body))
        return None


@pytest.fixture(scope="module")
def server(e2e_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # Counters and taints reach validation only where their gates are on: before 1.36
    # the server drops both fields, unchecked.
    gates = (
        {"DRAPartitionableDevices": True, "DRADeviceTaints": True}
        if e2e_binaries.minor < 36
        else {}
    )
    root = build_fake_node(
        tmp_path_factory.mktemp("limits") / "node",
        "trn2u.48xlarge",
        ultraserver=FakeUltraServer("us-l", 0),
    )
    inventory = discover(root).inventory
    with Cluster(e2e_binaries, feature_gates=gates) as cluster:
        layout = cluster.counter_layout()
        options = SliceOptions(
            "limits-node", unhealthy=(Unhealthy(3, "hardware"),), counter_layout=layout
        )
        yield Server(cluster, e2e_binaries.minor, layout, build_slices(inventory, options))


def devices_slice(pool: list[Obj]) -> Obj:
    return cast(Obj, pool[-1]["spec"])


def counters_slice(pool: list[Obj]) -> Obj:
    return cast(Obj, pool[0]["spec"])


def device(pool: list[Obj], i: int = 0) -> Obj:
    return cast(Obj, devices_slice(pool)["devices"][i])


def plain_devices(pool: list[Obj], n: int, **fields: Any) -> list[Obj]:
    """`n` copies of device 0 with new names, no counters and no taints, plus `fields`."""
    base = {k: v for k, v in device(pool).items() if k not in ("consumesCounters", "taints")}
    return [dict(copy.deepcopy(base), name=f"d{i}", **fields) for i in range(n)]


def counter_set(name: str, n: int) -> Obj:
    return {"name": name, "counters": {f"c{j}": {"value": "1"} for j in range(n)}}


def consumption(name: str, n: int) -> Obj:
    return {"counterSet": name, "counters": {f"c{j}": {"value": "1"} for j in range(n)}}


def attribute(name: str, value: Obj) -> Callable[[list[Obj]], None]:
    return lambda p: device(p)["attributes"].update({name: value})


def consume(*consumptions: Obj) -> Callable[[list[Obj]], None]:
    return lambda p: device(p).update(consumesCounters=list(consumptions))


def add_sets(*sets: Obj) -> Callable[[list[Obj]], None]:
    """Beside the pool's own set, which its devices keep consuming."""
    return lambda p: counters_slice(p)["sharedCounters"].extend(sets)


def with_sets_and_devices(p: list[Obj], sets: list[Obj], devices: list[Obj]) -> None:
    counters_slice(p)["sharedCounters"] = sets
    devices_slice(p)["devices"] = devices


TAINT = {"key": f"{DRIVER_NAME}/t", "value": "v", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Case:
    id: str
    breaks: Callable[[list[Obj]], None]
    message: str  # what `limits.py` says, a substring
    layouts: tuple[CounterLayout, ...] = (BESIDE, OWN)
    # Releases (minor versions) whose server accepts it: the driver is stricter there.
    accepted_from: int | None = None
    accepted_until: int | None = None
    slice_: Callable[[list[Obj]], Obj] = lambda p: p[-1]  # which slice to send

    def server_accepts(self, minor: int) -> bool:
        if self.accepted_from is not None:
            return minor >= self.accepted_from
        return self.accepted_until is not None and minor <= self.accepted_until


def spec_case(id_: str, change: Obj, message: str) -> Case:
    return Case(id_, lambda p: devices_slice(p).update(change), message)


CASES = [
    spec_case("driver", {"driver": "Neuron_AWS"}, "spec.driver: 'Neuron_AWS' is not a DNS"),
    spec_case(
        "pool name",
        {"pool": {"name": "Pool!", "generation": 1, "resourceSliceCount": 1}},
        "spec.pool.name",
    ),
    spec_case(
        "pool generation",
        {"pool": {"name": "p", "generation": -1, "resourceSliceCount": 1}},
        "spec.pool.generation",
    ),
    spec_case(
        "slice count",
        {"pool": {"name": "p", "generation": 1, "resourceSliceCount": 0}},
        "spec.pool.resourceSliceCount",
    ),
    Case(
        "no node selection",
        lambda p: devices_slice(p).pop("nodeName"),
        "exactly one node selection field",
    ),
    spec_case("two node selections", {"allNodes": True}, "exactly one node selection field"),
    Case(
        "129 devices",
        lambda p: devices_slice(p).update(devices=plain_devices(p, 129)),
        "spec.devices: 129 devices, at most 128",
    ),
    # 1.34 allows 128 tainted devices; 1.35 allows 64, so a bigger 1.34 pool would be
    # refused after an upgrade.
    Case(
        "65 tainted devices",
        lambda p: devices_slice(p).update(devices=plain_devices(p, 65, taints=[TAINT])),
        "spec.devices: 65 devices, at most 64",
        accepted_until=34,
    ),
    Case(
        "65 devices with counters",
        lambda p: devices_slice(p).update(
            devices=[
                dict(d, consumesCounters=[consumption("neuron-node", 1)])
                for d in plain_devices(p, 65)
            ]
        ),
        "spec.devices: 65 devices, at most 64",
        layouts=(OWN,),
    ),
    Case("device name", lambda p: device(p).update(name="Neuron_0"), "is not a DNS label"),
    Case(
        "duplicate device",
        lambda p: device(p, 1).update(name=device(p)["name"]),
        "duplicate 'neurondevice0'",
    ),
    Case(
        "33 attributes",
        lambda p: device(p)["attributes"].update({f"a{i}": {"int": i} for i in range(33)}),
        "capacities, at most 32",
    ),
    Case("attribute domain", attribute("Bad_Domain/x", {"int": 1}), "is not a DNS subdomain"),
    Case("attribute identifier", attribute("bad-name", {"int": 1}), "is not a C identifier"),
    Case("attribute length", attribute("a" * 33, {"int": 1}), "is not a C identifier"),
    Case("two values", attribute("two", {"int": 1, "string": "a"}), "exactly one of"),
    Case("no value", attribute("none", {}), "exactly one of"),
    Case("int64", attribute("big", {"int": 2**63}), "is not an int64"),
    Case("bool", attribute("flag", {"bool": "yes"}), "is not a bool"),
    Case("string length", attribute("long", {"string": "y" * 65}), "at most 64 characters"),
    Case("version", attribute("v", {"version": "2.24.7.0"}), "is not a semantic version"),
    Case(
        "version length", attribute("v", {"version": "1.0.0-" + "a" * 60}), "at most 64 characters"
    ),
    # 1.38 refuses what earlier releases take: a version number over 18 digits (it would
    # not fit an int64), a qualified name with two slashes.
    Case(
        "version digits",
        attribute("v", {"version": "1.0." + "9" * 19}),
        "is not a semantic version",
        accepted_until=37,
    ),
    Case(
        "two slashes",
        attribute(f"{DRIVER_NAME}/a/b", {"int": 1}),
        "more than one slash",
        accepted_until=37,
    ),
    Case(
        "capacity",
        lambda p: device(p)["capacity"].update({"c": {"value": "eight"}}),
        "is not a quantity",
    ),
    # 1.34 allows 4 taints on a device, 1.35 16: a pool must survive a downgrade too.
    Case(
        "5 taints",
        lambda p: device(p).update(
            taints=[dict(TAINT, key=f"{DRIVER_NAME}/t{i}") for i in range(5)]
        ),
        "taints: more than 4",
        accepted_from=35,
    ),
    # Counter sets, in the slice that holds them.
    Case(
        "counter set name",
        lambda p: counters_slice(p)["sharedCounters"][0].update(name="Neuron_Node"),
        "is not a unique DNS label",
        slice_=lambda p: p[0],
    ),
    Case(
        "duplicate counter set",
        lambda p: counters_slice(p)["sharedCounters"].append(
            copy.deepcopy(counters_slice(p)["sharedCounters"][0])
        ),
        "is not a unique DNS label",
        slice_=lambda p: p[0],
    ),
    Case(
        "empty counter set",
        add_sets({"name": "s", "counters": {}}),
        "counters: required",
        slice_=lambda p: p[0],
    ),
    Case(
        "counter name",
        add_sets({"name": "s", "counters": {"Bad_C": {"value": "1"}}}),
        "'Bad_C' is not a DNS label",
        slice_=lambda p: p[0],
    ),
    Case(
        "counter value",
        add_sets({"name": "s", "counters": {"c": {"value": "one"}}}),
        "is not a quantity",
        slice_=lambda p: p[0],
    ),
    Case(
        "33 counters in a set",
        add_sets(counter_set("s", 33)),
        "counters: 33 counters, at most 32",
        layouts=(OWN,),
        slice_=lambda p: p[0],
    ),
    Case(
        "9 counter sets",
        add_sets(*(counter_set(f"s{i}", 1) for i in range(8))),
        "9 counter sets, at most 8",
        layouts=(OWN,),
        slice_=lambda p: p[0],
    ),
    Case(
        "33 counters in a slice",
        lambda p: counters_slice(p).update(
            sharedCounters=[counter_set(f"s{i}", 11) for i in range(3)]
        ),
        "spec.sharedCounters: 33 counters, at most 32",
        layouts=(BESIDE,),
    ),
    Case(
        "devices beside counters",
        lambda p: counters_slice(p).update(devices=devices_slice(p)["devices"][:1]),
        "only one of sharedCounters or devices",
        layouts=(OWN,),
        slice_=lambda p: p[0],
    ),
    Case(
        "empty devices beside counters",
        lambda p: counters_slice(p).update(devices=[]),
        "only one of sharedCounters or devices",
        layouts=(OWN,),
        slice_=lambda p: p[0],
    ),
    # Consumptions, on a device.
    Case(
        "3 consumptions",
        consume(*(consumption(f"s{i}", 1) for i in range(3))),
        "consumesCounters: 3 counter sets, at most 2",
        layouts=(OWN,),
    ),
    Case("consumption set name", consume(consumption("Bad_Set", 1)), "is not a DNS label"),
    Case(
        "consumption listed twice",
        consume(consumption("neuron-node", 1), consumption("neuron-node", 1)),
        "listed twice",
    ),
    Case(
        "empty consumption",
        consume({"counterSet": "neuron-node", "counters": {}}),
        "counters: required",
    ),
    Case(
        "33 counters consumed",
        consume(consumption("s", 33)),
        "counters: 33 counters, at most 32",
        layouts=(OWN,),
    ),
    Case(
        "34 counters on a device",
        lambda p: with_sets_and_devices(
            p,
            [counter_set("s", 17), counter_set("t", 16), counter_set("u", 1)],
            [
                dict(
                    plain_devices(p, 1)[0],
                    consumesCounters=[
                        consumption("s", 17),
                        consumption("t", 16),
                        consumption("u", 1),
                    ],
                )
            ],
        ),
        "consumesCounters: 34 counters, at most 32",
        layouts=(BESIDE,),
    ),
    Case(
        "unknown counter set",
        consume(consumption("absent", 1)),
        "'absent' is not in spec.sharedCounters",
        layouts=(BESIDE,),
    ),
    Case(
        "unknown counter",
        consume({"counterSet": "neuron-node", "counters": {"other": {"value": "1"}}}),
        "not a counter of 'neuron-node'",
        layouts=(BESIDE,),
    ),
    Case(
        "1056 counters consumed in a slice",
        lambda p: with_sets_and_devices(
            p,
            [counter_set("s", 32)],
            [dict(d, consumesCounters=[consumption("s", 32)]) for d in plain_devices(p, 33)],
        ),
        "spec.devices: 1056 counter consumptions, at most 1024",
        layouts=(BESIDE,),
    ),
]


def test_the_valid_pool_passes_both(server: Server) -> None:
    assert validate_pool(server.pool, server.layout) == []
    assert [server.refusal(s) for s in server.pool] == [None] * len(server.pool)
    # The pool really carries what the rules are about.
    assert counters_slice(server.pool)["sharedCounters"]
    assert any(d.get("taints") for d in devices_slice(server.pool)["devices"])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_is_the_servers(
    server: Server, case: Case, record_property: Callable[[str, object], None]
) -> None:
    if server.layout not in case.layouts:
        pytest.skip(
            f"a rule of the {'/'.join(case.layouts)} layout; this server takes {server.layout}"
        )
    pool = copy.deepcopy(server.pool)
    case.breaks(pool)
    sent = case.slice_(pool)
    ours = validate_slice(sent, server.layout)
    assert any(case.message in problem for problem in ours), ours
    theirs = server.refusal(sent)
    if case.server_accepts(server.minor):
        assert theirs is None, f"1.{server.minor} now refuses it too: {theirs}"
    else:
        assert theirs is not None, f"limits.py refuses what 1.{server.minor} accepts: {ours}"


def newer(slice_: Obj) -> Obj:
    found = copy.deepcopy(slice_)
    found["spec"]["pool"]["generation"] += 1
    return found


# Rules the server does not state. Across slices, no single write breaks them, and the
# scheduler then ignores the pool. One attribute twice, bare and qualified, is taken,
# and CEL then reads either (Go's map order) where `matchAttribute` reads the qualified.
# Only `validate_pool` says why.
DRIVER_CASES = [
    (
        "generations disagree",
        lambda p: p.append(newer(p[-1])),
        "the slices disagree on spec.pool.generation",
    ),
    (
        "slice count wrong",
        lambda p: [s["spec"]["pool"].update(resourceSliceCount=3) for s in p],
        "spec.pool.resourceSliceCount: 3, the pool has",
    ),
    (
        "device in two slices",
        lambda p: p.append(copy.deepcopy(p[-1])),
        "device names are unique in a pool",
    ),
    (
        "qualified twice",
        attribute(f"{DRIVER_NAME}/deviceId", {"int": 1}),
        "same name as another entry",
    ),
]


@pytest.mark.parametrize(
    ("name", "breaks", "message"), DRIVER_CASES, ids=[c[0] for c in DRIVER_CASES]
)
def test_rules_the_server_does_not_state(
    server: Server, name: str, breaks: Callable[[list[Obj]], None], message: str
) -> None:
    pool = copy.deepcopy(server.pool)
    breaks(pool)
    problems = validate_pool(pool, server.layout)
    assert any(message in p for p in problems), problems
    assert [server.refusal(s) for s in pool] == [None] * len(pool)


def test_a_counter_set_missing_from_the_pool_is_the_drivers_alone(server: Server) -> None:
    if server.layout is not OWN:
        pytest.skip("beside the devices, a reference is checked within the slice")
    pool = copy.deepcopy(server.pool)
    consume(consumption("absent", 1))(pool)
    problems = validate_pool(pool, OWN)
    assert any("'absent' is not in the pool's sharedCounters" in p for p in problems), problems
    assert server.refusal(pool[-1]) is None
