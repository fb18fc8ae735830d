from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, TimeoutError
from pathlib import Path
from typing import Any, TypeVar

import pytest

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import (
    CheckpointError,
    CheckpointStore,
    CheckpointTooLargeError,
    ClaimRecord,
    Loaded,
    RecordedDevice,
    decode,
    encode,
)
from neuron_dra.agent.claims.limits import (
    MAX_CHECKPOINT_BYTES,
    MAX_ENTRY_BYTES,
    MAX_RESULTS_PER_CLAIM,
)

T = TypeVar("T")
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
    admin = ClaimRecord(
        "uid-3",
        "default",
        "watch",
        (
            RecordedDevice(
                ("watch",),
                "node-a",
                "neurondevice2",
                ("neuron.aws.com/neuron=uid-3-neurondevice2",),
                admin_access=True,
            ),
        ),
    )
    claims = CLAIMS | {"uid-3": admin}
    assert decode(encode(BOOT, claims)) == (BOOT, claims)
    entry = json.loads(encode(BOOT, claims))["claims"]["uid-3"]["devices"][0]
    assert entry["adminAccess"] is True


def test_a_record_without_admin_access_is_exclusive() -> None:
    # Records of earlier versions of the driver have no field: nothing there was shared.
    device = {
        "requestNames": ["neurons"],
        "pool": "node-a",
        "device": "neurondevice1",
        "cdiDeviceIds": ["neuron.aws.com/neuron=uid-1-neurondevice1"],
    }
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


def in_time(work: Callable[[], T], unblock: Callable[[], None]) -> T:
    """`work`'s result; a failure, not a hang, if it blocks (then `unblock` ends it)."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        try:
            return future.result(timeout=10)
        except TimeoutError:
            unblock()
            raise AssertionError("blocked") from None


def open_fifo(path: Path) -> None:
    """A writer that comes and goes: a reader blocked on the FIFO sees its end."""
    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_link(path: Path) -> None:
    target = path.with_name("elsewhere.json")
    target.write_bytes(encode(BOOT, CLAIMS))
    path.symlink_to(target)


def make_directory(path: Path) -> None:
    path.mkdir()


def make_huge(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(MAX_CHECKPOINT_BYTES + 1)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (make_fifo, "not a regular file (mode prw"),
        (make_link, "a symbolic link"),
        (make_directory, "not a regular file (mode d"),
        (make_huge, f"larger than {MAX_CHECKPOINT_BYTES} bytes"),
    ],
    ids=["fifo", "symlink", "directory", "huge"],
)
def test_anything_but_a_checkpoint_sized_file_is_set_aside_at_once(
    tmp_path: Path, make: Callable[[Path], None], says: str
) -> None:
    store = store_in(tmp_path)
    store.path.parent.mkdir(parents=True)
    make(store.path)

    loaded = in_time(lambda: store.load(BOOT), lambda: open_fifo(store.path))

    assert loaded.claims == {}
    assert loaded.problem is not None
    assert says in loaded.problem, loaded.problem
    assert str(store.path) in loaded.problem
    assert not store.path.exists() and not store.path.is_symlink()
    [aside] = store.path.parent.glob("checkpoint.json.corrupt-*")
    assert str(aside) in loaded.problem
    # A link is moved, never followed: its target is as it was.
    if make is make_link:
        assert decode(store.path.with_name("elsewhere.json").read_bytes())[1] == CLAIMS
    # The next write starts a checkpoint of its own.
    assert store.apply(BOOT, CLAIMS) == CLAIMS
    assert store.load(BOOT) == Loaded(CLAIMS)


def test_a_fifo_as_the_boot_marker_is_replaced(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.apply(BOOT, CLAIMS)
    os.mkfifo(store.boot_path)

    rebooted = in_time(lambda: store.begin_boot(BOOT), lambda: open_fifo(store.boot_path))

    # No marker to trust: the checkpoint's own boot id decides, and it is this boot's.
    assert rebooted is False
    assert store.boot_path.read_text() == BOOT
    assert store.load(BOOT) == Loaded(CLAIMS)


def test_a_directory_as_the_boot_marker_is_set_aside(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.apply(BOOT, CLAIMS)
    store.boot_path.mkdir()
    (store.boot_path / "inside").write_text("kept")

    assert store.begin_boot(BOOT) is False
    assert store.boot_path.read_text() == BOOT
    [aside] = store.boot_path.parent.glob(f"{store.boot_path.name}.corrupt-*")
    assert (aside / "inside").read_text() == "kept"
    assert store.load(BOOT) == Loaded(CLAIMS)


def test_a_write_past_the_size_bound_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    """The next load would set such a file aside, and every claim in it with it."""
    store = store_in(tmp_path)
    store.apply(BOOT, CLAIMS)
    huge = RecordedDevice(("neurons",), "node-a", "neurondevice0", ("x" * MAX_CHECKPOINT_BYTES,))
    with pytest.raises(CheckpointTooLargeError, match=f"more than {MAX_CHECKPOINT_BYTES} bytes"):
        store.apply(BOOT, {"uid-3": ClaimRecord("uid-3", "default", "big", (huge,))})
    assert store.load(BOOT) == Loaded(CLAIMS)


def test_the_size_bound_holds_a_call_of_claims_with_every_name_at_its_longest() -> None:
    requests = tuple(f"r{i:02d}-" + "q" * 59 for i in range(MAX_RESULTS_PER_CLAIM))
    uid = "7f0e6b2c-0000-4000-8000-000000000001"
    device = "d" * 63
    entry = RecordedDevice(
        requests,
        "p" * 253,
        device,
        (cdi.device_id(uid, device), cdi.request_device_id(uid, requests[0])),
    )
    one = ClaimRecord(uid, "n" * 63, "c" * 253, (entry,))
    assert len(encode(BOOT, {uid: one})) < MAX_ENTRY_BYTES
    full = ClaimRecord(uid, one.namespace, one.name, (entry,) * MAX_RESULTS_PER_CLAIM)
    assert len(encode(BOOT, {uid: full})) < MAX_RESULTS_PER_CLAIM * MAX_ENTRY_BYTES


def test_a_write_that_finds_the_checkpoint_corrupt_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_in(tmp_path)
    store.apply(BOOT, CLAIMS)
    store.path.write_bytes(store.path.read_bytes()[:100])

    assert store.apply(BOOT, {"uid-3": record("uid-3")}) == {"uid-3": record("uid-3")}

    [said] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert said.getMessage().startswith(f"checkpoint {store.path} is corrupt: ")


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
