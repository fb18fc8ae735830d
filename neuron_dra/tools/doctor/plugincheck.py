"""Whether the node's plugin is live and ready, asked of the plugin itself: the
services the kubelet's probes ask (over the pod's probe socket), here over its gRPC
health server (grpc.health.v1). Liveness ("") answers SERVING while its DRA
socket is served and no loop of it keeps failing; readiness ("readiness") once the
kubelet registered it, while its registration socket is there and every loop runs.
In the plugin's pod the chart puts the server's address in the environment
(`HEALTHCHECK_ADDRESS`, `HEALTHCHECK_PORT`)."""

from __future__ import annotations

import grpc

from api.kubelet.grpchealth.v1 import api_pb2 as health_pb
from api.kubelet.grpchealth.v1 import api_pb2_grpc as health_grpc
from neuron_dra.agent.kubelet.readiness import READINESS_SERVICE
from neuron_dra.tools.doctor.verdicts import Check, fail, ok, warn

NAME = "plugin probes"
TIMEOUT_S = 5.0
LOG_FIX = "its log says why (kubectl -n neuron-dra logs <pod>)"


def plugin_probes(target: str, timeout_s: float = TIMEOUT_S) -> Check:
    try:
        with grpc.insecure_channel(target) as channel:
            stub = health_grpc.HealthStub(channel)
            live, ready = (
                stub.Check(health_pb.HealthCheckRequest(service=service), timeout=timeout_s)
                for service in ("", READINESS_SERVICE)
            )
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        return warn(
            NAME,
            f"the plugin's probes at {target} did not answer ({code.name if code else err})",
            "see the pod's events and log: kubectl -n neuron-dra describe pod <pod>",
        )
    serving = health_pb.HealthCheckResponse.SERVING
    if live.status != serving:
        return fail(
            NAME,
            f"{target}: not live: its DRA socket is gone or a loop of it keeps failing",
            f"the kubelet restarts it; {LOG_FIX}",
        )
    if ready.status != serving:
        return fail(
            NAME,
            f"{target}: not ready: the kubelet has not registered the plugin or refused it, "
            "its registration socket is gone, or a loop of it is down",
            f"{LOG_FIX}; a new pod registers anew (kubectl -n neuron-dra delete pod <pod>)",
        )
    return ok(NAME, f"{target}: live, and ready: the kubelet registered it")
