"""The node agent's parts wired together: discovery, health, claims, slices, metrics.

Imported by `run` once the kubelet's sockets are served, in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from consts import DRIVER_NAME, NODE_DEVICE_NAME
from neuron_dra.agent import features, leader
from neuron_dra.agent.attribution import Holder, PodResources, allocation_samples
from neuron_dra.agent.checkpoint import CheckpointStore, ClaimRecord
from neuron_dra.agent.devicemetrics import StatsReader, health_samples
from neuron_dra.agent.health import Change, HealthMonitor
from neuron_dra.agent.kube import ApiError, Json, Kube
from neuron_dra.agent.kubelet import KubeletPlugin
from neuron_dra.agent.labels import LabelKeeper
from neuron_dra.agent.metrics import Metrics, Sample
from neuron_dra.agent.nodewatch import NodeWatch
from neuron_dra.agent.options import RunOptions
from neuron_dra.agent.preparer import Preparer, StepHook, no_step_hook
from neuron_dra.agent.publisher import SlicePublisher
from neuron_dra.agent.resourcehealth import health_entries
from neuron_dra.agent.supervisor import Supervisor
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.discovery import boot_id, discover, log_findings
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources import limits
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.nodelabels import ultraserver_labels
from neuron_dra.resources.nodetopology import NodeTopology, from_labels
from neuron_dra.resources.pool import publishable_pool
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, Unhealthy, build_slices

log = logging.getLogger("neuron_dra")

# How often the checkpoint is looked at for claims a second instance (a rolling update)
# prepared or unprepared: a stat while it is unchanged.
CLAIMS_FOLLOW_S = 2.0


class Agent:
    def __init__(
        self,
        options: RunOptions,
        kube: Kube,
        plugin: KubeletPlugin,
        started: float,
        after_step: StepHook = no_step_hook,
    ) -> None:
        self.options = options
        self.plugin = plugin
        self._kube = kube
        self._started = started
        self.inventory = self._discover()
        # The Node's EC2 network topology labels, followed with the Node.
        self.topology = NodeTopology()
        self._topology_problems: tuple[str, ...] = ()
        self.labels = LabelKeeper(
            kube, options.node_name, lambda: ultraserver_labels(self.inventory)
        )
        self.node_watch = NodeWatch(kube, options.node_name, self._node_seen)
        self.loops = Supervisor(plugin.health)
        self._uses: features.Uses | None = None  # what the slices may use: see `_reprobe`
        self.metrics = Metrics()
        self.metrics.gauges = self._gauges
        stats = StatsReader(options.sysfs_root, options.node_name)
        # The inventory is read in the metrics thread: rediscovery replaces it whole.
        self.metrics.file_gauges = lambda: stats.samples(self.inventory)
        self.pod_resources = PodResources(
            options.pod_resources_socket, DRIVER_NAME, options.node_name
        )
        self._holders: tuple[Holder, ...] = ()
        self.metrics.before_scrape = self._attribute
        self.health = HealthMonitor(
            options.sysfs_root,
            [d.index for d in self.inventory.devices],
            kmsg=options.kmsg or options.sysfs_root / "dev" / "kmsg",
            recovery_s=options.health_recovery_s,
            heartbeat_timeout_s=options.health_heartbeat_timeout_s,
        )
        plugin_dir = options.plugins_dir / DRIVER_NAME
        self.preparer = Preparer(
            inventory=lambda: self.inventory,
            pool=options.node_name,
            cdi_root=options.cdi_root,
            store=CheckpointStore(plugin_dir / "checkpoint.json"),
            boot_id=self._boot_id(),
            get_claim=kube.get_resource_claim,
            after_step=after_step,
            metrics=self.metrics,
            on_change=self._claims_changed,
        )
        self.publisher = SlicePublisher(
            kube, options.node_name, self._build, self._reprobe, self.metrics
        )
        self._held: frozenset[str] = frozenset()
        self._pool_problems: tuple[str, ...] = ()

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`; the kubelet's sockets are served already (see `run.run`)."""
        self.preparer.start()
        self._claims_changed()  # the devices restored claims hold
        # The kubelet can prepare from here while the publisher probes the API server.
        self.plugin.serve_claims(self.preparer)
        await self._publish_health()
        if self.options.metrics_port is not None:
            await self.metrics.serve(self.options.metrics_port)
        loops = self.loops
        for name, loop in (
            ("health", self._watch_health),
            ("publisher", self._publish),
            ("registration", self.plugin.supervise),
            ("node", self.node_watch.run),
            ("rediscovery", self._rediscover),
            ("claims", lambda: self.preparer.follow(CLAIMS_FOLLOW_S)),
        ):
            loops.start(name, loop)
        ready = asyncio.create_task(self._report_ready(), name="ready")
        try:
            await stop.wait()
        finally:
            log.info("stopping")
            # Loops first: while the DRA server drains open streams, the registration
            # loop would otherwise serve the socket that stop() just removed.
            ready.cancel()
            await loops.stop()
            await asyncio.gather(ready, return_exceptions=True)
            await self.pod_resources.close()

    async def _publish(self) -> None:
        await self.node_watch.tried.wait()  # so that the first write carries the labels
        await self._probe_features()
        lock = self.options.plugins_dir / DRIVER_NAME / "publisher.lock"
        async with leader.held(lock):
            log.info("publishing ResourceSlices for this node")
            await self.publisher.run()

    async def _probe_features(self) -> None:
        """Decide what the slices may use; retried, so an outage at start decides nothing."""
        delay = 0.2
        while True:
            try:
                await self._reprobe()
                return
            except ApiError as err:
                log.warning("API server not answering feature probes, retrying: %s", err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _reprobe(self) -> bool:
        """Learn what the API server serves; True when the slices change with it.

        Raises ApiError when the server gives no answer. The publisher calls it again
        whenever the server may have changed (a refused write, a new version), so a
        control-plane upgrade or downgrade re-lays the pool.
        """
        version = await features.server_version(self._kube)
        taints = await features.probe_taints(self._kube, self.options.node_name)
        uses = await self._counters(taints)
        auto = self.options.ultraserver_devices == "auto"
        for level, line in features.log_lines(
            version, self.options.node_name, self._uses, uses, auto=auto,
            cores=self.options.neuron_cores,
        ):  # fmt: skip
            log.log(level, line)
        changed, self._uses = uses != (self._uses or features.Uses()), uses
        return changed

    async def _counters(self, taints: bool) -> features.Uses:
        """Which kinds the node publishes, and where their shared counters go.

        Counters keep an UltraServer's node device apart from its devices, and each
        NeuronCore apart from its device; either is reason to ask the server for them.
        """
        wanted = self.options.ultraserver_devices
        ultraserver = self.inventory.ultraserver is not None and wanted not in (
            UltraServerDevices.NODE,
            UltraServerDevices.DEVICES,
        )
        single = UltraServerDevices(wanted) if wanted != "auto" else UltraServerDevices.BOTH
        cores = (
            self.options.neuron_cores
            and single is not UltraServerDevices.NODE
            and bool(logical_cores(self.inventory))  # none where core counts are unknown
        )
        if not self.inventory.devices or not (ultraserver or cores):
            return features.Uses(single, None, taints)  # nothing shared

        def build(layout: CounterLayout) -> list[Json]:
            return self._slices(1, None, self._uses_in(layout, taints, single, cores=cores))

        answers = await features.probe_counter_layout(self._kube, build)
        layout = features.choose_layout(answers)
        if layout is not None:
            return self._uses_in(layout, taints, single, cores=cores)
        if not ultraserver:
            return features.Uses(single, None, taints)
        if wanted == UltraServerDevices.BOTH:
            log.warning(
                "the API server drops shared counters, yet --ultraserver-devices=both: the "
                "whole-node device and its devices may be allocated together"
            )
            return features.Uses(UltraServerDevices.BOTH, features.accepted_layout(answers), taints)
        return features.Uses(UltraServerDevices.NODE, None, taints)

    def _uses_in(
        self, layout: CounterLayout, taints: bool, mode: UltraServerDevices, *, cores: bool
    ) -> features.Uses:
        """What the slices use with counters in `layout`: the cores wanted where they fit."""
        with_cores = features.Uses(mode, layout, taints, cores=True)
        fits = cores and not limits.validate_pool(
            build_slices(self.inventory, self._slice_options(1, None, with_cores)), layout
        )
        return features.Uses(mode, layout, taints, fits)

    def _discover(self) -> NodeInventory:
        result = discover(self.options.sysfs_root)
        log_findings(result.findings, log)
        return result.inventory

    def _boot_id(self) -> str:
        found = boot_id(self.options.sysfs_root)
        if found is None:
            log.warning("no boot id: prepared state cannot be told apart across reboots")
        return found or "unknown"

    def _claims_changed(self) -> None:
        held = held_whole(self.inventory, self.options.node_name, self.preparer.prepared)
        if held != self._held:
            self._held = held
            self.publisher.refresh(self._build)

    def _build(self, generation: int, node_uid: str | None) -> list[Json]:
        return self._slices(generation, node_uid, self._uses or features.Uses())

    def _slices(self, generation: int, node_uid: str | None, uses: features.Uses) -> list[Json]:
        """Raises InvalidPoolError rather than send a pool the API server refuses whole:
        the publisher logs it and keeps the stored pool."""
        pool = publishable_pool(self.inventory, self._slice_options(generation, node_uid, uses))
        if pool.problems and pool.problems != self._pool_problems:
            log.error(
                "the node's pool breaks resource.k8s.io/v1 limits (%s): publishing its "
                "devices without their NeuronCores", "; ".join(pool.problems),
                extra={"node": self.options.node_name},
            )  # fmt: skip
        self._pool_problems = pool.problems
        return pool.slices

    def _slice_options(
        self, generation: int, node_uid: str | None, uses: features.Uses
    ) -> SliceOptions:
        unhealthy = tuple(
            Unhealthy(device, p.kind, self.options.unhealthy_effect, p.since)
            for device, p in sorted(self.health.problems.items())
        )
        # Without counters every layout gives the same slices: any will do.
        layout = uses.layout or CounterLayout.BESIDE_DEVICES
        return SliceOptions(
            self.options.node_name, node_uid, generation, uses.mode, unhealthy, uses.taints,
            layout, cores=uses.cores, held=self._held, topology=self.topology,
        )  # fmt: skip

    async def _node_seen(self, node: Json | None) -> None:
        """The Node as it is now (None: gone): its owned labels kept, its network
        topology labels followed."""
        if node is None:
            return
        topology, problems = from_labels(node.get("metadata", {}).get("labels"))
        if problems != self._topology_problems:
            for problem in problems:
                log.warning("%s", problem, extra={"node": self.options.node_name})
            self._topology_problems = problems
        if topology != self.topology:
            log.info(
                "network layers from the Node's labels%s",
                " changed: republishing" if self.node_watch.tried.is_set() else "",
                extra={"node": self.options.node_name, "layers": topology.attributes()},
            )
            self.topology = topology
            self.publisher.refresh(self._build)
        await self.labels.keep(node)

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.options.rediscover_interval_s)
            inventory = await asyncio.to_thread(self._discover)
            if inventory != self.inventory:
                log.info("Neuron hardware changed; republishing")
                # UltraServer membership decides whether the pool has counters to lay out.
                reprobe = inventory.ultraserver != self.inventory.ultraserver
                # Before the slices: a device that appeared is published once it is watched.
                await asyncio.to_thread(self.health.follow, [d.index for d in inventory.devices])
                self.inventory = inventory
                self.publisher.refresh(self._build, reprobe=reprobe)
                try:
                    await self.labels.keep(self.node_watch.node)
                except ApiError as err:
                    # The next state of the Node seen retries it.
                    log.warning("UltraServer labels not set: %s", err)

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(self.options.health_interval_s)
            try:
                changes = await asyncio.to_thread(self.health.poll)
                if not changes:
                    continue
                self.publisher.refresh(self._build)
                await self._publish_health()
                for change in changes:
                    await self._report_health(change)
            except Exception:
                # A health source must never take the agent down; it is retried next poll.
                log.exception("health check failed")

    async def _report_health(self, change: Change) -> None:
        device = f"neuron{change.device}"
        problem = change.problem
        if problem is None:
            log.info("device healthy again", extra={"device": device})
            reason, message, kind = "NeuronDeviceHealthy", f"{device} is healthy again", "Normal"
        else:
            log.error(
                "device unhealthy: %s",
                problem.detail,
                extra={"device": device, "kind": problem.kind},
            )
            self.metrics.inc("neuron_dra_health_events_total", kind=problem.kind)
            reason, kind = "NeuronDeviceUnhealthy", "Warning"
            message = f"{device}: {problem.kind} ({problem.detail}); taken out of service"
        event: Json = {
            "metadata": {
                "generateName": f"{self.options.node_name}.neuron-",
                "namespace": "default",
            },
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.options.node_name},
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": DRIVER_NAME, "host": self.options.node_name},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        try:
            await self._kube.create_event("default", event)
        except ApiError as err:
            log.warning("event not recorded: %s", err)

    async def _publish_health(self) -> None:
        await self.plugin.resource_health.update(
            health_entries(self.inventory, self.health.problems)
        )

    def _gauges(self) -> list[Sample]:
        allocated = {d.device for c in self.preparer.prepared.values() for d in c.devices}
        counts: dict[tuple[str, str], int] = {}
        for device in self.inventory.devices:
            health = "unhealthy" if device.index in self.health.problems else "healthy"
            state = "allocated" if device.name in allocated else "free"
            counts[(health, state)] = counts.get((health, state), 0) + 1
        samples = [
            Sample("neuron_dra_devices", (("health", h), ("state", s)), n)
            for (h, s), n in sorted(counts.items())
        ]
        samples.append(Sample("neuron_dra_prepared_claims", (), len(self.preparer.prepared)))
        node = self.options.node_name
        registered = self.plugin.registration.registered.is_set()
        samples.append(Sample("neuron_dra_registered", (), float(registered)))
        samples += health_samples(self.inventory, self.health.problems, self.health.unwatched, node)
        up = float(self.pod_resources.up)
        samples.append(Sample("neuron_dra_pod_resources_up", (("node", node),), up))
        samples += allocation_samples(self._holders, self.inventory, node)
        if self.publisher.last_publish is not None:
            samples.append(
                Sample(
                    "neuron_dra_slice_last_publish_timestamp_seconds",
                    (),
                    self.publisher.last_publish,
                )
            )
        return samples

    async def _attribute(self) -> None:
        """Ask the kubelet which containers hold this node's devices (at scrape)."""
        found = await self.pod_resources.list(timeout_s=1.0)
        self._holders = found if found is not None else ()

    async def _report_ready(self) -> None:
        await self.plugin.registration.registered.wait()
        await self.publisher.published.wait()
        log.info(
            "registered with the kubelet and ResourceSlices published",
            extra={"startup_s": round(time.monotonic() - self._started, 3)},
        )


def held_whole(
    inventory: NodeInventory, pool: str, claims: Mapping[str, ClaimRecord]
) -> frozenset[str]:
    """Names of the devices of `pool` a prepared claim holds whole (the node device too).
    Admin access holds nothing: others may have the device too."""
    whole = {d.name for d in inventory.devices} | {NODE_DEVICE_NAME}
    return frozenset(
        device.device
        for record in claims.values()
        for device in record.devices
        if device.pool == pool and not device.admin_access and device.device in whole
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def serve(
    options: RunOptions,
    plugin: KubeletPlugin,
    started: float,
    stop: asyncio.Event,
    after_step: StepHook | None = None,
) -> None:
    """The agent behind `plugin`'s sockets until `stop`."""
    kube = Kube.connect(options.kubeconfig)
    try:
        await Agent(options, kube, plugin, started, after_step or no_step_hook).run(stop)
    finally:
        with contextlib.suppress(Exception):
            kube.close()
