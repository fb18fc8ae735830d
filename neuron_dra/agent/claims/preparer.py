"""Prepare and unprepare claims: the side effects around `claims.plan`.

Order of effects for prepare: API read, plan (pure), CDI spec write, device
metadata writes (`metadatafiles`, which unprepare removes first), checkpoint
write (the record is the kubelet's answer, `answer`). A checkpoint write that
fails (a full disk) fails the prepare, and the files it wrote are removed again:
nothing of a claim not prepared stays. A crash anywhere leaves a state that the
kubelet's retry repairs: the CDI file name is derived from the claim UID, so a retried prepare
overwrites it with identical content and an unprepare deletes it whether or
not the checkpoint ever heard of the claim. Claims run concurrently; the same
claim is serialized by its own lock; checkpoint writes from concurrent claims
are grouped into one. A device another claim holds (prepared, or being
prepared) is refused before any file is written, unless either side has admin
access. An already prepared claim is answered from memory while its spec file
exists; when a second plugin instance (a rolling update) removed it, the claim
is prepared again.

Blocking, in the caller's thread: the kubelet's calls arrive on the gRPC
server's worker threads, and a claim's API read, plan and writes run there
from start to end. Handing its three steps to worker threads of an event loop
cost a call 0.33 ms (docs/contributors/decisions.md); `_mutex` guards the shared state.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.answer import claim_record
from neuron_dra.agent.claims.checkpoint import CheckpointStore, ClaimRecord, RecordedDevice
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import (
    ClaimPrepared,
    ClaimsChanged,
    ClaimUnprepared,
    Post,
    no_post,
)
from neuron_dra.agent.claims.exclusive import check_exclusive
from neuron_dra.agent.claims.metadatafiles import MetadataFiles, metadata_claim, with_metadata
from neuron_dra.agent.claims.plan import ClaimError, Holding, PreparedClaim, decode, plan_claim
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger(__name__)

GetClaim = Callable[[str, str], dict[str, Any]]

# Claims of one call prepared side by side (a pod's claims for this driver: a handful).
CLAIMS_AT_ONCE = 4

# The steps between a claim's side effects. A crash may come between any two;
# tests end the process at each through `after_step` to prove the retry repairs it.
Step = Literal[
    "after-plan",
    "after-cdi-write",
    "after-metadata-write",
    "after-checkpoint",
    "after-metadata-remove",
    "after-cdi-remove",
]
STEPS: tuple[Step, ...] = get_args(Step)
StepHook = Callable[[Step], None]


def no_step_hook(step: Step) -> None:
    """The production hook: nothing happens between steps."""


@dataclass(frozen=True)
class Outcome:
    """One claim's answer to the kubelet: devices, or an error message."""

    devices: tuple[RecordedDevice, ...] = ()
    error: str = ""
    # Error class for metrics (claim, api, io, internal); not part of the kubelet's answer.
    reason: str = field(default="", compare=False)


def _failed(ref: ClaimRef, err: Exception) -> Outcome:
    """An outcome for an unexpected error, classified for the error metrics."""
    reason = (
        "api" if isinstance(err, ApiError) else "io" if isinstance(err, OSError) else "internal"
    )
    return Outcome(error=f"claim {ref}: {type(err).__name__}: {err}", reason=reason)


