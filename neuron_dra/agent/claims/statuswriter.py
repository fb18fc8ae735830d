"""Each prepared claim's `status.devices`, written beside the kubelet's calls, not in them.

A prepare hands its claim here once its CDI spec and checkpoint entry are written,
an unprepare once they are gone; the agent's event loop then applies the entries
(`devicestatus`) with server-side apply as the driver's field manager, the way
KEP-4817 asks drivers to write them, so other drivers' entries of the same claim are
never touched. The status is for people and monitoring tools; the container needs
none of it. So a write that fails (an API server outage, the RBAC of an older
chart) never fails or slows a prepare: it is logged with the claim, counted in
`neuron_dra_claim_status_errors_total{reason}` and tried again with backoff until it
succeeds, or until the claim is gone or no longer holds the devices (retrying cannot
help those). Each claim backs off on its own (1 s doubling to 60 s): a claim whose
write keeps failing (refused by a policy, say) never holds back another claim's,
which is written as soon as it is prepared. One write per claim is pending at a
time: a later one replaces it, and is tried at once, so an unprepare that comes
first clears instead of writing.

The writer reads no claim on the way: a prepare's entries are built from what the
prepare planned, and an unprepare clears with an apply that leaves out the entries
only where this process may have sent some (an apply was tried, or the claim was
restored at start); a claim whose apply was never sent is dropped with no call at
all. Writes wait `COALESCE_S` before their first try, so a claim prepared and
unprepared within it costs the API server nothing, and a burst of claims is
written once each. Where the API server does not serve the field
(DRAResourceClaimDeviceStatus off; on by default since 1.33) an apply answers
without it: the writer says so once and writes nothing more for the life of the
process. Pending writes live in memory; at start each claim the checkpoint holds is
read again and, where it has no entries of this driver, planned again and written,
so a write pending when the last instance stopped is made. A clear pending then is
not: the entries stay until the claim is deallocated, when the API server drops
them itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.backoff import Backoff
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.apiclient.kube import Json
from neuron_dra.agent.claims import devicestatus
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.events import ClaimPrepared, ClaimUnprepared
from neuron_dra.agent.claims.plan import ClaimError, PreparedClaim, decode, plan_claim
from neuron_dra.agent.objects.claim import Allocation, ResourceClaim
from neuron_dra.agent.telemetry.metrics import Metrics
from neuron_dra.hardware.inventory import NodeInventory

log = logging.getLogger(__name__)

ERRORS_METRIC = "neuron_dra_claim_status_errors_total"


class ClaimStatusApi(Protocol):
    """The API server's calls the writer makes (`Kube`'s)."""

    def get_resource_claim(self, namespace: str, name: str) -> Json: ...

    async def apply_claim_status(
        self, namespace: str, name: str, body: Json, manager: str
    ) -> Json: ...


# Seconds a write waits before its first try: a claim unprepared meanwhile costs no
# call, and the status is for people and tools, not the container.
COALESCE_S = 0.25


@dataclass
class _Due:
    """When a pending write is tried: after the coalescing wait, or, once it failed,
    after its claim's own backoff."""

    due: float
    backoff: Backoff | None = None


@dataclass(frozen=True, eq=False)
class _Write:
    claim: ClaimRef
    # apply: the entries of `prepared`; clear: remove this driver's entries; check: a
    # claim restored at start, written from the claim read again if it has no entries.
    kind: Literal["apply", "clear", "check"]
    # What was prepared, the node's LNC and when; the entries are built on the loop,
    # not in the kubelet's call (16 devices: 0.2 ms).
    prepared: tuple[PreparedClaim, int | None, str] | None = None


