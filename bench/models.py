"""Kubernetes objects at the agent's boundary: dataclasses against pydantic, measured.

The agent decodes each ResourceClaim it reads into frozen, slotted dataclasses
(neuron_dra/agent/objects/claim.py) and imports pydantic only with the
first claim that carries an opaque config. This run measures what a pydantic v2
model of the same fields would cost instead. Each arm runs in a fresh interpreter:

- `dataclasses`: the agent's run path imports (`neuron_dra.cli`, `neuron_dra.agent.run`,
  `neuron_dra.agent.node`), then one decode of the sample claim;
- `pydantic`: the same, then pydantic imported and an equivalent pydantic v2 model of
  the claim (strict, unknown fields ignored, frozen; lists where strict mode refuses a
  JSON list for a tuple) defined and used for that decode.

Each reports the time of its imports and model definition, its RSS after the first
decode, and the time of one decode of a realistic allocated claim of 16 devices
(the median of a few thousand). The arms alternate, repeat by repeat, so the load of
a shared machine falls on both alike. Kept in bench/results/models.json with the
commit that ran (bench/provenance.py); docs/contributors/decisions.md quotes it
through bench/figures.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

# This directory is on sys.path when the file runs as a script.
from provenance import at_end, at_start

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "models.json"
ARMS = ("dataclasses", "pydantic")
DECODES = 3000

RUN_PATH = "import neuron_dra.cli, neuron_dra.agent.run, neuron_dra.agent.node"

PYDANTIC_MODEL = """
from typing import Any
from pydantic import BaseModel, ConfigDict, Field

class _M(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, populate_by_name=True)

class Metadata(_M):
    namespace: str = ""
    name: str = ""
    uid: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)

class DeviceResult(_M):
    request: str = ""
    driver: str | None = None
    pool: str | None = None
    device: str = ""
    admin_access: bool | None = Field(default=None, alias="adminAccess")

class Opaque(_M):
    driver: str | None = None
    parameters: Any = None

class AllocatedConfig(_M):
    source: str | None = None
    requests: list[str] = []
    opaque: Opaque | None = None

class Devices(_M):
    results: list[DeviceResult] = []
    config: list[AllocatedConfig] = []

class Allocation(_M):
    devices: Devices = Devices()

class DeviceStatus(_M):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

class Status(_M):
    allocation: Allocation | None = None
    devices: list[DeviceStatus] = []

class ResourceClaim(_M):
    metadata: Metadata = Metadata()
    status: Status = Status()

decode = ResourceClaim.model_validate
"""

CHILD = f"""
import json, sys, time
from statistics import median
arm, claim_json, decodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
started = time.perf_counter()
{RUN_PATH}
if arm == "pydantic":
    exec(compile({PYDANTIC_MODEL!r}, "pydantic_model", "exec"))
else:
    from neuron_dra.agent.objects.claim import decode
obj = json.loads(claim_json)
decoded = decode(obj)
imported = time.perf_counter() - started
with open("/proc/self/status") as status:
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
times = []
for _ in range(decodes):
    began = time.perf_counter()
    decode(obj)
    times.append(time.perf_counter() - began)
print(json.dumps({{"import_s": imported, "rss_mib": rss, "decode_us": median(times) * 1e6}}))
"""


def sample_claim(devices: int = 16) -> dict[str, Any]:
    """An allocated claim as the API server answers a GET: `devices` whole devices of one
    request, a NeuronConfig from the claim, one pod reserved, managed fields and all."""
    driver, node = "neuron.aws.com", "ip-10-0-1-7.ec2.internal"
    results = [
        {"request": "neurons", "driver": driver, "pool": node, "device": f"neurondevice{i}"}
        for i in range(devices)
    ]
    parameters = {"apiVersion": "neuron.aws.com/v1", "kind": "NeuronConfig", "logicalNeuronCore": 2}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "train-0-neurons-x7k2p",
            "generateName": "train-0-neurons-",
            "namespace": "training",
            "uid": "0f8e2b8c-1111-4222-8333-944455556666",
            "resourceVersion": "4817",
            "creationTimestamp": "2026-11-29T08:00:00Z",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "neurons"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "train-0",
                    "uid": "5e2a0c1d-2222-4333-8444-955566667777",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "resource.k8s.io/v1",
                    "time": "2026-11-29T08:00:01Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:allocation": {".": {}}, "f:reservedFor": {}}},
                }
                for manager in ("kube-controller-manager", "kube-scheduler")
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "neurons",
                        "exactly": {
                            "deviceClassName": driver,
                            "allocationMode": "ExactCount",
                            "count": devices,
                        },
                    }
                ],
                "config": [
                    {
                        "requests": ["neurons"],
                        "opaque": {"driver": driver, "parameters": parameters},
                    }
                ],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": results,
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": ["neurons"],
                            "opaque": {"driver": driver, "parameters": parameters},
                        }
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
                "allocationTimestamp": "2026-11-29T08:00:01Z",
            },
            "reservedFor": [
                {
                    "resource": "pods",
                    "name": "train-0",
                    "uid": "5e2a0c1d-2222-4333-8444-955566667777",
                }
            ],
        },
    }


def one(arm: str, claim: str, decodes: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, arm, claim, str(decodes)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {arm} arm failed: {done.stderr}")
    out = done.stdout
    return {k: round(v, 4) for k, v in json.loads(out).items()}


def summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        key: {
            "median": round(median(r[key] for r in runs), 4),
            "min": min(r[key] for r in runs),
            "max": max(r[key] for r in runs),
        }
        for key in runs[0]
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--decodes", type=int, default=DECODES)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--allow-dirty", action="store_true")
    args = parser.parse_args()
    record = at_start(REPO, args.allow_dirty)
    obj = sample_claim()
    claim = json.dumps(obj)
    arms: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for repeat in range(args.repeats):
        # Alternating which arm runs first, too: neither always follows the other.
        for arm in ARMS if repeat % 2 == 0 else ARMS[::-1]:
            arms[arm].append(one(arm, claim, args.decodes))
        print(f"repeat {repeat + 1}: {json.dumps({a: r[-1] for a, r in arms.items()})}")
    result = {
        "run": at_end(record),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "claim": {
            "devices": len(obj["status"]["allocation"]["devices"]["results"]),
            "bytes": len(claim),
        },
        "decodes_per_run": args.decodes,
        "arms": arms,
        "summary": {arm: summary(runs) for arm, runs in arms.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
