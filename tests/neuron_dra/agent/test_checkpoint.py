from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.agent.claims.checkpoint import (
    CheckpointError,
    CheckpointStore,
    ClaimRecord,
    Loaded,
    RecordedDevice,
    decode,
    encode,
)

BOOT = "2b3c4d5e-aaaa-4bbb-8ccc-000000000001"
OTHER_BOOT = "2b3c4d5e-aaaa-4bbb-8ccc-000000000002"


def record(uid: str, name: str = "claim", devices: tuple[int, ...] = (0,)) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="default",
        name=name,
        devices=tuple(
            RecordedDevice(
                ("neurons",),
                "node-a",
                f"neurondevice{i}",
                (f"neuron.aws.com/neuron={uid}-neurondevice{i}",),
            )
            for i in devices
        ),
    )


CLAIMS = {
    "uid-1": record("uid-1", "alpha", (0, 1)),
    "uid-2": record("uid-2", "bravo", (5,)),
}


def with_checksum(body: dict[str, Any]) -> bytes:
    """A file whose checksum is right, so that only the content can be at fault."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps(
        {**body, "checksum": "sha256:" + hashlib.sha256(canonical).hexdigest()}
    ).encode()


def decode_error(data: bytes) -> str:
    with pytest.raises(CheckpointError) as caught:
        decode(data)
    return str(caught.value)


def test_round_trip() -> None:
    assert decode(encode(BOOT, CLAIMS)) == (BOOT, CLAIMS)
    assert decode(encode(BOOT, {})) == (BOOT, {})


def test_checksum_covers_exactly_the_body() -> None:
    body = json.loads(encode(BOOT, CLAIMS))
    del body["checksum"]
    # An independently computed checksum agrees, so the format is documented by this test.
    assert decode(with_checksum(body)) == (BOOT, CLAIMS)


def test_not_json() -> None:
    assert decode_error(b"\x00\xffgarbage").startswith("not JSON")
    assert decode_error(b"[1, 2]") == "not a JSON object"


def test_truncated() -> None:
    data = encode(BOOT, CLAIMS)
    assert decode_error(data[: len(data) // 2]).startswith("not JSON (")
    assert decode_error(b"").startswith("not JSON (")


def test_flipped_byte_inside_a_claim() -> None:
    data = encode(BOOT, CLAIMS)
    assert data.count(b'"bravo"') == 1
    # Still valid JSON of the right shape: only the checksum can tell.
    flipped = data.replace(b'"bravo"', b'"bravn"')
    assert decode_error(flipped) == "checksum mismatch (truncated or edited)"


def test_wrong_version() -> None:
    body = json.loads(encode(BOOT, CLAIMS))
    del body["checksum"]
    body["version"] = 2
    assert decode_error(with_checksum(body)) == "version 2, this driver reads 1"
    del body["version"]
    assert decode_error(with_checksum(body)) == "version None, this driver reads 1"


def test_missing_checksum() -> None:
    body = json.loads(encode(BOOT, CLAIMS))
    del body["checksum"]
    message = decode_error(json.dumps(body).encode())
    assert message.startswith("checksum ")


@pytest.mark.parametrize(
    ("claims", "names"),
    [
        ({"uid-1": {"namespace": "default", "name": "alpha"}}, "'devices'"),
        (
            {"uid-1": {"namespace": "default", "name": "a", "devices": [{"pool": "p"}]}},
            "'requestNames'",
        ),
        ({"uid-1": "a string, not an object"}, ""),
        (["uid-1"], ""),
    ],
)
def test_malformed_entry(claims: Any, names: str) -> None:
    message = decode_error(with_checksum({"version": 1, "bootId": BOOT, "claims": claims}))
    assert message.startswith("malformed entry (")
    assert names in message


def test_admin_access_is_recorded() -> None:
    # The exclusivity check of a later prepare, maybe by a restarted plugin, needs it.
    admin = ClaimRecord("uid-3", "default", "watch", (
        RecordedDevice(("watch",), "node-a", "neurondevice2",
                       ("neuron.aws.com/neuron=uid-3-neurondevice2",), admin_access=True),
    ))  # fmt: skip
    claims = CLAIMS | {"uid-3": admin}
    assert decode(encode(BOOT, claims)) == (BOOT, claims)
    entry = json.loads(encode(BOOT, claims))["claims"]["uid-3"]["devices"][0]
    assert entry["adminAccess"] is True


def test_a_record_without_admin_access_is_exclusive() -> None:
    # Records of earlier versions of the driver have no field: nothing there was shared.
    device = {"requestNames": ["neurons"], "pool": "node-a", "device": "neurondevice1",
              "cdiDeviceIds": ["neuron.aws.com/neuron=uid-1-neurondevice1"]}  # fmt: skip
    claim = {"namespace": "default", "name": "a", "devices": [device]}
    body = {"version": 1, "bootId": BOOT, "claims": {"uid-1": claim}}
    _, claims = decode(with_checksum(body))
    assert claims["uid-1"].devices[0].admin_access is False
    device["adminAccess"] = "yes"
    assert decode_error(with_checksum(body)).startswith("malformed entry (")


def test_missing_boot_id_is_malformed() -> None:
    message = decode_error(with_checksum({"version": 1, "claims": {}}))
    assert message.startswith("malformed entry (")
    assert "bootId" in message


def store_in(tmp_path: Path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "plugin" / "checkpoint.json")


def test_load_without_a_file(tmp_path: Path) -> None:
    loaded = store_in(tmp_path).load(BOOT)
    assert loaded.claims == {}
    assert loaded.problem is None
    assert loaded.other_boot is False


def test_load_of_a_corrupt_file_sets_it_aside(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.apply(BOOT, CLAIMS)
    corrupt = store.path.read_bytes()[:-20]
    store.path.write_bytes(corrupt)

    loaded = store.load(BOOT)

    assert loaded.claims == {}
    assert loaded.other_boot is False
    assert loaded.problem is not None
    assert "corrupt" in loaded.problem
    assert str(store.path) in loaded.problem
    assert not store.path.exists()
    aside = list(store.path.parent.glob("checkpoint.json.corrupt-*"))
    assert len(aside) == 1
    assert re.fullmatch(r"checkpoint\.json\.corrupt-[0-9]+", aside[0].name)
    assert aside[0].read_bytes() == corrupt  # kept for a post-mortem
    assert str(aside[0]) in loaded.problem
    # Setting it aside means the next start begins clean instead of failing again.
    assert store.load(BOOT) == Loaded({})


def test_load_from_another_boot_is_discarded(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.apply(OTHER_BOOT, CLAIMS)
    loaded = store.load(BOOT)
    assert loaded.claims == {}
    assert loaded.other_boot is True
    assert loaded.problem is not None
    assert OTHER_BOOT in loaded.problem
    assert BOOT in loaded.problem
    assert store.load(BOOT).claims == {}


def test_apply_adds_and_drops(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    assert store.apply(BOOT, {"uid-1": CLAIMS["uid-1"]}) == {"uid-1": CLAIMS["uid-1"]}
    assert store.apply(BOOT, {"uid-2": CLAIMS["uid-2"]}) == CLAIMS
    assert store.apply(BOOT, {"uid-1": None, "uid-3": None}) == {"uid-2": CLAIMS["uid-2"]}
    assert store.load(BOOT).claims == {"uid-2": CLAIMS["uid-2"]}
    assert decode(store.path.read_bytes()) == (BOOT, {"uid-2": CLAIMS["uid-2"]})
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def test_apply_writes_nothing_when_nothing_changes(tmp_path: Path) -> None:
    """An unprepare of a claim the file does not hold writes nothing (a write renames
    a new file in place, so the inode would change)."""
    store = store_in(tmp_path)
    assert store.apply(BOOT, {"uid-1": None}) == {}
    assert not store.path.exists()
    store.apply(BOOT, {"uid-1": CLAIMS["uid-1"]})
    inode = store.path.stat().st_ino
    assert store.apply(BOOT, {"uid-2": None}) == {"uid-1": CLAIMS["uid-1"]}
    assert store.apply(BOOT, {"uid-1": CLAIMS["uid-1"]}) == {"uid-1": CLAIMS["uid-1"]}
    assert store.path.stat().st_ino == inode
    assert not store.changed()
    moved = record("uid-1", "alpha", (2,))
    assert store.apply(BOOT, {"uid-1": moved}) == {"uid-1": moved}
    assert store.path.stat().st_ino != inode


def test_apply_replaces_another_boots_state(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.apply(OTHER_BOOT, {"uid-1": CLAIMS["uid-1"]})
    assert store.apply(BOOT, {"uid-2": CLAIMS["uid-2"]}) == {"uid-2": CLAIMS["uid-2"]}
    assert decode(store.path.read_bytes()) == (BOOT, {"uid-2": CLAIMS["uid-2"]})


def test_two_instances_on_one_file_keep_each_others_claims(tmp_path: Path) -> None:
    # Two plugin instances during a rolling update, each with its own store object.
    old, new = store_in(tmp_path), store_in(tmp_path)
    old.load(BOOT)
    new.load(BOOT)
    old.apply(BOOT, {"uid-1": CLAIMS["uid-1"]})
    assert new.apply(BOOT, {"uid-2": CLAIMS["uid-2"]}) == CLAIMS
    assert old.apply(BOOT, {"uid-3": record("uid-3")}) == CLAIMS | {"uid-3": record("uid-3")}
    assert new.load(BOOT).claims == CLAIMS | {"uid-3": record("uid-3")}


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "plugin" / "checkpoint.json"
    start_read, start_write = os.pipe()
    children = []
    for child in range(2):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(start_write)
                os.read(start_read, 1)  # both start together, to contend for the file
                store = CheckpointStore(path)
                for i in range(50):
                    uid = f"child{child}-{i}"
                    store.apply(BOOT, {uid: record(uid)})
                status = 0
            finally:
                os._exit(status)
        children.append(pid)
    os.close(start_read)
    os.close(start_write)  # EOF releases both children at once
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    claims = CheckpointStore(path).load(BOOT).claims
    expected = {f"child{c}-{i}" for c in range(2) for i in range(50)}
    assert set(claims) == expected
    assert all(claims[uid] == record(uid) for uid in expected)