class Preparer:
    """The node side of the kubelet's `NodePrepareResources` and `NodeUnprepareResources`.

    Callers and threads: `prepare` and `unprepare` are called by the DRA service
    (`kubelet.plugin.DraV1`) from grpcio's worker threads, several calls at once; each
    blocks its thread through the claim's API read and file writes and returns one
    `Outcome` per claim, never raising for one claim's failure. `start` is called once,
    off the event loop and before any of them (it reads the checkpoint); `refresh` from
    any thread. It tells the rest of the agent what changed through `post` (`events`),
    which only hands each event to the event loop.

    Idempotent, as the kubelet repeats calls: a claim already prepared whose CDI spec
    is there is answered the same devices from memory, with no read; a claim not
    prepared, or unprepared twice, unprepares with nothing written. Calls for one claim
    run one at a time (its lock); different claims run side by side.

    A crash may come between any two steps (`STEPS`): what survives is the checkpoint and
    the files, in the order the module docstring gives, and the kubelet's repeat of the
    call it got no answer for repairs the rest. Nothing in memory needs surviving:
    `start` rebuilds it from the checkpoint.
    """

    def __init__(
        self,
        *,
        inventory: Callable[[], NodeInventory],
        pool: str,
        cdi_root: Path,
        store: CheckpointStore,
        boot_id: str,
        get_claim: GetClaim,
        after_step: StepHook = no_step_hook,
        metrics: Metrics | None = None,
        post: Post = no_post,
        metadata: MetadataFiles | None = None,
    ) -> None:
        # Device metadata files (KEP-5304); None: neither written nor cleaned up.
        self._metadata = metadata
        self._metrics = metrics or Metrics()
        # Where the preparer's events go (`events`): each claim this instance prepared in
        # full or unprepared, and the prepared claims whenever they change (this
        # instance's or, read from the checkpoint, the other's of a rolling update).
        self._post = post
        self._inventory = inventory
        self._pool = pool
        self._cdi_root = cdi_root
        self._store = store
        self._boot_id = boot_id
        self._get_claim = get_claim
        self._after_step = after_step
        # Guards the dictionaries below; held for microseconds, never across I/O.
        self._mutex = threading.Lock()
        # Weak: a claim's lock lives exactly as long as someone holds or awaits it.
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._claims: dict[str, ClaimRecord] = {}
        # Claims that hold their devices but are not in `_claims` yet: planned, not committed.
        self._preparing: dict[str, PreparedClaim] = {}
        self._pending: dict[str, ClaimRecord | None] = {}
        # One checkpoint write at a time; the changes that queue meanwhile share the next.
        self._commit_lock = threading.Lock()
        self._side_by_side = ThreadPoolExecutor(CLAIMS_AT_ONCE, thread_name_prefix="claims")

    def start(self) -> None:
        """Load this boot's checkpoint; after a reboot, drop every spec of the old boot."""
        rebooted = self._store.begin_boot(self._boot_id)
        if rebooted:
            log.info("first start since a reboot: the previous boot's claims are gone")
        loaded = self._store.load(self._boot_id)
        if loaded.problem:
            log.error(loaded.problem)
        self._claims = dict(loaded.claims)
        if self._metadata is not None:
            swept = self._metadata.sweep(
                lambda: cdi.spec_uids(self._cdi_root), everything=rebooted or loaded.other_boot
            )
            log.info("leftover device metadata files removed", extra={"files": swept})
        specs = cdi.spec_uids(self._cdi_root)
        if rebooted or loaded.other_boot:
            for uid in specs:
                cdi.remove_spec(self._cdi_root, uid)
            log.info("CDI specs of the previous boot removed", extra={"specs": len(specs)})
        elif orphans := specs - set(self._claims):
            # A prepare cut short (or one of a second plugin instance still running):
            # the kubelet's retry or unprepare settles it, so leave the file alone.
            log.warning("CDI specs without a checkpoint entry", extra={"claims": sorted(orphans)})
        log.info("prepared claims restored", extra={"claims": len(self._claims)})

    @property
    def prepared(self) -> dict[str, ClaimRecord]:
        with self._mutex:
            return dict(self._claims)

    def prepare(self, refs: Iterable[ClaimRef]) -> dict[str, Outcome]:
        return self._each("prepare", self._prepare_one, list(refs))

    def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, Outcome]:
        return self._each("unprepare", self._unprepare_one, list(refs))

    def _each(
        self, what: str, step: Callable[[ClaimRef], Outcome], refs: list[ClaimRef]
    ) -> dict[str, Outcome]:
        """Each claim's outcome; the one claim of almost every call in this thread."""
        if len(refs) == 1:
            return {refs[0].uid: self._one(what, step, refs[0])}
        outcomes = self._side_by_side.map(lambda r: self._one(what, step, r), refs)
        return {r.uid: o for r, o in zip(refs, outcomes, strict=True)}

    def _one(self, what: str, step: Callable[[ClaimRef], Outcome], ref: ClaimRef) -> Outcome:
        """One claim's `step`, its UID checked before any file is touched, timed for metrics."""
        started = time.perf_counter()
        try:
            cdi.check_uid(ref.uid)
        except ValueError as err:
            outcome = Outcome(error=str(err), reason="claim")
        else:
            outcome = step(ref)
        self._metrics.observe(f"neuron_dra_{what}_duration_seconds", time.perf_counter() - started)
        if outcome.reason:
            self._metrics.inc(f"neuron_dra_{what}_errors_total", reason=outcome.reason)
        return outcome

    def _prepare_one(self, ref: ClaimRef) -> Outcome:
        extra = {"claim": ref.uid, "claim_namespace": ref.namespace, "claim_name": ref.name}
        with self._lock(ref.uid):
            with self._mutex:
                done = self._claims.get(ref.uid)
            if done is not None:
                if cdi.spec_path(self._cdi_root, ref.uid).exists():
                    return Outcome(done.devices)
                # During a rolling update the other instance shares the CDI directory
                # and checkpoint, and unprepared the claim since: its spec is gone, so
                # the remembered ids would fail the container. A full prepare writes
                # both again; forgetting the record first keeps its devices from
                # counting as held should that prepare fail. A stat rather than a
                # checkpoint read under its lock: it costs microseconds, and unprepare
                # removes the spec before the entry, so no unprepare is missed.
                with self._mutex:
                    self._claims.pop(ref.uid, None)
                log.info("prepared claim's CDI spec is gone; preparing it again", extra=extra)
            try:
                phase = time.perf_counter()
                obj = decode(ref, self._get_claim(ref.namespace, ref.name))
                phase = self._phase("api", phase)
                self.refresh()
                inventory = self._inventory()
                prepared = plan_claim(ref, obj, inventory, self._pool)
                writes_metadata = self._metadata is not None and self._metadata.enabled
                meta_claim = metadata_claim(prepared, obj) if writes_metadata else None
                self._hold(prepared, inventory)
                try:
                    self._after_step("after-plan")
                    cdi.write_spec(self._cdi_root, prepared)
                    self._after_step("after-cdi-write")
                    record = claim_record(prepared)
                    if self._metadata is not None and meta_claim is not None:
                        ids = self._metadata.write(prepared, meta_claim)
                        self._after_step("after-metadata-write")
                        record = with_metadata(record, ids)
                    phase = self._phase("cdi", phase)
                    try:
                        self._commit({ref.uid: record})
                    except Exception:
                        self._remove_written(ref)
                        raise
                finally:
                    # Committed, `_claims` holds the devices now; failed, nothing does.
                    with self._mutex:
                        del self._preparing[ref.uid]
                self._phase("checkpoint", phase)
                self._after_step("after-checkpoint")
                self._post(ClaimPrepared(prepared, inventory))
            except ClaimError as err:
                log.warning("claim not prepared: %s", err, extra=extra)
                return Outcome(error=str(err), reason="claim")
            except Exception as err:
                log.exception("claim not prepared", extra=extra)
                return _failed(ref, err)
            log.info(
                "claim prepared",
                extra=extra | {"devices": ",".join(d.device for d in record.devices)},
            )
            return Outcome(record.devices)

    def _remove_written(self, ref: ClaimRef) -> None:
        """Remove what a prepare wrote whose checkpoint write failed (a full disk): the
        claim is not prepared, so nothing of it may stay for a container to use, nor on
        a disk already full. Metadata first, as unprepare does; a failing removal is
        logged and left to the kubelet's retry or unprepare, or the start sweep."""
        try:
            if self._metadata is not None:
                self._metadata.remove(ref)
                self._metadata.tidy(ref)
            cdi.remove_spec(self._cdi_root, ref.uid)
        except OSError as err:
            log.warning(
                "files of a claim not prepared could not be removed: %s",
                err,
                extra={"claim": ref.uid},
            )
        else:
            log.info("files of a claim not prepared removed", extra={"claim": ref.uid})

    def _unprepare_one(self, ref: ClaimRef) -> Outcome:
        with self._lock(ref.uid):
            try:
                if self._metadata is not None:
                    self._metadata.remove(ref)
                    self._after_step("after-metadata-remove")
                removed = cdi.remove_spec(self._cdi_root, ref.uid)
                self._after_step("after-cdi-remove")
                # Unconditionally: during a rolling update the other instance may have
                # prepared it, and only the file on disk knows.
                self._commit({ref.uid: None})
                self._post(ClaimUnprepared(ref))
            except Exception as err:
                log.exception("claim not unprepared", extra={"claim": ref.uid})
                return _failed(ref, err)
            if removed:
                log.info("claim unprepared", extra={"claim": ref.uid})
            return Outcome()

    def refresh(self) -> None:
        """Take in the claims another plugin instance (a rolling update) recorded since
        this one last read or wrote the checkpoint, so `_hold` counts their devices.

        A stat when nothing changed. Under the commit lock, so that no commit of this
        instance lands between the read and the assignment and is lost from memory.
        The agent also calls it every few seconds: the slices depend on those claims.
        """
        if not self._store.changed():
            return
        with self._commit_lock:
            if self._store.changed():
                loaded = self._store.load(self._boot_id)
                if loaded.problem:
                    log.error(loaded.problem)
                with self._mutex:
                    self._claims = dict(loaded.claims)
                self._post(ClaimsChanged(dict(loaded.claims)))

    def _hold(self, prepared: PreparedClaim, inventory: NodeInventory) -> None:
        """Refuse devices another claim holds; otherwise hold them for this one.

        Deciding and holding is one critical section under `_mutex`, so no other
        claim's prepare can decide in between. The per-claim locks cannot give this:
        they let different claims run together, and two claims for one device would
        each pass a check made while the other was in its API read, spec write or
        checkpoint write. Held devices are those of committed claims (`_claims`, as
        the checkpoint had them when last read or written, and `refresh` reads it
        again whenever a second instance wrote it since) and of claims between this
        point and their commit (`_preparing`).
        """
        with self._mutex:
            held = [
                Holding(ClaimRef(r.namespace, r.name, r.uid), d.pool, d.device, d.admin_access)
                for r in self._claims.values()
                for d in r.devices
            ]
            held += [
                Holding(p.claim, d.pool, d.device, d.admin_access)
                for p in self._preparing.values()
                for d in p.devices
            ]
            check_exclusive(prepared, held, inventory)
            self._preparing[prepared.claim.uid] = prepared

    def _phase(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self._metrics.observe("neuron_dra_prepare_phase_duration_seconds", now - since, phase=name)
        return now

    def _lock(self, uid: str) -> threading.Lock:
        with self._mutex:
            lock = self._locks.get(uid)
            if lock is None:
                lock = self._locks[uid] = threading.Lock()
            return lock

    def _commit(self, changes: dict[str, ClaimRecord | None]) -> None:
        """Persist `changes`, sharing one checkpoint write with concurrent commits."""
        with self._mutex:
            self._pending.update(changes)
        with self._commit_lock:
            with self._mutex:
                if not any(uid in self._pending for uid in changes):
                    return  # a concurrent commit already wrote ours
                batch, self._pending = self._pending, {}
            try:
                claims = self._store.apply(self._boot_id, batch)
            except BaseException:
                # Others' changes wait for the next write; ours failed and must not be
                # recorded later as if it had succeeded.
                with self._mutex:
                    self._pending = {
                        k: v for k, v in batch.items() if k not in changes
                    } | self._pending
                raise
            with self._mutex:
                changed, self._claims = claims != self._claims, claims
        if changed:
            self._post(ClaimsChanged(dict(claims)))
