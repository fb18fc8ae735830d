from __future__ import annotations

import dataclasses
import errno
import json
import os
import stat
from pathlib import Path

import pytest

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import PreparedClaim, plan
from neuron_dra.hardware.discovery import discover
from tests.claim_objects import allocated_claim
from tests.sysfs_tree import FakeNode

DIGIT_UID = "0c7d2a1e-1111-4222-8333-944455556666"
LETTER_UID = "ac7d2a1e-1111-4222-8333-944455556666"
FOUR = [f"neurondevice{i}" for i in range(4)]


def prepared_claim(fake_node: FakeNode, uid: str, devices: list[str] = FOUR) -> PreparedClaim:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    ref = ClaimRef("default", "claim", uid)
    return plan(ref, allocated_claim(uid, devices), inventory, "node-a")


def expected_spec(uid: str, version: str) -> dict[str, object]:
    return {
        "cdiVersion": version,
        "kind": "neuron.aws.com/neuron",
        "devices": [
            {
                "name": f"{uid}-neurondevice{i}",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": f"/dev/neuron{i}",
                            "type": "c",
                            "major": 238,
                            "minor": i,
                            "permissions": "rw",
                        }
                    ]
                },
            }
            for i in range(4)
        ],
        # trn2 defaults to LNC 2: 4 logical cores per device.
        "containerEdits": {"env": ["NEURON_RT_VISIBLE_CORES=0-15"]},
    }


def test_spec_of_a_four_device_claim(fake_node: FakeNode) -> None:
    spec = cdi.build_spec(prepared_claim(fake_node, DIGIT_UID))
    # Runtimes before CDI 0.5.0 reject device names that start with a digit.
    assert spec == expected_spec(DIGIT_UID, "0.5.0")


def test_a_letter_uid_keeps_the_oldest_version(fake_node: FakeNode) -> None:
    spec = cdi.build_spec(prepared_claim(fake_node, LETTER_UID))
    assert spec == expected_spec(LETTER_UID, "0.3.0")


def test_device_without_numbers_leaves_them_to_the_runtime(fake_node: FakeNode) -> None:
    prepared = prepared_claim(fake_node, LETTER_UID, ["neurondevice5"])
    device = prepared.devices[0]
    unnumbered = dataclasses.replace(device.neuron_devices[0], major_minor=None)
    prepared = dataclasses.replace(
        prepared, devices=(dataclasses.replace(device, neuron_devices=(unnumbered,)),)
    )
    spec = cdi.build_spec(prepared)
    assert spec["devices"] == [
        {
            "name": f"{LETTER_UID}-neurondevice5",
            "containerEdits": {"deviceNodes": [{"path": "/dev/neuron5", "permissions": "rw"}]},
        }
    ]
    assert spec["cdiVersion"] == "0.3.0"


def test_device_ids_are_fully_qualified() -> None:
    assert cdi.device_id(DIGIT_UID, "neurondevice3") == (
        f"neuron.aws.com/neuron={DIGIT_UID}-neurondevice3"
    )
    assert cdi.request_device_id(DIGIT_UID, "a") == f"neuron.aws.com/neuron={DIGIT_UID}.request.a"
    assert cdi.claim_device_id(DIGIT_UID) == f"neuron.aws.com/neuron={DIGIT_UID}.claim"


def node_device(i: int) -> dict[str, object]:
    return {"path": f"/dev/neuron{i}", "type": "c", "major": 238, "minor": i, "permissions": "rw"}


def test_requests_with_other_devices_carry_their_own_cores(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    ref = ClaimRef("default", "claim", LETTER_UID)
    claim = allocated_claim(LETTER_UID, {"a": ["neurondevice0"], "b": ["neurondevice5"]})
    spec = cdi.build_spec(plan(ref, claim, inventory, "node-a"))
    uid = LETTER_UID
    # Cores depend on the devices a container gets, so none sit on the spec, which every
    # container of the claim would get: each request's sit on a device of their own, and
    # a container referencing the whole claim gets every core from `<uid>.claim`.
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": "neuron.aws.com/neuron",
        "devices": [
            {"name": f"{uid}-neurondevice0", "containerEdits": {"deviceNodes": [node_device(0)]}},
            {"name": f"{uid}-neurondevice5", "containerEdits": {"deviceNodes": [node_device(5)]}},
            {
                "name": f"{uid}.request.a",
                "containerEdits": {"env": ["NEURON_RT_VISIBLE_CORES=0-3"]},
            },
            {
                "name": f"{uid}.request.b",
                "containerEdits": {"env": ["NEURON_RT_VISIBLE_CORES=20-23"]},
            },
            {
                "name": f"{uid}.claim",
                "containerEdits": {"env": ["NEURON_RT_VISIBLE_CORES=0,1,2,3,20,21,22,23"]},
            },
        ],
    }


