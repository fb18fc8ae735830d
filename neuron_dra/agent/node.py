"""The node agent's parts wired together: discovery, health, claims, slices, metrics.

Imported by `run` once the kubelet's sockets are served, in a worker thread. Every
read of the node's sysfs runs off the event loop, in a daemon thread with a
deadline (`files.offloop`): the first look at the node (`firstlook`), whose
deadline ends the start; rediscovery and the health poll, one at a time, each
reported when stalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from http import HTTPStatus

from consts import DRIVER_NAME
from neuron_dra.agent import collector
from neuron_dra.agent.apiclient.kube import ApiError, Json, Kube
from neuron_dra.agent.claimpath import claim_path
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimsChanged
from neuron_dra.agent.claims.preparer import StepHook, no_step_hook
from neuron_dra.agent.files.offloop import StoppedError, in_daemon_thread, unless_stopped
from neuron_dra.agent.firstlook import (
    Discover,
    FirstLook,
    look_at_node,
    read_inventory,
    watched_rediscovery,
)
from neuron_dra.agent.gauges import agent_gauges
from neuron_dra.agent.kubelet.plugin import KubeletPlugin
from neuron_dra.agent.objects.node import Node
from neuron_dra.agent.options import RunOptions
from neuron_dra.agent.slices import leader
from neuron_dra.agent.slices.deviceplugin import DevicePluginGuard
from neuron_dra.agent.slices.labels import LabelKeeper
from neuron_dra.agent.slices.nodewatch import NodeWatch
from neuron_dra.agent.slices.publisher import SlicePublisher
from neuron_dra.agent.slices.source import NodeState, SliceSource
from neuron_dra.agent.supervisor import Supervisor
from neuron_dra.agent.telemetry.attribution import PodResources
from neuron_dra.agent.telemetry.devicemetrics import StatsReader
from neuron_dra.agent.telemetry.events import (
    EVENT_NAMESPACE,
    DerivedNotice,
    health_event,
)
from neuron_dra.agent.telemetry.health import Change, health_entries
from neuron_dra.agent.telemetry.healthpoll import HealthPoll
from neuron_dra.agent.telemetry.metrics import Metrics, Sample
from neuron_dra.agent.telemetry.metricsauth import RESULTS, REVIEWS_METRIC, Authorizer
from neuron_dra.agent.telemetry.metricsserver import Authorize
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources.nodelabels import owned_labels
from neuron_dra.resources.nodetopology import NodeTopology, from_labels
from neuron_dra.resources.taints import Unhealthy

log = logging.getLogger("neuron_dra")

# How often the checkpoint is looked at for claims a second instance (a rolling update)
# prepared or unprepared: a stat while it is unchanged.
CLAIMS_FOLLOW_S = 2.0
REVIEW_CONNECTIONS = 1  # metrics authorization reviews one token at a time


def _metrics_access(
    kube: Kube, options: RunOptions, on_review: Callable[[HTTPStatus], None]
) -> tuple[Kube | None, Authorize | None]:
    """Where `--metrics-auth` is on, a client of its own for reviews and the check of a
    scraper's token: the API server must vouch for it, and its user must be allowed
    /metrics. Scrapers, or anyone who reaches the port, never hold the connections a
    prepare's claim read needs."""
    if not options.metrics_auth:
        return None, None
    reviews = kube.apart(REVIEW_CONNECTIONS)
    return reviews, Authorizer(reviews.create, on_review=on_review).status


