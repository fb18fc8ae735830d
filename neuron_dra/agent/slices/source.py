"""What this node publishes: its pool's slices, laid out as the API server keeps them.

Feature policy lives here: which kinds the node offers (UltraServer node device,
devices, NeuronCores), where shared counters go, whether taints are served, each
learnt from the API server by dry run and learnt again when it may have changed.
The agent hands over what the slices are built from (`NodeState`) and wires
`build` and `reprobe` to the publisher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.apiclient.kube import Json, Kube
from neuron_dra.agent.options import RunOptions
from neuron_dra.agent.slices import features
from neuron_dra.hardware.cores import logical_cores
from neuron_dra.hardware.inventory import NodeInventory
from neuron_dra.resources import limits
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.nodetopology import NodeTopology
from neuron_dra.resources.pool import publishable_pool
from neuron_dra.resources.slices import SliceOptions, UltraServerDevices, build_slices
from neuron_dra.resources.taints import Notice, Unhealthy

log = logging.getLogger("neuron_dra")


@dataclass(frozen=True)
class NodeState:
    """What the slices are built from, as the agent knows it now."""

    inventory: NodeInventory
    unhealthy: tuple[Unhealthy, ...]
    held: frozenset[str]  # devices and cores a prepared claim holds
    topology: NodeTopology
    kept: frozenset[str] = frozenset()  # devices a prepared claim has, admin access too
    notices: tuple[Notice, ...] = ()  # informational taints, where the server keeps them


class SliceSource:
    def __init__(self, kube: Kube, options: RunOptions, state: Callable[[], NodeState]) -> None:
        self._kube = kube
        self._options = options
        self._state = state
        self._uses: features.Uses | None = None  # what the slices may use: see `reprobe`
        self._pool_problems: tuple[str, ...] = ()
        # Each device's attributes, and the inventory and topology they were built from.
        self._attributes: tuple[NodeInventory, NodeTopology, dict[str, Json]] | None = None

    async def probe(self) -> None:
        """Decide what the slices may use; retried, so an outage at start decides nothing."""
        backoff = Backoff()
        while True:
            try:
                await self.reprobe()
                return
            except ApiError as err:
                log.warning("API server not answering feature probes, retrying: %s", err)
                await asyncio.sleep(backoff.delay())

    async def reprobe(self) -> bool:
        """Learn what the API server serves; True when the slices change with it.

        Raises ApiError when the server gives no answer. The publisher calls it again
        whenever the server may have changed (a refused write, a new version), so a
        control-plane upgrade or downgrade re-lays the pool.
        """
        version = await features.server_version(self._kube)
        node = self._options.node_name
        taints = await features.probe_taints(self._kube, node)
        notices = taints and await features.probe_informational_taints(self._kube, node)
        uses = replace(await self._counters(taints), notices=notices)
        auto = self._options.ultraserver_devices == "auto"
        for level, line in features.log_lines(
            version,
            self._options.node_name,
            self._uses,
            uses,
            auto=auto,
            cores=self._options.neuron_cores,
        ):
            log.log(level, line)
        changed, self._uses = uses != (self._uses or features.Uses()), uses
        return changed

    async def _counters(self, taints: bool) -> features.Uses:
        """Which kinds the node publishes, and where their shared counters go.

        Counters keep an UltraServer's node device apart from its devices, and each
        NeuronCore apart from its device; either is reason to ask the server for them.
        """
        state = self._state()
        wanted = self._options.ultraserver_devices
        ultraserver = state.inventory.ultraserver is not None and wanted not in (
            UltraServerDevices.NODE,
            UltraServerDevices.DEVICES,
        )
        single = UltraServerDevices(wanted) if wanted != "auto" else UltraServerDevices.BOTH
        cores = (
            self._options.neuron_cores
            and single is not UltraServerDevices.NODE
            and bool(logical_cores(state.inventory))  # none where core counts are unknown
        )
        if not state.inventory.devices or not (ultraserver or cores):
            return features.Uses(single, None, taints)  # nothing shared

        def build(layout: CounterLayout) -> list[Json]:
            uses = self._uses_in(state, layout, taints, single, cores=cores)
            return self._slices(state, 1, None, uses)

        answers = await features.probe_counter_layout(self._kube, build)
        layout = features.choose_layout(answers)
        if layout is not None:
            return self._uses_in(state, layout, taints, single, cores=cores)
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
        self,
        state: NodeState,
        layout: CounterLayout,
        taints: bool,
        mode: UltraServerDevices,
        *,
        cores: bool,
    ) -> features.Uses:
        """What the slices use with counters in `layout`: the cores wanted where they fit."""
        with_cores = features.Uses(mode, layout, taints, cores=True)
        options = self._slice_options(state, 1, None, with_cores)
        fits = cores and not limits.validate_pool(build_slices(state.inventory, options), layout)
        return features.Uses(mode, layout, taints, fits)

    def build(self, generation: int, node_uid: str | None) -> list[Json]:
        """The pool's slices now. Raises InvalidPoolError rather than send a pool the API
        server refuses whole: the publisher logs it and keeps the stored pool."""
        return self._slices(self._state(), generation, node_uid, self._uses or features.Uses())

    def device_attributes(
        self, inventory: NodeInventory, topology: NodeTopology
    ) -> dict[str, Json]:
        """Each device's attributes as the slices publish them, by device name: every kind
        of device, whether held, unhealthy or published at all now, since a device
        already allocated may be any of these. Built again only when the inventory or
        the Node's topology changes."""
        cached = self._attributes
        if cached and cached[0] is inventory and cached[1] == topology:
            return cached[2]
        options = SliceOptions(self._options.node_name, cores=True, topology=topology)
        found = {
            device["name"]: device.get("attributes") or {}
            for piece in build_slices(inventory, options)
            for device in piece["spec"].get("devices") or ()
        }
        self._attributes = (inventory, topology, found)
        return found

    def _slices(
        self, state: NodeState, generation: int, node_uid: str | None, uses: features.Uses
    ) -> list[Json]:
        options = self._slice_options(state, generation, node_uid, uses)
        pool = publishable_pool(state.inventory, options)
        if pool.problems and pool.problems != self._pool_problems:
            log.error(
                "the node's pool breaks resource.k8s.io/v1 limits (%s): publishing its "
                "devices without their NeuronCores",
                "; ".join(pool.problems),
                extra={"node": self._options.node_name},
            )
        self._pool_problems = pool.problems
        return pool.slices

    def _slice_options(
        self, state: NodeState, generation: int, node_uid: str | None, uses: features.Uses
    ) -> SliceOptions:
        # Without counters every layout gives the same slices: any will do.
        layout = uses.layout or CounterLayout.BESIDE_DEVICES
        return SliceOptions(
            self._options.node_name,
            node_uid,
            generation,
            uses.mode,
            state.unhealthy,
            uses.taints,
            layout,
            cores=uses.cores,
            notices=state.notices if uses.notices else (),
            held=state.held,
            kept=state.kept,
            topology=state.topology,
        )
