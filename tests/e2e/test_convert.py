"""`neuron-dra convert` against the API server's own conversion, on a real kube-apiserver.

Each example of examples/specs/v1beta1 is created as written, in resource.k8s.io/v1beta1
(which the harness's control plane serves: `DEFAULT_RUNTIME_CONFIG` enables v1beta1 and
v1beta2, off by default since 1.34), and read back as resource.k8s.io/v1: the server's
conversion. `neuron-dra convert` of the same file must say the same thing. The server
adds what its defaulting adds when it decodes a request (`SetDefaults_ExactDeviceRequest`
and `SetDefaults_DeviceSubRequest` of pkg/apis/resource/v1 and v1beta1: an empty
allocationMode becomes ExactCount, an ExactCount of no count becomes 1; a toleration's
empty operator becomes Equal), where `convert` writes only what the file said: the
comparison applies those same defaults to `convert`'s output first, and a claim of the
bare minimum shows they are the only difference. The converted objects are then created
as v1 too, and must be stored exactly as the beta ones were.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra import cli
from neuron_dra_harness.cluster import DEFAULT_RUNTIME_CONFIG, Cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BETA = sorted((REPO / "examples" / "specs" / "v1beta1").glob("*.yaml"))
V1 = "resource.k8s.io/v1"
Obj = dict[str, Any]

# A claim with nothing the server leaves alone: no mode, no count, a subrequest likewise.
BARE = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: bare
spec:
  devices:
    requests:
    - name: one
      deviceClassName: neuron.aws.com
    - name: either
      firstAvailable:
      - name: trn2
        deviceClassName: neuron.aws.com
        selectors:
        - cel:
            expression: device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'
      - name: any
        deviceClassName: neuron.aws.com
        allocationMode: All
"""


def with_server_defaults(spec: Obj) -> Obj:
    """`spec` (a claim's) with the defaults the API server sets on every request."""
    out = copy.deepcopy(spec)
    for request in out.get("devices", {}).get("requests", []):
        for part in [request.get("exactly"), *request.get("firstAvailable", [])]:
            if part is None:
                continue
            part.setdefault("allocationMode", "ExactCount")
            if part["allocationMode"] == "ExactCount":
                part.setdefault("count", 1)
            for toleration in part.get("tolerations", []):
                toleration.setdefault("operator", "Equal")
    return out


def claim_spec(obj: Obj) -> Obj:
    """The claim spec of a ResourceClaim or a ResourceClaimTemplate."""
    spec: Obj = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    return spec


def converted(path: Path, capsys: pytest.CaptureFixture[str]) -> list[Obj]:
    """`neuron-dra convert FILE`'s resource.k8s.io objects, as printed."""
    assert cli.main(["convert", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return [d for d in yaml.safe_load_all(out) if d and d["apiVersion"].startswith("resource.")]


def create_in(cluster: Cluster, namespace: str, obj: Obj, name: str) -> Obj:
    """`obj` created in `namespace` under `name`, as the server stored it."""
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**obj["metadata"], "namespace": namespace, "name": name}
    created: Obj = cluster.create(obj)
    assert created["apiVersion"] == obj["apiVersion"]
    return created


def compare(cluster: Cluster, namespace: str, beta: Obj, mine: Obj) -> Obj:
    """Create `beta` as written and `mine` (its conversion) as v1; both, read as v1,
    must hold `mine`'s spec with the server's defaults. The v1 read of `beta`."""
    kind, name = beta["kind"], beta["metadata"]["name"]
    assert beta["apiVersion"] == "resource.k8s.io/v1beta1"
    assert (mine["apiVersion"], mine["kind"]) == (V1, kind)
    assert mine["metadata"] == beta["metadata"]
    create_in(cluster, namespace, beta, name)
    served: Obj = cluster.get(V1, kind, name, namespace)
    assert served["apiVersion"] == V1
    if kind == "ResourceClaimTemplate":
        # The template's own metadata: what the file gave, which is nothing here.
        assert served["spec"].get("metadata", {}) == mine["spec"].get("metadata", {}) == {}
        assert set(served["spec"]) - {"metadata"} == {"spec"}
    assert claim_spec(served) == with_server_defaults(claim_spec(mine))
    create_in(cluster, namespace, mine, f"{name}-v1")
    assert cluster.get(V1, kind, f"{name}-v1", namespace)["spec"] == served["spec"]
    return served


def test_the_control_plane_serves_the_beta_versions() -> None:
    assert "resource.k8s.io/v1beta1=true" in DEFAULT_RUNTIME_CONFIG.split(",")


@pytest.mark.parametrize("path", BETA, ids=lambda p: p.name)
def test_convert_says_what_the_api_server_reads_back_as_v1(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], path: Path
) -> None:
    namespace = "convert-" + re.sub(r"[^a-z0-9]+", "-", path.stem.lower())
    cluster.create_namespace(namespace)
    betas = [
        d
        for d in yaml.safe_load_all(path.read_text())
        if d and d["apiVersion"].startswith("resource.")
    ]
    mine = converted(path, capsys)
    assert len(mine) == len(betas) >= 1
    for beta, ours in zip(betas, mine, strict=True):
        served = compare(cluster, namespace, beta, ours)
        # Every example sets its mode (and an ExactCount its count): nothing to default.
        assert claim_spec(served) == claim_spec(ours)


def test_the_server_adds_only_the_defaults_convert_leaves_out(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster.create_namespace("convert-bare")
    path = tmp_path / "bare.yaml"
    path.write_text(BARE)
    [beta] = yaml.safe_load_all(BARE)
    [mine] = converted(path, capsys)
    one, either = claim_spec(mine)["devices"]["requests"]
    assert one == {"name": "one", "exactly": {"deviceClassName": "neuron.aws.com"}}
    assert "count" not in either["firstAvailable"][0]
    served = compare(cluster, "convert-bare", beta, mine)
    one, either = claim_spec(served)["devices"]["requests"]
    assert one["exactly"] == {
        "deviceClassName": "neuron.aws.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert [(s["allocationMode"], s.get("count")) for s in either["firstAvailable"]] == [
        ("ExactCount", 1),
        ("All", None),
    ]
