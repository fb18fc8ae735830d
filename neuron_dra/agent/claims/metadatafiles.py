"""Device metadata files on disk: written at prepare, removed at unprepare, swept at start.

Each file and spec is written whole (temp file + rename), never fsynced, like the
claim's CDI spec: they serve this boot only, and the first start after a reboot
removes them all. What exists is kept in one order, so that anything found
without what it depends on is an orphan whoever else runs:

    metadata file  =>  its metadata CDI spec  =>  the claim's CDI spec

Prepare writes right to left (the claim's spec, then per request the metadata
spec, then the file), unprepare removes left to right, and the start sweep lists
left to right: a file no listed metadata spec names, or a metadata spec whose
claim has no spec, is left over from a prepare or unprepare cut short, or from
an agent of an earlier version (a rolling update) that unprepared the claim
without knowing of its metadata, and is removed. A second agent preparing at
the same moment cannot lose its files to the sweep: what it writes first is
what the sweep lists last.

The directory of a claim is named by namespace and name, as the helper names it;
a claim deleted and made again under the same name while the old one is still
prepared shares it, so unprepare removes only the files of its own UID.

Unprepare removes the files and specs, and leaves the claim's directories, empty, to
`tidy`, which the agent runs in one of its event loop's worker threads once the
kubelet has its answer (`ClaimUnprepared`): a directory's removal on a disk costs
several times what the rest of an unprepare does, and an empty directory gives a
container nothing. The two never
meet a write halfway: `write` and `tidy` take one lock, so a directory is never removed
between its creation and the rename of the file into it. A directory a crash left
behind is removed by the start sweep.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from neuron_dra.agent.claims import metadata as md
from neuron_dra.agent.claims.cdi import check_uid
from neuron_dra.agent.claims.checkpoint import ClaimRecord
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimUnprepared
from neuron_dra.agent.claims.plan import ClaimError, PreparedClaim
from neuron_dra.agent.files.atomicfile import atomic_write
from neuron_dra.agent.objects.claim import ResourceClaim

log = logging.getLogger(__name__)

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_UID = re.compile(rb'\n    "uid": "([0-9A-Za-z-]+)",?\n')
_HEAD = 2048

DeviceAttributes = Callable[[str], Mapping[str, md.Attribute] | None]
"""A device's attributes as this node publishes them, by device name; None if unknown."""


@dataclass(frozen=True)
class MetadataFiles:
    plugin_dir: Path
    cdi_root: Path
    attributes: DeviceAttributes
    # Off: nothing is written; what an earlier run wrote is still removed.
    enabled: bool = True
    # Held by `write` and `tidy`: see the module's docstring.
    _dirs: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def write(self, prepared: PreparedClaim, claim: md.MetadataClaim) -> dict[str, str]:
        """Write each request's metadata spec and file; the CDI id to give per request."""
        ref = prepared.claim
        by_request: dict[str, list[md.MetadataDevice]] = {}
        for device in prepared.devices:
            attributes = self.attributes(device.device)
            if attributes is None:
                log.warning(
                    "device not published on this node: its metadata has no attributes",
                    extra={"claim": ref.uid, "device": device.device},
                )
            found = md.MetadataDevice(device.pool, device.device, attributes or {})
            # The result's request as allocated: a subrequest's full name, if one was chosen.
            by_request.setdefault(device.request_names[-1], []).append(found)
        ids = {}
        for request, devices in by_request.items():
            self._write_request(claim, request, devices)
            ids[md.base_request(request)] = md.cdi_device_id(ref.uid, request)
        return ids

    def _write_request(
        self, claim: md.MetadataClaim, request: str, devices: list[md.MetadataDevice]
    ) -> None:
        atomic_write(
            md.cdi_spec_path(self.cdi_root, claim.uid, request),
            md.encode_cdi_spec(self.plugin_dir, claim, request),
            mode=md.FILE_MODE,
            dir_mode=md.DIR_MODE,
            durable=False,
        )
        with self._dirs:
            atomic_write(
                md.metadata_path(self.plugin_dir, claim, request),
                md.encode_metadata(claim, request, devices),
                mode=md.FILE_MODE,
                dir_mode=md.DIR_MODE,
                durable=False,
            )

    def remove(self, ref: ClaimRef) -> None:
        """Remove the claim's metadata files, then their specs; nothing there is fine.
        The directories stay, for `tidy`."""
        directory = md.claim_dir(self.plugin_dir, ref.namespace, ref.name)
        for file in _files(directory):
            if _uid_of(file) in (ref.uid, None):
                file.unlink(missing_ok=True)
        # A listing rather than a glob: a glob compiles its pattern, new for every UID,
        # which cost an unprepare 0.3 ms more than the listing.
        prefix = f"{md.CDI_PREFIX}{check_uid(ref.uid)}_"
        with os.scandir(self.cdi_root) as found:
            for entry in found:
                if entry.name.startswith(prefix) and entry.name.endswith(".json"):
                    Path(entry.path).unlink(missing_ok=True)

    def tidy(self, ref: ClaimRef) -> None:
        """Remove the directories of the claim's name that hold no file: its request
        directories and its own. One that holds the file of a claim made again under the
        same name stays; one that holds only what the agent never writes goes whole."""
        directory = md.claim_dir(self.plugin_dir, ref.namespace, ref.name)
        with self._dirs:
            for request_dir in _dirs(directory):
                if not (request_dir / md.FILE_NAME).exists():
                    _remove_request_dir(request_dir)
            _remove_if_empty(directory)

    def unprepared(self, event: ClaimUnprepared) -> None:
        """`tidy`, once the claim's unprepare has answered."""
        self.tidy(event.claim)

    def sweep(self, claim_spec_uids: Callable[[], set[str]], *, everything: bool) -> int:
        """Remove leftovers (see the module's docstring), or every file after a reboot;
        how many files and specs went."""
        root = self.plugin_dir / md.SUBDIR
        files = [f for d in _dirs(root) for f in _files(d)]
        specs = _specs(self.cdi_root)
        claims = set() if everything else claim_spec_uids()
        removed = 0
        for spec, (uid, _) in specs.items():
            if uid not in claims:
                spec.unlink(missing_ok=True)
                removed += 1
        named = {host for spec, (uid, host) in specs.items() if uid in claims}
        for file in files:
            if str(file) not in named:
                _remove_request_dir(file.parent)
                removed += 1
        for directory in _dirs(root):
            _remove_if_empty(directory)
        return removed


