"""Device metadata files (KEP-5304) on a real control plane: the example's container gets
its file where the pod spec says, on every release (the driver writes it and the CDI
mount, whatever the kubelet), and from 1.37, where the kubelet-plugin helper of
k8s.io/dynamic-resource-allocation has its own metadata writer (harness
cmd/metadatagen), that writer preparing the same claim writes the same bytes."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from consts import (
    ATTR_DEVICE_ID,
    ATTR_ULTRASERVER_MODES,
    ATTR_ULTRASERVER_SERVER_ID_4,
    DRIVER_NAME,
)
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra_harness.build import Binaries
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.nodes import SimulatedNode, add_simulated_node, container_view
from tests.e2e.test_plugin import claim_of, create_in, delete_and_assert_released, namespace

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "specs" / "device-metadata.yaml"
CONTAINER_PATH = (
    "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/neurons/neurons/"
    f"{DRIVER_NAME}-metadata.json"
)
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def node(e2e_binaries: Binaries) -> Iterator[SimulatedNode]:
    with Cluster(e2e_binaries) as cluster:
        cluster.apply_yaml((REPO / "deploy" / "deviceclass.yaml").read_text())
        if e2e_binaries.minor >= 36:
            # An UltraServer node: its devices publish the unit ids and modes too.
            yield add_simulated_node(
                cluster, "us-0", "trn2u.48xlarge", ultraserver=FakeUltraServer("us-a", 0)
            )
        else:
            # Before 1.36 an UltraServer node publishes its `neuronnode` alone.
            yield add_simulated_node(cluster, "trn-0", "trn2.48xlarge")


def helper_prepares(
    binaries: Binaries, node: SimulatedNode, claim: Obj, out: Path
) -> tuple[Path, Path, Obj]:
    """The upstream helper's plugin data and CDI directories after it prepared `claim`,
    and its answer to NodePrepareResources."""
    plugin, cdi = out / "plugin", out / "cdi"
    meta = claim["metadata"]
    done = subprocess.run(
        [
            str(binaries.metadatagen),
            f"--kubeconfig={node.cluster.kubeconfig}",
            f"--node-name={node.name}",
            f"--plugin-dir={plugin}",
            f"--cdi-dir={cdi}",
            f"--namespace={meta['namespace']}",
            f"--name={meta['name']}",
            f"--uid={meta['uid']}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: Obj = json.loads(done.stdout)
    return plugin, cdi, answer


@pytest.mark.versions(check="device metadata files")
def test_the_example_gets_the_file_the_helper_writes(
    e2e_binaries: Binaries, node: SimulatedNode, tmp_path: Path, record_property: Any
) -> None:
    cluster = node.cluster
    ns = namespace(cluster)
    create_in(cluster, ns, list(yaml.safe_load_all(EXAMPLE.read_text())))
    pod = cluster.wait_for_pod_running("device-metadata", ns, timeout=60)
    claim = claim_of(cluster, ns, pod)
    uid = claim["metadata"]["uid"]
    view = container_view(pod, "ctr0")

    # The container's one metadata mount is at the path the example's `cat` reads.
    [(host, path)] = [m.split(":") for m in view["mounts"]]
    assert path == CONTAINER_PATH
    ours = Path(host)
    metadata = json.loads(ours.read_bytes())
    assert metadata["podClaimName"] == "neurons"
    allocated = [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
    published = {d["name"]: d["attributes"] for d in node.devices()}
    ultraserver = e2e_binaries.minor >= 36
    [request] = metadata["requests"]
    assert request["name"] == "neurons"
    assert [d["name"] for d in request["devices"]] == allocated
    for device in request["devices"]:
        assert device["attributes"] == published[device["name"]]
        # What a launcher needs without the API: the device, the unit, the modes.
        unit = (ATTR_ULTRASERVER_SERVER_ID_4, ATTR_ULTRASERVER_MODES) if ultraserver else ()
        for name in (ATTR_DEVICE_ID, *unit):
            assert name in device["attributes"], name

    if e2e_binaries.minor < 37:
        record_property("detail", "the helper's own writer is 1.37+: file and mount checked")
    else:
        assert_the_helper_writes_the_same(e2e_binaries, node, claim, ours, tmp_path)
        record_property("detail", "byte for byte the 1.37 helper's")
    # The kubelet hands the container the metadata file's CDI device.
    assert f"{DRIVER_NAME}/metadata={uid}_neurons" in view["cdiDevices"]
    delete_and_assert_released(node, "device-metadata", ns, uid)


def assert_the_helper_writes_the_same(
    binaries: Binaries, node: SimulatedNode, claim: Obj, ours: Path, tmp_path: Path
) -> None:
    """The upstream helper's file, spec, modes and CDI id for `claim` equal ours."""
    uid = claim["metadata"]["uid"]
    plugin, cdi, answer = helper_prepares(binaries, node, claim, tmp_path)

    theirs = plugin / ours.relative_to(node.side.plugins_dir / DRIVER_NAME)
    assert ours.read_bytes() == theirs.read_bytes()
    [spec] = list(cdi.iterdir())
    our_spec = node.cdi_dir / spec.name
    # The specs differ only in where the plugin data directory is.
    their_spec = spec.read_bytes().replace(
        str(plugin).encode(), str(node.side.plugins_dir / DRIVER_NAME).encode()
    )
    assert our_spec.read_bytes() == their_spec
    for mine, upstream in ((ours, theirs), (our_spec, spec)):
        assert stat.S_IMODE(mine.stat().st_mode) == stat.S_IMODE(upstream.stat().st_mode)
    # The helper hands the kubelet the CDI id ours did (the container's, checked above).
    their_ids = {
        i for d in answer["devices"] for i in d.get("cdi_device_ids", []) if "/metadata=" in i
    }
    assert their_ids == {f"{DRIVER_NAME}/metadata={uid}_neurons"}
