"""A connection flood of the plugin pod's health port on the real node: the real
kubelet's probes keep passing and the plugin is never restarted.

The driver as `install-dra-driver.sh` installs it on a real kubelet and containerd
(`neuron_dra_harness.realcluster`). The flood (`tests.connection_flood`) is what a
pod on the pod network can do: ~300 silent connections to the pod IP's health port,
each made again as soon as it closes, for FLOOD_S (default 45 s, past the liveness
probe's period times its failure threshold; `NEURON_DRA_PROBE_FLOOD_S=600` for the
ten-minute run). The kubelet records every failed probe as an `Unhealthy` Event of
the pod and restarts the container after `failureThreshold` liveness failures: the
flood adds no such Event and leaves the restart count as it was.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from neuron_dra_harness.realcluster import RealCluster
from tests.connection_flood import CONNECTIONS, Flood, flood, flood_seconds

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
FLOOD_S = flood_seconds(45.0)
HEALTH_PORT = 51515  # the chart's healthcheckPort


def restarts(pod: Obj) -> int:
    return sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or [])


def probe_failures(real: RealCluster, pod: Obj) -> dict[str, int]:
    """The kubelet's `Unhealthy` Events of the pod: how often each probe failure was
    seen (a readiness probe may fail before the kubelet registered the plugin)."""
    events = real.cluster.list_objects(
        "v1",
        "Event",
        pod["metadata"]["namespace"],
        field_selector=f"involvedObject.uid={pod['metadata']['uid']},reason=Unhealthy",
    )
    return {str(e.get("message")): int(e.get("count") or 1) for e in events}


def test_a_connection_flood_of_the_health_port_never_restarts_the_plugin(
    real: RealCluster,
) -> None:
    pod = real.cluster.wait_for("the plugin pod Ready", real.ready_plugin, 120.0)
    before, failed_before = restarts(pod), probe_failures(real, pod)
    state = Flood()

    async def hold() -> None:
        flooding = asyncio.create_task(flood(pod["status"]["podIP"], HEALTH_PORT, state))
        await state.connected.wait()
        await asyncio.sleep(FLOOD_S)  # the flood's length: the kubelet probes meanwhile
        flooding.cancel()

    asyncio.run(hold())
    [after] = real.plugin_pods()
    failures = probe_failures(real, pod)
    print(
        f"{state.summary()} to {pod['status']['podIP']}:{HEALTH_PORT} for {FLOOD_S:.0f} s: "
        f"restarts {before} -> {restarts(after)}, failed probes {failed_before} -> {failures}"
    )
    assert state.opened > CONNECTIONS, state.summary()  # the flood reached the server
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]
    assert (restarts(after), failures) == (before, failed_before)
    assert real.ready_plugin() is not None
