"""The Node Events that tell an operator a device left service or came back."""

from __future__ import annotations

import time
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.telemetry.health import Change

EVENT_NAMESPACE = "default"  # where Node Events go, as the kubelet's do
MAX_MESSAGE = 1024


def health_event(node: str, change: Change, now: float) -> dict[str, Any]:
    """The core/v1 Event for one device's change of health on `node`."""
    device = f"neuron{change.device}"
    problem = change.problem
    if problem is None:
        reason, kind, message = "NeuronDeviceHealthy", "Normal", f"{device} is healthy again"
    else:
        reason, kind = "NeuronDeviceUnhealthy", "Warning"
        message = f"{device}: {problem.kind} ({problem.detail}); taken out of service"
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
