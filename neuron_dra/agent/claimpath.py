"""The claim path of a node's agent: the preparer behind the kubelet's sockets and what
follows each of its changes, as one dispatch table.

The preparer posts a typed event (`claims.events`) from the DRA service's threads;
`ClaimEvents` hands each one, on the event loop, to the parts that follow it:

| event | handled by | for |
|---|---|---|
| `ClaimPrepared` | `StatusWriter.prepared` | the claim's device status on the API server |
| `ClaimUnprepared` | `StatusWriter.unprepared` | that status cleared |
| `ClaimUnprepared` | `MetadataFiles.unprepared` (a worker thread) | emptied directories gone |
| `ClaimsChanged` | `Holdings.claims_changed` | what claims hold, withdrawn from the slices |

The holdings refresh the slice publisher themselves (`on_change`), once a hold has
lasted `--withdraw-after`. Nothing here is called back by another part: each part gets
what it reads at construction, and the events are the only way claims reach the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from neuron_dra.agent.apiclient.kube import Json, Kube
from neuron_dra.agent.claims.checkpoint import CheckpointStore
from neuron_dra.agent.claims.events import (
    ClaimEvents,
    ClaimPrepared,
    ClaimsChanged,
    ClaimUnprepared,
)
from neuron_dra.agent.claims.metadatafiles import MetadataFiles
from neuron_dra.agent.claims.preparer import Preparer, StepHook
from neuron_dra.agent.claims.statuswriter import StatusWriter
from neuron_dra.agent.holdings import Holdings
from neuron_dra.agent.options import RunOptions
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.inventory import NodeInventory

UNKNOWN_BOOT = "unknown"


@dataclass(frozen=True)
class ClaimPath:
    """The preparer, the event queue between it and the loop, and the parts the queue
    feeds."""

    preparer: Preparer
    events: ClaimEvents
    claim_status: StatusWriter
    holdings: Holdings


def claim_path(
    options: RunOptions,
    kube: Kube,
    metrics: Metrics,
    *,
    inventory: Callable[[], NodeInventory],
    device_attributes: Callable[[str], Json | None],
    on_hold_change: Callable[[], None],
    boot_id: str | None,
    after_step: StepHook,
    plugin_dir: Path,
) -> ClaimPath:
    """The claim path of the node `options` name; made on the event loop."""
    claim_status = StatusWriter(
        kube, metrics, inventory, options.node_name, enabled=options.claim_status
    )
    holdings = Holdings(
        asyncio.get_running_loop(),
        pool=options.node_name,
        withdraw_after_s=options.withdraw_after_s,
        inventory=inventory,
        on_change=on_hold_change,
    )
    metadata = MetadataFiles(
        plugin_dir, options.cdi_root, device_attributes, enabled=options.device_metadata
    )
    events = ClaimEvents()
    events.on(ClaimPrepared, claim_status.prepared)
    events.on(ClaimUnprepared, claim_status.unprepared)
    events.on_thread(ClaimUnprepared, metadata.unprepared)
    events.on(ClaimsChanged, holdings.claims_changed)
    preparer = Preparer(
        inventory=inventory,
        pool=options.node_name,
        cdi_root=options.cdi_root,
        # Durable only when reboots cannot be told apart (see `checkpoint`).
        store=CheckpointStore(plugin_dir / "checkpoint.json", durable=boot_id is None),
        boot_id=boot_id or UNKNOWN_BOOT,
        get_claim=kube.get_resource_claim,
        after_step=after_step,
        metrics=metrics,
        post=events.post,
        metadata=metadata,
    )
    return ClaimPath(preparer, events, claim_status, holdings)