def metadata_claim(prepared: PreparedClaim, obj: ResourceClaim) -> md.MetadataClaim:
    """The claim as its metadata names it. ClaimError when its pod claim name (the
    annotation) is no DNS label: it becomes a directory of the container's mount path,
    and any user who may create a claim may set it. Called before any file is written."""
    pod_claim = obj.annotations.get(POD_CLAIM_ANNOTATION)
    ref = prepared.claim
    try:
        return md.MetadataClaim(ref.namespace, ref.name, ref.uid, pod_claim)
    except ValueError as err:
        raise ClaimError(f"claim {ref}: annotation {POD_CLAIM_ANNOTATION}: {err}") from None


def _dirs(root: Path) -> list[Path]:
    try:
        return [d for d in root.iterdir() if d.is_dir() and not d.is_symlink()]
    except FileNotFoundError:
        return []


def _files(claim_dir: Path) -> list[Path]:
    """The request files of a claim's directory (a request directory left empty by a cut
    short removal counts: its file is missing)."""
    return [r / md.FILE_NAME for r in _dirs(claim_dir)]


def _remove_request_dir(directory: Path) -> None:
    """The request's file, then its directory; anything else found there (not written
    by the agent) with a tree removal, which costs several times more."""
    (directory / md.FILE_NAME).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        # Deferred: rarely needed, and it brings the archive modules with it.
        import shutil  # noqa: PLC0415

        shutil.rmtree(directory, ignore_errors=True)


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # gone, or another claim's files are there
        directory.rmdir()


def _uid_of(file: Path) -> str | None:
    """The claim UID in a metadata file; None when it has none (then it is no one's to
    keep). Its first object's `metadata` comes before the devices and holds only DNS
    names before the UID, so the file's head has it: a 16-device file parsed whole
    cost an unprepare 0.5 ms."""
    try:
        with file.open("rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    found = _UID.search(head)
    return found.group(1).decode() if found else None


def _specs(cdi_root: Path) -> dict[Path, tuple[str, str]]:
    """This driver's metadata specs: each one's claim UID and the file it mounts."""
    found = {}
    for spec in cdi_root.glob(f"{md.CDI_PREFIX}*.json"):
        uid = spec.name[len(md.CDI_PREFIX) :].split("_", 1)[0]
        try:
            host = json.loads(spec.read_bytes())["devices"][0]["containerEdits"]["mounts"][0]
            found[spec] = (uid, str(host["hostPath"]))
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            found[spec] = (uid, "")  # unreadable: its claim's spec decides
    return found


def with_metadata(record: ClaimRecord, ids: Mapping[str, str]) -> ClaimRecord:
    """The kubelet's answer with each request's metadata CDI id added to the first
    entry of that request, as the helper adds it (a container of the request, or of the
    whole claim, gets it; an entry named by no request, none)."""
    given: set[str] = set()
    devices = []
    for device in record.devices:
        extra = []
        for request in device.request_names:
            if request in ids and request not in given:
                extra.append(ids[request])
                given.add(request)
        devices.append(replace(device, cdi_device_ids=device.cdi_device_ids + tuple(extra)))
    return replace(record, devices=tuple(devices))
