"""The Neuron device plugin on this driver's node: the driver steps back.

The kubelet cannot tell that the device plugin's `aws.amazon.com/neuron` and this
driver's `neurondevice0` are the same silicon, so with both serving a node two pods
can be given one device. A node whose allocatable carries a device plugin's Neuron
resource is served by the plugin: the agent publishes no device there (claims it
already prepared keep theirs) until the resources are gone, says why in its log and
in `neuron_dra_device_plugin_conflict`, and publishes again when they are.
"""

from __future__ import annotations

import logging

from neuron_dra.agent.objects.node import Node
from neuron_dra.agent.telemetry.metrics import Sample

log = logging.getLogger(__name__)

RESOURCES = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice", "aws.amazon.com/neuroncore")


def plugin_resources(node: Node | None) -> dict[str, str]:
    """The device plugin's Neuron resources the Node has allocatable, nonzero."""
    allocatable = node.allocatable if node is not None else {}
    return {r: allocatable[r] for r in RESOURCES if allocatable.get(r, "0") != "0"}


class DevicePluginGuard:
    def __init__(self, node_name: str) -> None:
        self._node = node_name
        self.resources: dict[str, str] = {}

    @property
    def active(self) -> bool:
        return bool(self.resources)

    def seen(self, node: Node | None) -> bool:
        """Take the Node as it is now; whether the driver's standing changed."""
        resources = plugin_resources(node)
        if bool(resources) == self.active:
            self.resources = resources
            return False
        self.resources = resources
        if resources:
            log.error(
                "the Neuron device plugin serves this node (%s allocatable): publishing no "
                "device until it is gone, so that no device is given twice; keep the device "
                "plugin's DaemonSet off this node (docs/operators/migration.md)",
                ", ".join(f"{k}={v}" for k, v in sorted(resources.items())),
                extra={"node": self._node},
            )
        else:
            log.info(
                "the Neuron device plugin is gone: publishing the devices",
                extra={"node": self._node},
            )
        return True

    def samples(self) -> list[Sample]:
        return [
            Sample("neuron_dra_device_plugin_conflict", (("node", self._node),), float(self.active))
        ]
