"""The cluster's nodes as the allocator sees them: devices, counters, labels.

A node comes from its ResourceSlices: those a simulated node would publish
(the inventory discovery reads from a fake sysfs tree, built in memory by
`simnode`, through the driver's own slice builder, so the attributes are
exactly what the driver publishes), or those a
live API server holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from consts import (
    ATTR_DEVICE_ID,
    ATTR_INSTANCE_TYPE,
    ATTR_LOGICAL_NEURON_CORE,
    ATTR_NEURON_DRIVER_VERSION,
    ATTR_RESOURCE_TYPE,
    ATTR_ULTRASERVER_MODES,
    ATTR_ULTRASERVER_NODE_ID_2,
    ATTR_ULTRASERVER_NODE_ID_4,
    ATTR_ULTRASERVER_SERVER_ID_2,
    ATTR_ULTRASERVER_SERVER_ID_4,
    CAPACITY_CORES,
    DRIVER_NAME,
    RESOURCE_TYPE_DEVICE,
)
from neuron_dra.hardware.driverformats import format_for
from neuron_dra.hardware.fakenode import DEFAULT_DRIVER_VERSION, FakeUltraServer
from neuron_dra.hardware.instance_types import INSTANCE_TYPES
from neuron_dra.hardware.inventory import NeuronDevice, NodeInventory, UltraServer
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.nodelabels import owned_labels
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.tools import manifests
from neuron_dra.tools.cel import DeviceView, Quantity
from neuron_dra.tools.simnode import simulated_inventory
from neuron_dra.tools.simulate.claims import DeviceClass, InputError, Json, parse_device_class
from neuron_dra.tools.simulate.progress import Progress, quiet

T = TypeVar("T")

# The fleet scale the project measures (docs/contributors/fleet-scale.md): a simulated
# trn2.48xlarge with its NeuronCores takes about NODE_MIB MiB, so 5,000 take some 1 GiB.
MAX_SIMULATED_NODES = 5_000
NODE_MIB = 0.2
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Where the API server serves DeviceTaintRules: 1.37, 1.36 (beta, off by default), 1.34-1.35.
TAINT_RULE_VERSIONS = manifests.TAINT_RULE_VERSIONS
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

DeviceKey = tuple[str, str, str]  # driver, pool, device
CounterKey = tuple[str, str, str, str]  # driver, pool, counter set, counter


@dataclass(frozen=True)
class SimDevice:
    driver: str
    pool: str
    name: str
    view: DeviceView
    consumes: tuple[tuple[CounterKey, Fraction], ...]
    taints: tuple[Json, ...]
    rules: tuple[str, ...] = ()  # DeviceTaintRules whose taints `taints` carries

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)

    def taint_sources(self) -> list[tuple[Json, str | None]]:
        """Each taint with the DeviceTaintRule that put it there (None: the slice's own)."""
        own = len(self.taints) - len(self.rules)
        return [(t, None if i < own else self.rules[i - own]) for i, t in enumerate(self.taints)]

    def attribute(self, qualified: str) -> Any:
        domain, _, name = qualified.partition("/")
        return self.view.attributes.get(domain, {}).get(name)


@dataclass
class SimNode:
    name: str
    labels: dict[str, str]
    devices: list[SimDevice]
    counters: dict[CounterKey, Fraction]
    inventory: NodeInventory | None = None

    @property
    def instance_type(self) -> str | None:
        if self.inventory is not None and self.inventory.instance_type:
            return self.inventory.instance_type
        return self.labels.get(INSTANCE_TYPE_LABEL)


def node_from_slices(
    name: str,
    slices: Sequence[Json],
    *,
    labels: Mapping[str, str] | None = None,
    inventory: NodeInventory | None = None,
) -> SimNode:
    """A node from its ResourceSlices; only each pool's newest generation counts."""
    newest: dict[tuple[str, str], int] = {}
    for obj in slices:
        spec = obj["spec"]
        pool = (spec["driver"], spec["pool"]["name"])
        newest[pool] = max(newest.get(pool, 0), int(spec["pool"].get("generation", 0)))
    devices: list[SimDevice] = []
    counters: dict[CounterKey, Fraction] = {}
    for obj in slices:
        spec = obj["spec"]
        driver, pool = spec["driver"], spec["pool"]["name"]
        if int(spec["pool"].get("generation", 0)) != newest[(driver, pool)]:
            continue
        for counter_set in spec.get("sharedCounters") or []:
            for counter, value in (counter_set.get("counters") or {}).items():
                key = (driver, pool, counter_set["name"], counter)
                counters[key] = Quantity.parse(str(value["value"])).value
        for device in spec.get("devices") or []:
            body = device.get("basic", device)  # v1beta1 slices nest fields under `basic`
            consumes = tuple(
                ((driver, pool, c["counterSet"], counter), Quantity.parse(str(v["value"])).value)
                for c in body.get("consumesCounters") or []
                for counter, v in (c.get("counters") or {}).items()
            )
            view = DeviceView.from_slice_device(driver, {"name": device["name"], **body})
            devices.append(
                SimDevice(
                    driver, pool, device["name"], view, consumes, tuple(body.get("taints") or ())
                )
            )
    if inventory is None:
        inventory = inventory_from_devices(devices)
    all_labels = {HOSTNAME_LABEL: name, **(labels or {})}
    if inventory is not None and inventory.instance_type:
        all_labels.setdefault(INSTANCE_TYPE_LABEL, inventory.instance_type)
    return SimNode(name, all_labels, devices, counters, inventory)


def inventory_from_devices(devices: Sequence[SimDevice]) -> NodeInventory | None:
    """The driver's view of a node, recovered from what it published (for live clusters)."""
    ours = [d for d in devices if d.driver == DRIVER_NAME]
    if not ours:
        return None
    attrs: dict[str, Any] = dict(ours[0].view.attributes.get(DRIVER_NAME, {}))
    neuron_devices = []
    for device in ours:
        own = device.view.attributes.get(DRIVER_NAME, {})
        if own.get(ATTR_RESOURCE_TYPE) != RESOURCE_TYPE_DEVICE or ATTR_DEVICE_ID not in own:
            continue  # the node device, or a NeuronCore (which carries its device's id)
        cores = device.view.capacity.get(DRIVER_NAME, {}).get(CAPACITY_CORES)
        neuron_devices.append(
            NeuronDevice(int(own[ATTR_DEVICE_ID]), None if cores is None else int(cores.value), ())
        )
    ultraserver = None
    if ATTR_ULTRASERVER_MODES in attrs:  # a trn3 node has the ids of its reservation's unit only
        modes = str(attrs[ATTR_ULTRASERVER_MODES])
        ultraserver = UltraServer(
            _optional(attrs, ATTR_ULTRASERVER_SERVER_ID_2, str),
            _optional(attrs, ATTR_ULTRASERVER_SERVER_ID_4, str),
            _optional(attrs, ATTR_ULTRASERVER_NODE_ID_2, int),
            _optional(attrs, ATTR_ULTRASERVER_NODE_ID_4, int),
            tuple(int(m) for m in modes.split("_") if m.isdigit()),
        )
    lnc = attrs.get(ATTR_LOGICAL_NEURON_CORE)
    return NodeInventory(
        instance_type=str(attrs[ATTR_INSTANCE_TYPE]) if ATTR_INSTANCE_TYPE in attrs else None,
        driver_version=str(attrs.get(ATTR_NEURON_DRIVER_VERSION) or "") or None,
        lnc=None if lnc is None else int(lnc),
        devices=tuple(sorted(neuron_devices, key=lambda d: d.index)),
        ultraserver=ultraserver,
    )


def _optional(attrs: dict[str, Any], name: str, kind: Callable[[Any], T]) -> T | None:
    return kind(attrs[name]) if name in attrs else None


def simulated_nodes(
    counts: Sequence[tuple[str, int]],
    *,
    ultraserver_devices: UltraServerDevices = UltraServerDevices.BOTH,
    driver_version: str | None = None,
    cores: bool = True,
    progress: Progress = quiet,
) -> list[SimNode]:
    """Nodes `<type>-<i>`; UltraServer nodes are grouped 4 to a server in creation order,
    and carry the labels the driver keeps on its Node.

    `cores`: each logical NeuronCore is a device too, as the driver publishes them where
    the API server serves partitionable devices (the counters in a slice of their own, as
    from Kubernetes 1.35). At most MAX_SIMULATED_NODES in all, else an InputError before
    any is built; `progress(built, total)` is called after each node.
    """
    nodes = []
    layout = CounterLayout.OWN_SLICE if cores else CounterLayout.BESIDE_DEVICES
    total = sum(count for _, count in counts)
    if total > MAX_SIMULATED_NODES:
        raise InputError(
            f"--node asks for {total:,} nodes; simulate builds at most {MAX_SIMULATED_NODES:,} "
            f"(about {NODE_MIB} MiB each for a trn2.48xlarge)"
        )
    for instance_type, _ in counts:
        if instance_type not in INSTANCE_TYPES:
            known = ", ".join(sorted(INSTANCE_TYPES))
            raise InputError(f"unknown instance type {instance_type!r}; known: {known}")
    version = driver_version or DEFAULT_DRIVER_VERSION
    try:
        format_for(version)
    except ValueError as err:
        raise InputError(f"--driver-version {version}: {err}") from None
    for instance_type, count in counts:
        spec = INSTANCE_TYPES[instance_type]
        for i in range(count):
            name = f"{instance_type}-{i}"
            unit = FakeUltraServer(f"us-{i // 4}", i % 4) if spec.ultraserver else None
            inventory = simulated_inventory(
                name, instance_type, ultraserver=unit, driver_version=version
            )
            options = SliceOptions(
                name, ultraserver_devices=ultraserver_devices, counter_layout=layout, cores=cores
            )
            slices = build_slices(inventory, options)
            # And the labels the driver keeps on its Node, for nodeSelectors and
            # topology keys on UltraServer units.
            labels = {k: v for k, v in owned_labels(inventory).items() if v is not None}
            nodes.append(node_from_slices(name, slices, labels=labels, inventory=inventory))
            progress(len(nodes), total)
    return nodes


def parse_node_counts(values: Sequence[str]) -> list[tuple[str, int]]:
    out = []
    for value in values:
        instance_type, sep, count = value.partition("=")
        if not sep:
            count = "1"
        if not count.isdigit() or int(count) < 1:
            raise InputError(f"--node {value!r}: expected TYPE=COUNT with COUNT >= 1")
        out.append((instance_type, int(count)))
    return out


def parse_taken(values: Sequence[str]) -> list[tuple[str, str]]:
    """`NODE:DEV,DEV` -> (node, device name); a bare number N means neurondeviceN."""
    out = []
    for value in values:
        node, sep, devices = value.rpartition(":")
        if not sep or not node or not devices:
            raise InputError(f"--taken {value!r}: expected NODE:DEVICE[,DEVICE...]")
        for device in devices.split(","):
            name = f"neurondevice{device}" if device.isdigit() else device
            out.append((node, name))
    return out


class LiveCluster(NamedTuple):
    nodes: list[SimNode]
    classes: dict[str, DeviceClass]
    claims: list[Json]  # every ResourceClaim, allocated or not
    taint_rules: list[Json]  # DeviceTaintRules, in the newest version the server serves
    pod_groups: list[Json]  # PodGroups, likewise


def live_cluster(kubeconfig: Path) -> LiveCluster:
    """Nodes, DeviceClasses, ResourceClaims, DeviceTaintRules and PodGroups of a running
    cluster."""
    # Deferred: the Kubernetes client takes ~0.3 s to import, which only this path needs.
    from neuron_dra.agent.apiclient.errors import ApiError  # noqa: PLC0415
    from neuron_dra.agent.apiclient.kube import Kube  # noqa: PLC0415

    kube = Kube.connect(kubeconfig)
    try:
        get = kube.list_sync
        slices = get("/apis/resource.k8s.io/v1/resourceslices")
        claims = get("/apis/resource.k8s.io/v1/resourceclaims")
        classes = {
            c.name: c
            for c in map(parse_device_class, get("/apis/resource.k8s.io/v1/deviceclasses"))
        }
        nodes_objs = get("/api/v1/nodes")
        taint_versions = [f"resource.k8s.io/{v}" for v in TAINT_RULE_VERSIONS]
        rules = _newest(get, taint_versions, "devicetaintrules", manifests.TAINT_RULE_KIND)
        groups = _newest(get, manifests.POD_GROUP_VERSIONS, "podgroups", manifests.POD_GROUP_KIND)
    except ApiError as err:
        raise InputError(f"reading the cluster: {err}") from None
    finally:
        kube.close()
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes_objs}
    by_node: dict[str, list[Json]] = {}
    for obj in slices:
        node = obj["spec"].get("nodeName")
        if node:  # slices for all nodes or a node selector (network devices) are not simulated
            by_node.setdefault(node, []).append(obj)
    nodes = [node_from_slices(n, s, labels=labels.get(n)) for n, s in sorted(by_node.items())]
    return LiveCluster(nodes, classes, claims, rules, groups)


def _newest(
    get: Callable[[str], list[Json]], versions: Sequence[str], plural: str, kind: str
) -> list[Json]:
    """The objects of a kind in the first of `versions` the server serves; none where it
    serves none of them (then none exists)."""
    from neuron_dra.agent.apiclient.errors import ApiError  # noqa: PLC0415

    for version in versions:
        try:
            objs = get(f"/apis/{version}/{plural}")
        except ApiError as err:
            if err.status == 404:
                continue
            raise
        for obj in objs:  # a list's items carry no kind of their own
            obj.setdefault("apiVersion", version)
            obj.setdefault("kind", kind)
        return objs
    return []
