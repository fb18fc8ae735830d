"""The on-disk record of prepared claims.

Written atomically (temp file, rename), checksummed, versioned and stamped
with the boot id. Writers take an exclusive file lock and apply their changes
to what is on disk at that moment, so two plugin instances during a rolling
update never lose each other's claims. A corrupt file is set aside, never
trusted and never fatal, and so is anything that is not a regular file of at
most `MAX_CHECKPOINT_BYTES` (a FIFO, which would block a read forever, a link, a
directory): it is opened without blocking or following a link, and read to that
bound. A file from another boot is discarded because its
CDI specs and devices are gone with that boot.

Not fsynced while the boot id is known. What an fsync adds to the rename is
survival of a power loss or a kernel crash, and both end the boot, after which
the file must be discarded anyway: the claims it records were prepared on
devices and in CDI specs that did not survive either. Any crash of the plugin
alone leaves the renamed file whole in the page cache. What must survive is
the knowledge that a boot ended, and torn bytes cannot say which boot wrote
them; so a marker beside the file names the boot that last used it, written
and fsynced once a boot (`begin_boot`). Without a boot id reboots cannot be
told apart, and every write is fsynced, file and directory.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuron_dra.agent.claims.limits import MAX_CHECKPOINT_BYTES
from neuron_dra.agent.files.atomicfile import atomic_write
from neuron_dra.agent.files.dirs import PLUGIN_DIR_MODE, ensure_dir, open_lock_file
from neuron_dra.agent.files.filestamp import Stamp, stamp
from neuron_dra.hardware.sysfsfile import read_bytes

log = logging.getLogger(__name__)

VERSION = 1
# A boot id is a UUID: 37 bytes with its newline.
MARKER_BYTES = 4096


@dataclass(frozen=True)
class RecordedDevice:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    # Whether the result has admin access, which may share the device with other claims.
    admin_access: bool = False


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    devices: tuple[RecordedDevice, ...]


Claims = dict[str, ClaimRecord]


class CheckpointError(ValueError):
    """The checkpoint cannot be trusted; the message says why."""


class CheckpointTooLargeError(ValueError):
    """A write refused: the file would be larger than a checkpoint may be."""


def encode(boot_id: str, claims: Mapping[str, ClaimRecord]) -> bytes:
    body = {
        "version": VERSION,
        "bootId": boot_id,
        "claims": {uid: _record_json(r) for uid, r in sorted(claims.items())},
    }
    # One encoding: the canonical form the checksum covers is also what is written, with
    # the checksum as its last member. Compact, because `indent` makes `json` fall back
    # from its C encoder to Python, five times slower on a node of many claims.
    canonical = _canonical(body)
    return canonical[:-1] + b',"checksum":"' + _digest(canonical).encode() + b'"}'


def decode(data: bytes) -> tuple[str, Claims]:
    """(boot id, claims), or CheckpointError naming what is wrong."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"not JSON ({err})") from None
    if not isinstance(obj, dict):
        raise CheckpointError("not a JSON object")
    if obj.get("version") != VERSION:
        raise CheckpointError(f"version {obj.get('version')!r}, this driver reads {VERSION}")
    checksum = obj.pop("checksum", None)
    if checksum != _checksum(obj):
        raise CheckpointError("checksum mismatch (truncated or edited)")
    try:
        claims = {uid: _record(uid, r) for uid, r in obj["claims"].items()}
        return str(obj["bootId"]), claims
    except (KeyError, TypeError, AttributeError) as err:
        raise CheckpointError(f"malformed entry ({err!r})") from None


@dataclass(frozen=True)
class Loaded:
    claims: Claims
    problem: str | None = None  # why state was discarded, for the log
    other_boot: bool = False  # the state belonged to a boot that is over


