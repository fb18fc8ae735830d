"""Simulated Neuron nodes on a real control plane: Node object, kubelet side, fake
sysfs and the real `neuron-dra run`, one call each."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from consts import DRIVER_NAME, LABEL_INSTANCE_TYPE
from neuron_dra.agent.claims.preparer import Step
from neuron_dra.hardware.fakenode import (
    DEFAULT_DRIVER_VERSION,
    Counters,
    FakeUltraServer,
    build_fake_node,
)
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.kubeletside import KUBELETSIDE_CDI_ANNOTATION, KubeletSide
from neuron_dra_harness.processes import Component

Obj = dict[str, Any]
DEVICE_CLASSES = Path(__file__).resolve().parents[2] / "deploy" / "deviceclass.yaml"
PLUGIN = [sys.executable, "-m", "neuron_dra"]
# The same command, killing itself after one step of a claim (see crashing_plugin.py).
# -P: the script's directory stays off sys.path, where tests/e2e modules would shadow others.
CRASHING_PLUGIN = [sys.executable, "-P", str(Path(__file__).with_name("crashing_plugin.py"))]


class PluginNode:
    """A node of the cluster with its kubelet side and a DRA plugin process for it."""

    cluster: Cluster
    name: str
    side: KubeletSide
    plugin: Component | None

    def launch(self, label: str, argv: list[str], *, wait: bool) -> Component:
        """Start the plugin; with `wait`, until registered and its slices are published."""
        self.plugin = self.cluster.start_process(f"{label}-{self.name}", argv)
        if wait:
            self.side.wait_for_plugin(DRIVER_NAME)
            # The whole pool: the scheduler ignores one it has not seen complete.
            self.cluster.wait_for(f"slices of {self.name}", self.pool)
        return self.plugin

    def stop_plugin(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the plugin: SIGTERM lets it finish what it is doing, SIGKILL does not."""
        if self.plugin is not None:
            self.cluster.stop_process(self.plugin, sig)
            self.plugin = None

    def slices(self) -> list[Obj]:
        return self.cluster.list_objects(
            "resource.k8s.io/v1",
            "ResourceSlice",
            field_selector=f"spec.nodeName={self.name},spec.driver={DRIVER_NAME}",
        )

    def pool(self) -> list[Obj] | None:
        """The node's slices once they form one whole pool (all of one generation, as many
        as they count), else None: a pool is written slice by slice."""
        slices = self.slices()
        pools = {
            (s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
            for s in slices
        }
        if len(pools) != 1 or next(iter(pools))[1] != len(slices):
            return None
        return slices


@dataclass
class SimulatedNode(PluginNode):
    cluster: Cluster
    name: str
    instance_type: str
    sysfs: Path
    side: KubeletSide
    plugin: Component | None = None
    extra_args: list[str] = field(default_factory=list)

    @property
    def cdi_dir(self) -> Path:
        return self.side.cdi_dir

    @property
    def checkpoint(self) -> Path:
        return self.side.plugins_dir / DRIVER_NAME / "checkpoint.json"

    def start_plugin(
        self,
        *,
        crash_after: Step | None = None,
        python_options: Sequence[str] = (),
        wait: bool = True,
    ) -> Component:
        """Start `neuron-dra run`; with `crash_after`, one that SIGKILLs itself after that
        step of the first claim to reach it. `python_options` go to the interpreter."""
        command = PLUGIN if crash_after is None else [*CRASHING_PLUGIN, crash_after]
        argv = [
            command[0],
            *python_options,
            *command[1:],
            "run",
            f"--node-name={self.name}",
            f"--sysfs-root={self.sysfs}",
            f"--cdi-root={self.cdi_dir}",
            f"--kubelet-registrar-directory-path={self.side.registry_dir}",
            f"--kubelet-plugins-directory-path={self.side.plugins_dir}",
            f"--kubeconfig={self.cluster.agent_kubeconfig}",
            # The held form at once, as the tests of what is withdrawn expect; a node's
            # own extra_args may set another hold-off (the last value wins).
            "--withdraw-after=0",
            *self.extra_args,
        ]
        return self.launch("plugin", argv, wait=wait)

    def devices(self) -> list[Obj]:
        """The devices the node's slices publish, slice by slice."""
        return [d for s in self.slices() for d in s["spec"].get("devices") or []]

    def device_names(self) -> list[str]:
        """The names of `devices`, sorted."""
        return sorted(d["name"] for d in self.devices())

    def cdi_files(self) -> list[str]:
        """The claims' CDI specs (device metadata specs are `metadata_files`)."""
        return sorted(
            p.name for p in self.cdi_dir.iterdir() if p.name.startswith(f"{DRIVER_NAME}-")
        )

    def metadata_files(self) -> list[str]:
        """The device metadata CDI specs, and the files they mount (relative to the
        plugin directory), sorted."""
        specs = [p.name for p in self.cdi_dir.iterdir() if p.name.startswith(f"{DRIVER_NAME}_")]
        plugin = self.side.plugins_dir / DRIVER_NAME
        files = [str(p.relative_to(plugin)) for p in plugin.glob("dra-device-metadata/*/*/*")]
        return sorted(specs + files)

    def checkpointed(self) -> set[str]:
        if not self.checkpoint.exists():
            return set()
        return set(json.loads(self.checkpoint.read_text())["claims"])


def add_simulated_node(
    cluster: Cluster,
    name: str,
    instance_type: str,
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    ultraserver: FakeUltraServer | None = None,
    lnc: int | None = None,
    extra_args: list[str] | None = None,
    start: bool = True,
    counters: Counters = Counters.NONE,  # the NeuronCore counters; the metrics tests ask
    kubelet_root: Path | None = None,  # `Cluster.start_kubelet_side`'s root_dir
) -> SimulatedNode:
    cluster.add_node(name, {LABEL_INSTANCE_TYPE: instance_type})
    return simulate_node(
        cluster,
        name,
        instance_type,
        driver_version=driver_version,
        ultraserver=ultraserver,
        lnc=lnc,
        extra_args=extra_args,
        start=start,
        counters=counters,
        kubelet_root=kubelet_root,
    )


def simulate_node(
    cluster: Cluster,
    name: str,
    instance_type: str,
    *,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    ultraserver: FakeUltraServer | None = None,
    lnc: int | None = None,
    extra_args: list[str] | None = None,
    start: bool = True,
    counters: Counters = Counters.NONE,
    kubelet_root: Path | None = None,
) -> SimulatedNode:
    """The machine behind an existing Ready Node (one someone else created, an
    autoscaler say): its kubelet side, a fake sysfs of `instance_type` and the plugin."""
    side = cluster.start_kubelet_side(name, root_dir=kubelet_root)
    sysfs = build_fake_node(
        cluster.workdir / "sysfs" / name,
        instance_type,
        driver_version=driver_version,
        ultraserver=ultraserver,
        lnc=lnc,
        counters=counters,
    )
    node = SimulatedNode(cluster, name, instance_type, sysfs, side, extra_args=extra_args or [])
    if start:
        node.start_plugin()
    return node


def container_view(pod: Obj, container: str) -> Obj:
    """What the kubelet side resolved through CDI for one container: env and device nodes."""
    views = json.loads(pod["metadata"]["annotations"][KUBELETSIDE_CDI_ANNOTATION])
    view: Obj = views[container]
    return view


def env_of(pod: Obj, container: str) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container_view(pod, container)["env"])


@contextlib.contextmanager
def trn2_and_ultraserver(binaries: Binaries, server: str) -> Iterator[dict[str, SimulatedNode]]:
    """A cluster with the release's default gates and the driver's DeviceClasses, and two
    nodes: "trn2", a trn2.48xlarge, and "us-0", a trn2u.48xlarge of UltraServer `server`."""
    with Cluster(binaries) as cluster:
        cluster.apply_yaml(DEVICE_CLASSES.read_text())
        yield {
            "trn2": add_simulated_node(cluster, "trn2", "trn2.48xlarge"),
            "us-0": add_simulated_node(
                cluster, "us-0", "trn2u.48xlarge", ultraserver=FakeUltraServer(server, 0)
            ),
        }
