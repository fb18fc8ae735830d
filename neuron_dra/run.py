"""`neuron-dra run`: the node agent, one asyncio event loop from start to SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from consts import COUNTER_DEVICES, COUNTER_SET_NODE, DRIVER_NAME
from neuron_dra import leader, limits
from neuron_dra.checkpoint import CheckpointStore
from neuron_dra.discovery import boot_id, discover, log_findings
from neuron_dra.inventory import NodeInventory
from neuron_dra.kube import ApiError, Json, Kube
from neuron_dra.kubelet import KubeletPlugin
from neuron_dra.labels import ultraserver_labels
from neuron_dra.preparer import FAULT_POINTS, FaultHook, Preparer
from neuron_dra.publisher import SlicePublisher
from neuron_dra.slices import SliceOptions, UltraServerDevices, build_slices

log = logging.getLogger("neuron_dra")

# Test-only: names a FAULT_POINTS entry at which the process kills itself with SIGKILL.
FAULT_ENV = "NEURON_DRA_TEST_FAULT"


@dataclass(frozen=True)
class RunOptions:
    node_name: str
    sysfs_root: Path
    cdi_root: Path
    registrar_dir: Path
    plugins_dir: Path
    kubeconfig: Path | None = None
    pod_uid: str | None = None
    health_port: int | None = None
    ultraserver_devices: str = "auto"  # or a UltraServerDevices value
    rediscover_interval_s: float = 60.0


class Agent:
    def __init__(self, options: RunOptions, kube: Kube, started: float) -> None:
        self.options = options
        self._kube = kube
        self._started = started
        self.inventory = self._discover()
        self._mode = UltraServerDevices.BOTH
        plugin_dir = options.plugins_dir / DRIVER_NAME
        self.preparer = Preparer(
            inventory=lambda: self.inventory,
            pool=options.node_name,
            cdi_root=options.cdi_root,
            store=CheckpointStore(plugin_dir / "checkpoint.json"),
            boot_id=self._boot_id(),
            get_claim=kube.get_resource_claim,
            fault=_fault_hook(os.environ.get(FAULT_ENV)),
        )
        self.publisher = SlicePublisher(kube, options.node_name, self._build)
        self.plugin = KubeletPlugin(
            self.preparer,
            registrar_dir=options.registrar_dir,
            plugins_dir=options.plugins_dir,
            pod_uid=options.pod_uid,
            health_port=options.health_port,
        )

    async def run(self, stop: asyncio.Event) -> None:
        self.preparer.start()
        self._mode = await self._ultraserver_mode()
        await self.plugin.start()
        tasks = [
            asyncio.create_task(self._publish(), name="publisher"),
            asyncio.create_task(self.plugin.supervise(), name="registration"),
            asyncio.create_task(self._label_node(), name="labels"),
            asyncio.create_task(self._rediscover(), name="rediscovery"),
            asyncio.create_task(self._report_ready(), name="ready"),
        ]
        try:
            await stop.wait()
        finally:
            log.info("stopping")
            await self.plugin.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _publish(self) -> None:
        lock = self.options.plugins_dir / DRIVER_NAME / "publisher.lock"
        async with leader.held(lock):
            log.info("publishing ResourceSlices for this node")
            await self.publisher.run()

    def _discover(self) -> NodeInventory:
        result = discover(self.options.sysfs_root)
        log_findings(result.findings, log)
        return result.inventory

    def _boot_id(self) -> str:
        found = boot_id(self.options.sysfs_root)
        if found is None:
            log.warning("no boot id: prepared state cannot be told apart across reboots")
        return found or "unknown"

    def _build(self, generation: int, node_uid: str | None) -> list[Json]:
        options = SliceOptions(self.options.node_name, node_uid, generation, self._mode)
        slices = build_slices(self.inventory, options)
        for problem in (p for s in slices for p in limits.validate_slice(s)):
            log.error("slice breaks a resource.k8s.io/v1 limit: %s", problem)
        return slices

    async def _ultraserver_mode(self) -> UltraServerDevices:
        wanted = self.options.ultraserver_devices
        if wanted != "auto":
            return UltraServerDevices(wanted)
        if self.inventory.ultraserver is None:
            return UltraServerDevices.BOTH  # no node device: nothing to choose
        if await _serves_shared_counters(self._kube, self.options.node_name):
            return UltraServerDevices.BOTH
        log.warning(
            "the API server drops shared counters (DRAPartitionableDevices off): publishing "
            "only the whole-node device; use --ultraserver-devices=devices for single devices"
        )
        return UltraServerDevices.NODE

    async def _label_node(self) -> None:
        labels: dict[str, str | None] | None = None
        while True:
            wanted = ultraserver_labels(self.inventory)
            if wanted != labels:
                try:
                    await self._kube.patch_node_labels(self.options.node_name, wanted)
                    labels = wanted
                except ApiError as err:
                    log.warning("node labels not set, retrying: %s", err)
            await asyncio.sleep(5.0 if labels != wanted else self.options.rediscover_interval_s)

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.options.rediscover_interval_s)
            inventory = await asyncio.to_thread(self._discover)
            if inventory != self.inventory:
                log.info("Neuron hardware changed; republishing")
                self.inventory = inventory
                self.publisher.refresh(self._build)

    async def _report_ready(self) -> None:
        await self.plugin.registration.registered.wait()
        await self.publisher.published.wait()
        log.info(
            "registered with the kubelet and ResourceSlices published",
            extra={"startup_s": round(time.monotonic() - self._started, 3)},
        )


async def _serves_shared_counters(kube: Kube, node: str) -> bool:
    """Dry-run a slice with counters: a server with the feature gate off drops the field."""
    probe: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{DRIVER_NAME}-probe-"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": f"{node}-probe", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [
                {"name": COUNTER_SET_NODE, "counters": {COUNTER_DEVICES: {"value": "1"}}}
            ],
            "devices": [],
        },
    }
    try:
        created = await kube.create_resource_slice(probe, dry_run=True)
    except ApiError as err:
        log.warning("shared counters probe failed, assuming none: %s", err)
        return False
    return bool(created.get("spec", {}).get("sharedCounters"))


def _fault_hook(point: str | None) -> FaultHook:
    if point is None:
        return lambda _: None
    if point not in FAULT_POINTS:
        raise ValueError(f"{FAULT_ENV}={point!r} is not one of {', '.join(FAULT_POINTS)}")
    log.warning("test fault hook armed: the process kills itself at %s", point)

    def fault(reached: str) -> None:
        if reached == point:
            os.kill(os.getpid(), signal.SIGKILL)

    return fault


def run(options: RunOptions, started: float) -> int:
    """Run until SIGTERM or SIGINT; exit 0 after a clean shutdown."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        kube = Kube.connect(options.kubeconfig)
        try:
            await Agent(options, kube, started).run(stop)
        finally:
            with contextlib.suppress(Exception):
                kube.close()

    asyncio.run(main())
    return 0