class CheckpointStore:
    """The file of prepared claims a node's plugin instances share.

    Its caller is the preparer, from the DRA service's threads and the thread that runs
    `Preparer.start`; the preparer lets one thread at a time at a store (its commit lock),
    and the file lock orders that thread with a second instance's during a rolling
    update. `apply` is idempotent: changes the file already holds write nothing. A crash
    of the process keeps every write that returned (renamed whole; fsynced as well when
    `durable`); a reboot keeps none of it, as the boot marker tells the next start.
    """

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        """`durable`: fsync each write; the agent turns it off when it knows the boot id."""
        self.path = path
        self.durable = durable
        self.lock_path = path.with_name(path.name + ".lock")
        self.boot_path = path.with_name(path.name + ".boot")
        # The bytes this store last wrote and what they decode to. Every write reads the
        # file under the lock first (another instance may have written it); when it is
        # still what we wrote, the comparison of bytes replaces the decode.
        self._written: tuple[bytes, str, Claims] | None = None
        # The file's stamp when this store last read or wrote it.
        self._seen: Stamp | None = None

    def load(self, boot_id: str) -> Loaded:
        """Read the checkpoint of this boot; set aside anything else."""
        with self._locked():
            return self._read(boot_id)

    def begin_boot(self, boot_id: str) -> bool:
        """Mark the checkpoint as this boot's; whether a marker named another boot.

        Then the checkpoint is that boot's, whatever its bytes say, and is removed.
        No marker (a node where this driver has not started since it was installed or
        upgraded from a version without one): the checkpoint's own boot id decides.
        """
        with self._locked():
            try:
                marker = read_regular(self.boot_path, MARKER_BYTES)
            except CheckpointError as err:
                # Replaced below (a rename cannot replace a directory, so it is moved
                # first); the checkpoint's own boot id decides meanwhile.
                aside = _set_aside(self.boot_path)
                log.error("boot marker %s ignored: %s; moved to %s", self.boot_path, err, aside)
                marker = None
            previous = None if marker is None else marker.decode(errors="replace").strip()
            if previous == boot_id:
                return False
            if previous is not None:
                self.path.unlink(missing_ok=True)
            atomic_write(self.boot_path, boot_id.encode(), mode=0o600, dir_mode=PLUGIN_DIR_MODE)
            return previous is not None

    def changed(self) -> bool:
        """Whether the file differs from the one this store last read or wrote: written
        by another plugin instance since (a rolling update). One stat, no lock."""
        return stamp(self.path) != self._seen

    def apply(self, boot_id: str, changes: Mapping[str, ClaimRecord | None]) -> Claims:
        """Add (record) or drop (None) claims on top of what is on disk; return the result.

        Nothing is written when that changes nothing: every unprepare is applied,
        held here or not, and the kubelet repeats one whose answer it did not get.
        """
        with self._locked():
            loaded = self._read(boot_id)
            if loaded.problem:
                # Found by a write, not a load: nobody else reports it.
                log.error(loaded.problem)
            on_disk = loaded.claims
            claims = dict(on_disk)
            for uid, record in changes.items():
                if record is None:
                    claims.pop(uid, None)
                else:
                    claims[uid] = record
            if claims == on_disk:
                # A file set aside or discarded by the read is no file, and no file
                # holds no claims.
                return claims
            data = encode(boot_id, claims)
            if len(data) > MAX_CHECKPOINT_BYTES:
                # The next read would set the whole file aside, every claim in it.
                raise CheckpointTooLargeError(
                    f"the checkpoint would take {len(data)} bytes with this claim, more "
                    f"than {MAX_CHECKPOINT_BYTES} bytes: not recorded"
                )
            atomic_write(
                self.path, data, mode=0o600, dir_mode=PLUGIN_DIR_MODE, durable=self.durable
            )
            self._written = (data, boot_id, claims)
            self._seen = stamp(self.path)
            return dict(claims)

    def _read(self, boot_id: str) -> Loaded:
        # Before the read: a write in between makes the next `changed` true, not false.
        self._seen = stamp(self.path)
        try:
            data = read_regular(self.path, MAX_CHECKPOINT_BYTES)
            if data is None:
                return Loaded({})
            if self._written is not None and self._written[0] == data:
                saved_boot, claims = self._written[1], self._written[2]
            else:
                saved_boot, claims = decode(data)
        except CheckpointError as err:
            aside = _set_aside(self.path)
            return Loaded({}, f"checkpoint {self.path} is corrupt: {err}; moved to {aside}")
        if saved_boot != boot_id:
            self.path.unlink()
            problem = f"checkpoint {self.path} is from boot {saved_boot}, not {boot_id}; discarded"
            return Loaded({}, problem, other_boot=True)
        return Loaded(claims)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        ensure_dir(self.path.parent, PLUGIN_DIR_MODE)
        fd = open_lock_file(self.lock_path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of `path`; None when it does not exist; CheckpointError when it is not
    a regular file of at most `limit` bytes. Never blocks (a FIFO) or follows a link."""
    try:
        return read_bytes(path, limit, nofollow=True)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CheckpointError("a symbolic link, not a regular file") from None
        if err.errno == errno.EINVAL:
            mode = stat.filemode(path.lstat().st_mode)
            raise CheckpointError(f"not a regular file (mode {mode})") from None
        if err.errno == errno.EFBIG:
            raise CheckpointError(err.strerror) from None
        raise


def _set_aside(path: Path) -> Path:
    """Rename whatever is at `path` out of the way, kept for a look; its new path."""
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    path.replace(aside)
    return aside


def _checksum(body: Mapping[str, Any]) -> str:
    return _digest(_canonical(body))


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _digest(canonical: bytes) -> str:
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _record_json(record: ClaimRecord) -> dict[str, Any]:
    return {
        "namespace": record.namespace,
        "name": record.name,
        "devices": [
            {
                "requestNames": list(d.request_names),
                "pool": d.pool,
                "device": d.device,
                "cdiDeviceIds": list(d.cdi_device_ids),
                "adminAccess": d.admin_access,
            }
            for d in record.devices
        ],
    }


def _record(uid: str, obj: dict[str, Any]) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace=str(obj["namespace"]),
        name=str(obj["name"]),
        devices=tuple(
            RecordedDevice(
                tuple(map(str, d["requestNames"])),
                str(d["pool"]),
                str(d["device"]),
                tuple(map(str, d["cdiDeviceIds"])),
                _admin_access(d),
            )
            for d in obj["devices"]
        ),
    )


def _admin_access(device: dict[str, Any]) -> bool:
    # Absent in records written before it was recorded: exclusive, the side that refuses.
    value = device.get("adminAccess", False)
    if not isinstance(value, bool):
        raise TypeError(f"adminAccess {value!r} is not a boolean")
    return value
