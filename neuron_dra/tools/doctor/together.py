"""What the node's and the cluster's checks say together: a node the driver does not
serve is expected before install, and a failure once the cluster has the driver."""

from __future__ import annotations

from collections.abc import Sequence

from neuron_dra.tools.doctor.nodechecks import NOT_SERVING
from neuron_dra.tools.doctor.verdicts import Check, fail


def together(node: Sequence[Check], cluster: Sequence[Check]) -> list[Check]:
    installed = any(c.name == "device classes" and c.verdict == "ok" for c in cluster)
    if not installed:
        return [*node, *cluster]
    return [*(_unserved(c) if _not_serving(c) else c for c in node), *cluster]


def _not_serving(check: Check) -> bool:
    return check.name == "driver sockets" and check.detail.startswith(NOT_SERVING)


def _unserved(check: Check) -> Check:
    return fail(
        check.name,
        f"{check.detail}, though the cluster has the driver",
        "see this node's plugin pod (kubectl -n neuron-dra get pods -o wide): its events "
        "say why it is not there or not running, its log why it stopped",
    )