class StatusWriter:
    """The claims' `status.devices`, written on the event loop beside the kubelet's calls.

    Made and used on the event loop, whose `run` task makes every API call; `prepared`
    and `unprepared` are the handlers of the preparer's events (`events`), and they and
    `restored` never block and never raise: they only note the write. Idempotent: a
    claim's later write replaces its pending one, and applying the same entries again
    changes nothing on the server. Nothing survives a crash but what was applied;
    `restored` at the next start writes the entries of claims still prepared that have
    none.
    """

    def __init__(
        self,
        kube: ClaimStatusApi,
        metrics: Metrics,
        inventory: Callable[[], NodeInventory],
        pool: str,
        *,
        backoff: Backoff | None = None,  # each claim's steps, copied per claim
        clock: Callable[[], float] = time.monotonic,
        coalesce_s: float = COALESCE_S,
        enabled: bool = True,  # off (--enable-claim-status=false): nothing is written
    ) -> None:
        self._enabled = enabled
        self._kube = kube
        self._inventory = inventory
        self._pool = pool
        self._metrics = metrics
        self._steps = backoff or Backoff(initial_s=1.0, max_s=60.0)
        self._clock = clock
        self._coalesce_s = coalesce_s
        self._pending: dict[str, _Write] = {}  # by claim UID; touched on the loop only
        self._due: dict[str, _Due] = {}  # by claim UID, of each pending write
        # Claims whose entries this process may have sent, or a previous one (restored):
        # only these have anything to clear.
        self._sent: set[str] = set()
        self._wake = asyncio.Event()
        self.served = True  # until an apply's answer shows the field is not served

    def prepared(self, event: ClaimPrepared) -> None:
        prepared = event.prepared
        self._put(_Write(prepared.claim, "apply", (prepared, event.inventory.lnc, _now())))

    def unprepared(self, event: ClaimUnprepared) -> None:
        self._put(_Write(event.claim, "clear"))

    def restored(self, claims: Iterable[ClaimRef]) -> None:
        """Claims prepared before this start: each written if it has no entries (a
        write still pending when the last instance stopped), unless a prepare or
        unprepare of this instance came first."""
        for claim in claims:
            self._put(_Write(claim, "check"), replace=False, sent=True)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _put(self, write: _Write, *, replace: bool = True, sent: bool = False) -> None:
        if not self._enabled:
            return
        uid = write.claim.uid
        if sent:
            self._sent.add(uid)
        if write.kind == "clear" and uid not in self._sent:
            # Nothing of this process's reached the claim: no call to make.
            self._pending.pop(uid, None)
            self._due.pop(uid, None)
            return
        if replace or uid not in self._pending:
            self._pending[uid] = write
            # A new write waits the coalescing time, never a failed one's backoff.
            self._due[uid] = _Due(self._clock() + self._coalesce_s)
        self._wake.set()

    async def run(self) -> None:
        """Until cancelled: each pending write as it comes, a failed one again when its
        own backoff is over."""
        while True:
            self._wake.clear()
            delay = await self.write_due()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def write_due(self) -> float | None:
        """Try each pending write that is due, once; the seconds until the next one is
        due, None when no write is pending."""
        for uid, write in list(self._pending.items()):
            waiting = self._due.get(uid)
            if waiting is not None and waiting.due > self._clock():
                continue
            try:
                await self._write(write)
            except Exception as err:
                self._failed(write.claim, err)
                if self._pending.get(uid) is write:  # not replaced meanwhile
                    found = waiting.backoff if waiting is not None else None
                    backoff = found or self._backoff()
                    self._due[uid] = _Due(self._clock() + backoff.delay(), backoff)
                continue
            if self._pending.get(uid) is write:
                del self._pending[uid]
                self._due.pop(uid, None)
        if not self._due:
            return None
        return max(0.0, min(d.due for d in self._due.values()) - self._clock())

    def _backoff(self) -> Backoff:
        return Backoff(self._steps.initial_s, self._steps.max_s, self._steps.rng)

    def _failed(self, claim: ClaimRef, err: Exception) -> None:
        status = err.status if isinstance(err, ApiError) else -1
        if status < 0:
            reason = "internal"
        elif status == 403:
            reason = "forbidden"
        elif status in {0, 429} or status >= 500:
            reason = "unavailable"
        else:
            reason = "refused"
        self._metrics.inc(ERRORS_METRIC, reason=reason)
        log.warning(
            "device status of the claim not written; retrying: %s",
            err,
            extra=_fields(claim) | {"reason": reason},
        )

    async def _write(self, write: _Write) -> None:
        claim = write.claim
        if write.kind == "clear":
            await self._clear(claim)
            return
        if not self.served:
            return
        if write.prepared is not None:
            entries = devicestatus.entries(*write.prepared)
        else:
            found = await self._restored_entries(claim)
            if found is None:
                return
            entries = found
        self._sent.add(claim.uid)  # from here the server may hold entries to clear
        try:
            answer = await self._apply(claim, _body(claim, entries))
        except ApiError as err:
            # Invalid (another claim of that name, a device no longer allocated), or
            # refused by a policy or the 1.36+ status authorization, all 422: tried again
            # only while the claim still holds the devices.
            if err.status == 422 and not _holds(await self._read_or_none(claim), entries):
                log.info(
                    "device status not written: the claim no longer holds the devices",
                    extra=_fields(claim),
                )
                return
            raise
        if answer is None:
            return
        if not _entries_of_driver(decode(claim, answer)):
            self.served = False
            log.warning(
                "the API server does not serve ResourceClaim status.devices (feature gate "
                "DRAResourceClaimDeviceStatus off): claims' device status is not written",
                extra=_fields(claim),
            )
            return
        log.info(
            "device status of the claim written",
            extra=_fields(claim) | {"devices": ",".join(e["device"] for e in entries)},
        )

    async def _clear(self, claim: ClaimRef) -> None:
        """Remove this driver's entries with no read first: an apply without them
        releases them (the server removes what this manager owned and no longer
        applies), and changes nothing where there are none. A deallocated claim has
        none already: the server dropped them."""
        if claim.uid not in self._sent:
            return
        if not self.served:
            self._sent.discard(claim.uid)
            return
        try:
            answer = await self._apply(claim, _body(claim, None))
        except ApiError as err:
            if err.status == 422 and not _allocation(await self._read_or_none(claim)):
                self._sent.discard(claim.uid)
                return
            raise
        self._sent.discard(claim.uid)
        if answer is not None:
            log.info("device status of the claim cleared", extra=_fields(claim))

    async def _restored_entries(self, claim: ClaimRef) -> list[devicestatus.Entry] | None:
        """The entries of a claim prepared before this start, planned again from the claim;
        None when it has some already, or is gone or deallocated."""
        inventory = self._inventory()
        try:
            obj = await self._read(claim)
            if obj is None or not _allocation(obj) or _entries_of_driver(obj):
                return None
            prepared = plan_claim(claim, obj, inventory, self._pool)
        except ClaimError as err:
            log.info("device status not written: %s", err, extra=_fields(claim))
            return None
        return devicestatus.entries(prepared, inventory.lnc, _now())

    async def _read(self, claim: ClaimRef) -> ResourceClaim | None:
        """The claim as the server has it; None when it is gone or the name is another's.
        ClaimError when it is malformed."""
        try:
            answer = await asyncio.to_thread(
                self._kube.get_resource_claim, claim.namespace, claim.name
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        obj = decode(claim, answer)
        return obj if obj.uid == claim.uid else None

    async def _read_or_none(self, claim: ClaimRef) -> ResourceClaim | None:
        """`_read`, with a malformed claim taken as one this writer cannot judge: None."""
        try:
            return await self._read(claim)
        except ClaimError:
            return None

    async def _apply(self, claim: ClaimRef, body: Json) -> Json | None:
        """The apply's answer; None when the claim is gone: nothing is left to write."""
        try:
            return await self._kube.apply_claim_status(
                claim.namespace, claim.name, body, DRIVER_NAME
            )
        except ApiError as err:
            if err.status != 404:
                raise
            log.info("device status not written: the claim is gone: %s", err, extra=_fields(claim))
            return None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(claim: ClaimRef, entries: list[devicestatus.Entry] | None) -> Json:
    """An apply configuration. With the UID a claim of the same name made since is
    refused (422, the UID is immutable), and `_read` then finds the claim gone."""
    body: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid},
    }
    if entries is not None:
        body["status"] = {"devices": entries}
    return body


def _allocation(obj: ResourceClaim | None) -> Allocation | None:
    return obj.allocation if obj is not None else None


def _holds(obj: ResourceClaim | None, entries: list[devicestatus.Entry]) -> bool:
    """Whether the claim `obj` is still allocated every device of `entries`."""
    allocation = _allocation(obj)
    results = allocation.results if allocation is not None else ()
    allocated = {(r.driver, r.pool, r.device) for r in results}
    return all((e["driver"], e["pool"], e["device"]) in allocated for e in entries)


def _entries_of_driver(obj: ResourceClaim) -> bool:
    """Whether the claim's status.devices has an entry of this driver."""
    return any(d.driver == DRIVER_NAME for d in obj.devices)


def _fields(claim: ClaimRef) -> dict[str, str]:
    return {"claim": claim.uid, "claim_namespace": claim.namespace, "claim_name": claim.name}
