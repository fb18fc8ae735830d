"""The Node Events that tell an operator a device left service or came back, and what a
node of an instance type the catalogue does not have derived from its sysfs."""

from __future__ import annotations

import logging
import time
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.telemetry.health import Change
from neuron_dra.agent.telemetry.metrics import Sample
from neuron_dra.hardware.derived import Derived
from neuron_dra.hardware.inventory import NodeInventory

EVENT_NAMESPACE = "default"  # where Node Events go, as the kubelet's do
MAX_MESSAGE = 1024
DERIVED_REASON = "NeuronInstanceTypeDerived"
DERIVED_METRIC = "neuron_dra_instance_type_derived"

log = logging.getLogger("neuron_dra")


def health_event(node: str, change: Change, now: float) -> dict[str, Any]:
    """The core/v1 Event for one device's change of health on `node`."""
    device = f"neuron{change.device}"
    problem = change.problem
    if problem is None:
        reason, kind, message = "NeuronDeviceHealthy", "Normal", f"{device} is healthy again"
    else:
        reason, kind = "NeuronDeviceUnhealthy", "Warning"
        message = f"{device}: {problem.kind} ({problem.detail}); taken out of service"
    return _event(node, reason, kind, message, now)


class DerivedNotice:
    """Says once, in a log line and an Event, what a node of a type the catalogue does not
    have derived from its sysfs and what it could not; again only when that changes."""

    def __init__(self) -> None:
        self._said: Derived | None = None

    def news(self, node: str, inventory: NodeInventory, now: float) -> dict[str, Any] | None:
        """The Event to send when the derivation is new (logged here), else None."""
        found = inventory.derived
        if found is None or found == self._said:
            return None
        self._said = found
        log.warning(
            "instance type not in the catalogue: published as its sysfs says",
            extra={
                "instance_type": inventory.instance_type,
                "derived": found.summary(),
                "not_derived": list(found.not_derived),
            },
        )
        message = (
            f"{inventory.instance_type} is not in neuron-dra's catalogue: devices published "
            f"as sysfs says. {found.summary()}"
        )
        return _event(node, DERIVED_REASON, "Warning", message, now)


def derived_samples(inventory: NodeInventory) -> list[Sample]:
    """1 on a node of a type the catalogue does not have, 0 on a catalogued one."""
    if inventory.instance_type is None:
        return []
    value = float(inventory.derived is not None)
    return [Sample(DERIVED_METRIC, (("instance_type", inventory.instance_type),), value)]


def _event(node: str, reason: str, kind: str, message: str, now: float) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    return {
        "metadata": {"generateName": f"{node}.neuron-", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": kind,
        "source": {"component": DRIVER_NAME, "host": node},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