def test_a_device_of_two_requests_is_one_cdi_device(fake_node: FakeNode) -> None:
    inventory = discover(fake_node("trn2.48xlarge")).inventory
    ref = ClaimRef("default", "claim", LETTER_UID)
    claim = allocated_claim(LETTER_UID, {"work": ["neurondevice3"], "watch": ["neurondevice3"]})
    spec = cdi.build_spec(plan(ref, claim, inventory, "node-a"))
    # Runtimes refuse a spec that names one device twice, and with it every device of the claim.
    assert spec["devices"] == [
        {"name": f"{LETTER_UID}-neurondevice3", "containerEdits": {"deviceNodes": [node_device(3)]}}
    ]
    assert spec["containerEdits"] == {"env": ["NEURON_RT_VISIBLE_CORES=12-15"]}


def test_write_spec(fake_node: FakeNode, tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    prepared = prepared_claim(fake_node, DIGIT_UID)
    path = cdi.write_spec(root, prepared)
    assert path == root / f"neuron.aws.com-{DIGIT_UID}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert json.loads(path.read_bytes()) == cdi.build_spec(prepared)
    assert [p.name for p in root.iterdir()] == [path.name]


def test_failed_overwrite_keeps_the_old_spec(
    fake_node: FakeNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "cdi"
    path = cdi.write_spec(root, prepared_claim(fake_node, DIGIT_UID))
    before = path.read_bytes()

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    changed = prepared_claim(fake_node, DIGIT_UID, ["neurondevice9"])
    with pytest.raises(OSError) as caught:
        cdi.write_spec(root, changed)
    assert caught.value.errno == errno.ENOSPC
    # A runtime reading the spec now must still see the whole old one.
    assert path.read_bytes() == before
    assert [p.name for p in root.iterdir()] == [path.name]


def test_remove_spec(fake_node: FakeNode, tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    path = cdi.write_spec(root, prepared_claim(fake_node, DIGIT_UID))
    assert cdi.remove_spec(root, DIGIT_UID) is True
    assert not path.exists()
    assert cdi.remove_spec(root, DIGIT_UID) is False


def test_spec_uids_lists_only_this_drivers_specs(fake_node: FakeNode, tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    assert cdi.spec_uids(root) == set()  # the directory need not exist yet
    cdi.write_spec(root, prepared_claim(fake_node, DIGIT_UID))
    cdi.write_spec(root, prepared_claim(fake_node, LETTER_UID))
    (root / "nvidia.com-gpu.json").write_text("{}")
    (root / "neuron.aws.com-notes.yaml").write_text("{}")
    (root / f".neuron.aws.com-{DIGIT_UID}.json.x1y2.tmp").write_text("{")
    assert cdi.spec_uids(root) == {DIGIT_UID, LETTER_UID}


@pytest.mark.parametrize("uid", ["../x", "a/b", ".hidden", "", "a" * 200, "x\n"])
def test_unsafe_uids_are_rejected(tmp_path: Path, uid: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes UID"):
        cdi.check_uid(uid)
    with pytest.raises(ValueError, match="is not a Kubernetes UID"):
        cdi.spec_path(tmp_path, uid)
    with pytest.raises(ValueError, match="is not a Kubernetes UID"):
        cdi.remove_spec(tmp_path, uid)
    assert list(tmp_path.iterdir()) == []


def test_write_spec_checks_the_uid_before_touching_disk(
    fake_node: FakeNode, tmp_path: Path
) -> None:
    prepared = prepared_claim(fake_node, DIGIT_UID)
    escaping = dataclasses.replace(prepared, claim=ClaimRef("default", "claim", "../escape"))
    root = tmp_path / "cdi"
    with pytest.raises(ValueError, match="is not a Kubernetes UID"):
        cdi.write_spec(root, escaping)
    assert not root.exists()
    assert not (tmp_path / "escape.json").exists()
