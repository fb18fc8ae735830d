"""ResourceClaim objects as the API server returns them, for tests without a cluster."""

from __future__ import annotations

from typing import Any

from consts import DRIVER_NAME


def allocated_claim(
    uid: str,
    devices: list[str] | dict[str, list[str]],
    *,
    pool: str = "node-a",
    config: list[dict[str, Any]] | None = None,
    name: str = "claim",
    namespace: str = "default",
) -> dict[str, Any]:
    """A claim allocated `devices` (one request "neurons", or {request: devices})."""
    by_request = devices if isinstance(devices, dict) else {"neurons": devices}
    results = [
        {"request": request, "driver": DRIVER_NAME, "pool": pool, "device": device}
        for request, names in by_request.items()
        for device in names
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
    }


def opaque(
    parameters: Any,
    *,
    requests: list[str] | None = None,
    source: str = "FromClaim",
    driver: str = DRIVER_NAME,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": parameters},
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


def neuron_config(lnc: Any) -> dict[str, Any]:
    return {"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": lnc}


def ultraserver_config(mode: Any) -> dict[str, Any]:
    return {
        "apiVersion": "neuron.aws.com/v1alphav1",
        "kind": "UltraServerConfig",
        "ultraserverMode": mode,
    }