class Agent:
    """One node's agent: its devices, the preparer behind the kubelet's sockets, the
    slices, the claims' status, health and metrics, wired together.

    Made once a process, on the event loop, by `serve` after the first look at the node;
    `run` runs on that loop until `stop`, once. Its own state (the inventory, the Node's
    topology) is replaced whole on the loop, and the threads that read it (the DRA
    service's, the metrics thread) read one reference without a lock. Nothing of it
    survives a crash; the checkpoint, the slices and the claims' status on the API
    server do, and the next process builds the rest again from them and from sysfs.
    """

    def __init__(
        self,
        options: RunOptions,
        kube: Kube,
        plugin: KubeletPlugin,
        started: float,
        *,
        look: FirstLook,
        after_step: StepHook = no_step_hook,
        discover_node: Discover = discover,
    ) -> None:
        self.options = options
        self.plugin = plugin
        self._kube = kube
        self._loop = asyncio.get_running_loop()
        self._started = started
        self._discover_node = discover_node
        self.inventory = look.inventory
        self._rediscovery = watched_rediscovery(self._look_again)
        self.read_only_mounts = look.read_only_mounts
        # The Node's EC2 network topology labels, followed with the Node.
        self.topology = NodeTopology()
        self._topology_problems: tuple[str, ...] = ()
        self.labels = LabelKeeper(kube, options.node_name, self._owned_labels)
        self.node_watch = NodeWatch(kube, options.node_name, self._node_seen)
        self.device_plugin = DevicePluginGuard(options.node_name)
        self.loops = Supervisor(plugin.health)
        self._derived = DerivedNotice()
        self._stats = StatsReader(options.sysfs_root, options.node_name)
        self.pod_resources = PodResources.of_node(options)
        self.metrics = Metrics(
            gauges=self._gauges,
            file_gauges=self._file_gauges,
            before_scrape=self.pod_resources.refresh,
        )
        self._reviews, self._authorize = _metrics_access(kube, options, self._count_review)
        self.health = look.health
        self._notices = self.health.notices.all()  # as the slices were last built with
        self.health_poll = HealthPoll(self.health.poll)
        self.source = SliceSource(kube, options, self._state)
        self.publisher = SlicePublisher(
            kube, options.node_name, self.source.build, self.source.reprobe, self.metrics
        )
        path = claim_path(
            options,
            kube,
            self.metrics,
            inventory=self._inventory,
            device_attributes=self._device_attributes,
            on_hold_change=self.publisher.refresh,
            boot_id=look.boot_id,
            after_step=after_step,
            plugin_dir=options.plugins_dir / DRIVER_NAME,
        )
        self.preparer, self.events = path.preparer, path.events
        self.claim_status, self.holdings = path.claim_status, path.holdings

    def _owned_labels(self) -> dict[str, str | None]:
        return owned_labels(self.inventory)

    def _gauges(self) -> list[Sample]:
        return agent_gauges(self)

    def _inventory(self) -> NodeInventory:
        """The devices as last found; rediscovery replaces them whole, so a thread that
        reads them (the DRA service's, the metrics thread) sees one inventory or the other."""
        return self.inventory

    def _device_attributes(self, name: str) -> Json | None:
        """A device's attributes as the slices publish them (the metadata files')."""
        published = self.source.device_attributes(self._published_inventory(), self.topology)
        return published.get(name)

    def _file_gauges(self) -> list[Sample]:
        return list(self._stats.samples(self.inventory))

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`; the kubelet's sockets are served already (see `run.run`)."""
        # A daemon thread: a checkpoint read that hangs must not hold up a SIGTERM's exit.
        start = in_daemon_thread(self.preparer.start, "neuron-dra-checkpoint")
        try:
            await unless_stopped(start, stop)
        except StoppedError:
            log.info("stopped before the checkpoint was read")
            return
        restored_claims = self.preparer.prepared
        self.holdings.restored(ClaimsChanged(restored_claims))  # the devices they hold
        restored = restored_claims.values()
        self.claim_status.restored(ClaimRef(c.namespace, c.name, c.uid) for c in restored)
        # The kubelet can prepare from here while the publisher probes the API server.
        self.plugin.serve_claims(self.preparer)
        await self._publish_health()
        await self._record(self._derived.news(self.options.node_name, self.inventory, time.time()))
        if self.options.metrics_port is not None:
            await self.metrics.serve(self.options.metrics_port, authorize=self._authorize)
        loops = self.loops
        for name, loop in (
            ("health", self._watch_health),
            ("publisher", self._publish),
            ("registration", self.plugin.supervise),
            ("node", self.node_watch.run),
            ("rediscovery", self._rediscover),
            ("claims", self._follow_claims),
            ("claim-status", self.claim_status.run),
            ("claim-events", self.events.run),
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
            if self._reviews is not None:
                self._reviews.close()

    async def _publish(self) -> None:
        await self.node_watch.tried.wait()  # so that the first write carries the labels
        await self.source.probe()
        lock = self.options.plugins_dir / DRIVER_NAME / "publisher.lock"
        async with leader.held(lock):
            log.info("publishing ResourceSlices for this node")
            await self.publisher.run()

    def _state(self) -> NodeState:
        unhealthy = tuple(
            Unhealthy(device, p.kind, self.options.unhealthy_effect, p.since)
            for device, p in sorted(self.health.problems.items())
        )
        return NodeState(
            self._published_inventory(),
            unhealthy,
            self.holdings.withdrawn,
            self.topology,
            self.holdings.kept,
            self.health.notices.all(),
        )

    def _published_inventory(self) -> NodeInventory:
        """Where the device plugin serves the node, no device is published
        (`deviceplugin`)."""
        if self.device_plugin.active:
            return replace(self.inventory, devices=(), ultraserver=None)
        return self.inventory

    def _look_again(self) -> NodeInventory:
        """Rediscovery, in its daemon thread: the devices found, each watched from now
        on before the slices publish it."""
        inventory = read_inventory(self.options.sysfs_root, self._discover_node)
        serials = {d.index: d.serial_number for d in inventory.devices}
        if serials != {d.index: d.serial_number for d in self.inventory.devices}:
            self.health.follow(serials, serials)
        return inventory

    async def _follow_claims(self) -> None:
        """Take in the other instance's claims as they come (a rolling update), not
        only at this one's next prepare: the slices depend on them. A stat per
        interval while nothing changes. A failed read is retried at the next interval:
        the plugin stays ready, as each prepare reads the checkpoint again anyway."""
        while True:
            await asyncio.sleep(CLAIMS_FOLLOW_S)
            try:
                await asyncio.to_thread(self.preparer.refresh)
            except Exception:
                log.exception("checkpoint not read; retrying")

    async def _node_seen(self, node: Node | None) -> None:
        """The Node as it is now (None: gone): its owned labels kept, its network
        topology labels followed."""
        if node is None:
            return
        if self.device_plugin.seen(node):
            self.publisher.refresh()
        topology, problems = from_labels(node.labels)
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
            self.publisher.refresh()
        await self.labels.keep(node)

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.options.rediscover_interval_s)
            inventory = await self._rediscovery()
            if inventory is not None and inventory != self.inventory:
                log.info("Neuron hardware changed; republishing")
                # UltraServer membership decides whether the pool has counters to lay out.
                reprobe = inventory.ultraserver != self.inventory.ultraserver
                self.inventory = inventory
                self.publisher.refresh(reprobe=reprobe)
                node = self.options.node_name
                await self._record(self._derived.news(node, inventory, time.time()))
                try:
                    await self.labels.keep(self.node_watch.node)
                except ApiError as err:
                    # The next state of the Node seen retries it.
                    log.warning("Node labels not set: %s", err)

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(self.options.health_interval_s)
            try:
                changes = await self.health_poll()
                notices = self.health.notices.all()
                if notices != self._notices:
                    self._notices = notices
                    self.publisher.refresh()  # informational taints
                if not changes:
                    continue
                self.publisher.refresh()
                await self._publish_health()
                for change in changes:
                    await self._report_health(change)
            except Exception:
                # A health source must never take the agent down; it is retried next poll.
                log.exception("health check failed")

    async def _report_health(self, change: Change) -> None:
        device = f"neuron{change.device}"
        if change.problem is None:
            log.info("device healthy again", extra={"device": device})
        else:
            kind = change.problem.kind
            log.error(
                "device unhealthy: %s",
                change.problem.detail,
                extra={"device": device, "kind": kind},
            )
            self.metrics.inc("neuron_dra_health_events_total", kind=kind)
        await self._record(health_event(self.options.node_name, change, time.time()))

    async def _record(self, event: Json | None) -> None:
        """Send a Node Event; one not recorded is logged, never raised."""
        if event is None:
            return
        try:
            await self._kube.create_event(EVENT_NAMESPACE, event)
        except ApiError as err:
            log.warning("event not recorded: %s", err)

    async def _publish_health(self) -> None:
        self.plugin.resource_health.update(health_entries(self.inventory, self.health.problems))

    def _count_review(self, result: HTTPStatus) -> None:
        self.metrics.inc(REVIEWS_METRIC, result=RESULTS[result])

    async def _report_ready(self) -> None:
        await self.plugin.registration.registered.wait()
        await self.publisher.published.wait()
        log.info(
            "registered with the kubelet and ResourceSlices published",
            extra={"startup_s": round(time.monotonic() - self._started, 3)},
        )


async def serve(
    options: RunOptions,
    plugin: KubeletPlugin,
    started: float,
    stop: asyncio.Event,
    after_step: StepHook | None = None,
    *,
    discover_node: Discover = discover,
) -> None:
    """The agent behind `plugin`'s sockets until `stop`, which ends the first look too."""
    kube = Kube.connect(options.kubeconfig)
    try:
        try:
            look = await unless_stopped(look_at_node(options, discover_node), stop)
        except StoppedError:
            log.info("stopped before the node was read")
            return
        hook = after_step or no_step_hook
        agent = Agent(
            options, kube, plugin, started, look=look, after_step=hook, discover_node=discover_node
        )
        log.debug("start-up objects frozen", extra={"objects": collector.freeze_startup()})
        await agent.run(stop)
    finally:
        with contextlib.suppress(Exception):
            kube.close()
