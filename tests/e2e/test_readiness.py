"""The readiness probe's health service against the kubelet's own plugin manager.

The DaemonSet's readiness probe asks the plugin's gRPC health service for the service
``readiness``: SERVING only once the kubelet has registered the plugin. Here the
kubelet stand-in (the upstream plugin manager and DRA manager) does the registering,
so this is the call a real kubelet makes, not a test's imitation of it.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from api.kubelet.grpchealth.v1 import api_pb2 as health
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import add_simulated_node
from neuron_dra_harness.processes import free_port

pytestmark = pytest.mark.e2e

SERVING = health.HealthCheckResponse.SERVING
NOT_SERVING = health.HealthCheckResponse.NOT_SERVING


def check(port: int, service: str) -> int | None:
    """The service's status; None while nothing listens."""

    async def ask() -> int:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = await health_grpc.HealthStub(channel).Check(
                health.HealthCheckRequest(service=service), timeout=2
            )
            return int(reply.status)

    try:
        return asyncio.run(ask())
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return None
        raise


def test_ready_once_the_kubelet_registered_the_plugin(cluster: Cluster) -> None:
    port = free_port()
    node = add_simulated_node(
        cluster, "readiness", "inf2.xlarge", extra_args=[f"--healthcheck-port={port}"], start=False
    )
    # No kubelet: the plugin serves its sockets (alive) but nobody registers it.
    cluster.stop_kubelet_side(node.name)
    node.start_plugin(wait=False)
    try:
        cluster.wait_for("the plugin alive", lambda: check(port, "") == SERVING)
        assert check(port, READINESS_SERVICE) == NOT_SERVING
        # The kubelet's plugin watcher finds the registration socket and registers it.
        node.side = cluster.start_kubelet_side(node.name)
        node.side.wait_for_plugin("neuron.aws.com")
        cluster.wait_for("the plugin ready", lambda: check(port, READINESS_SERVICE) == SERVING)
    finally:
        node.stop_plugin()
