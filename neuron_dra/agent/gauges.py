"""The agent's gauges, read from its parts at each scrape on the event loop (no I/O)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuron_dra.agent.telemetry.devicemetrics import device_states, health_samples
from neuron_dra.agent.telemetry.events import derived_samples
from neuron_dra.agent.telemetry.metrics import Sample
from neuron_dra.agent.telemetry.mounts import read_only_samples

if TYPE_CHECKING:
    from neuron_dra.agent.node import Agent


def agent_gauges(agent: Agent) -> list[Sample]:
    """Every gauge of the agent's own state: devices, claims, health, registration."""
    node, prepared = agent.options.node_name, agent.preparer.prepared
    allocated = {d.device for c in prepared.values() for d in c.devices}
    samples = device_states(agent.inventory, agent.health.problems, allocated)
    samples.append(Sample("neuron_dra_prepared_claims", (), len(prepared)))
    samples.append(Sample("neuron_dra_claim_status_pending", (), agent.claim_status.pending))
    registered = agent.plugin.registration.registered.is_set()
    samples.append(Sample("neuron_dra_registered", (), float(registered)))
    samples += health_samples(agent.inventory, agent.health.problems, agent.health.unwatched, node)
    samples += read_only_samples(agent.read_only_mounts)
    samples += agent.health_poll.samples(node)
    samples += agent.device_plugin.samples()
    samples += derived_samples(agent.inventory)
    up = float(agent.pod_resources.up)
    samples.append(Sample("neuron_dra_pod_resources_up", (("node", node),), up))
    samples += agent.pod_resources.samples(agent.inventory, node)
    if agent.publisher.last_publish is not None:
        last = agent.publisher.last_publish
        samples.append(Sample("neuron_dra_slice_last_publish_timestamp_seconds", (), last))
    return samples
