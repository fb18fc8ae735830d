"""The slice publisher's passes, read from the log of a plugin started at debug level.

A pass that writes nothing leaves nothing on the API server to wait for; its log
line is the event after which a test may assert that nothing was written.
"""

from __future__ import annotations

from collections.abc import Callable

from consts import DRIVER_NAME
from neuron_dra_harness.nodes import PLUGIN, SimulatedNode
from neuron_dra_harness.processes import Component

# The publisher's line for each pass over the slices: one that wrote, one that had nothing to.
PASS_LINES = (
    "I neuron_dra.agent.slices.publisher: ResourceSlices published",
    "D neuron_dra.agent.slices.publisher: ResourceSlices up to date",
)


def start_logging_passes(node: SimulatedNode) -> Component:
    """`neuron-dra run` as `SimulatedNode.start_plugin` starts it, logging at debug level,
    where the publisher names every pass: a test sees when a wake has been handled."""
    argv = [
        *PLUGIN,
        "--log-level=debug",
        "run",
        f"--node-name={node.name}",
        f"--sysfs-root={node.sysfs}",
        f"--cdi-root={node.cdi_dir}",
        f"--kubelet-registrar-directory-path={node.side.registry_dir}",
        f"--kubelet-plugins-directory-path={node.side.plugins_dir}",
        f"--kubeconfig={node.cluster.kubeconfig}",
        *node.extra_args,
    ]
    node.plugin = node.cluster.start_process(f"plugin-{node.name}", argv)
    node.side.wait_for_plugin(DRIVER_NAME)
    node.cluster.wait_for(f"slices of {node.name}", lambda: node.slices() or None)
    return node.plugin


def passes(plugin: Component) -> int:
    return sum(line.startswith(PASS_LINES) for line in plugin.log_path.read_text().splitlines())


def handled(node: SimulatedNode, wake: Callable[[], object]) -> None:
    """Wake the publisher of a node it is otherwise idle on, and wait for its pass."""
    assert node.plugin is not None
    plugin = node.plugin
    done = passes(plugin)
    wake()
    node.cluster.wait_for("the publisher to handle the wake", lambda: passes(plugin) > done, 30)


def new_watch(node: SimulatedNode) -> None:
    """End the publisher's watch, as the server does every few minutes: here by a restart."""
    node.cluster.stop_apiserver()
    node.cluster.start_apiserver()
