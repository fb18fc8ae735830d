"""Keep the API server's ResourceSlices for this node equal to the desired ones.

A watch on the node's slices wakes the reconciler whenever anything changes
them (the kubelet deletes a node's slices when it starts), so a deleted slice
is back within one round trip. API outages are retried with capped
exponential backoff; nothing here ever gives up or crashes the process.
Every write bumps the pool generation, which tells the scheduler which slices
of the pool are current.

The comparison is the upstream ResourceSlice controller's: what the API server
adds is copied from the stored slices first (a taint's `timeAdded`), and a field
the server drops from a write (a feature it does not serve) is named once in a
warning and left out of later comparisons, so no wake rewrites an unchanged
pool. Slices are paired by content, then by name, never by list position;
slices of this node and driver outside the node's pool (an older driver's, a
hand-made one) are deleted, as no update can move a slice between pools.

What the slices may contain depends on what the API server serves, which a
control-plane upgrade or downgrade changes under a running driver (a 1.34 pool
layout is invalid on 1.35 and the reverse). The publisher does not know those
features; it calls the `reprobe` it is given when the server may have changed:
when a write is refused as invalid, and when the server's version differs after
a watch ended or an API error. Then it rebuilds and rewrites the pool.

The slices are owned by the Node, named by its UID. A Node deleted and created
again under the same name has a new UID, and the garbage collector deletes
slices owned by the old one; so the UID is read again at the same moments as
the server's version, and when one of the slices is deleted: at most one GET
per watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.backoff import WATCH_PROVEN_S, Backoff
from neuron_dra.agent.apiclient.kube import ApiError, Json, Kube
from neuron_dra.agent.objects.node import decode as decode_node
from neuron_dra.agent.objects.slice import ResourceSlice
from neuron_dra.agent.objects.slice import decode as decode_slice
from neuron_dra.agent.objects.watch import decode as decode_event
from neuron_dra.agent.slices.slicediff import (
    Field,
    adopt,
    dropped_fields,
    pair,
    replacement,
    same,
    spelled,
    split_pool,
    with_generation,
)
from neuron_dra.agent.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

BuildSlices = Callable[[int, str | None], list[Json]]  # (generation, node uid) -> slices
# Re-learn what the API server serves; True when that changes the desired slices.
# Raises ApiError when the server gives no answer.
Reprobe = Callable[[], Awaitable[bool]]

BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 10.0  # recovery after an outage within ~10 s; ~0.1 req/s per node meanwhile
# When the slices were just listed (and written) but the watch fails, they are right
# for now: wait longer between tries, which is what an overloaded server needs.
WATCH_BACKOFF_MAX_S = 60.0
PUBLISHES = "neuron_dra_slice_publishes_total"
# List and reconcile at least this often, as informers resync, whatever the watch does:
# the watch's own timeouts end it sooner, this bounds a watch that never ends.
RESYNC_S = 600.0


class SlicePublisher:
    """Keeps the API server's ResourceSlices of this node's pool equal to the desired ones.

    On the event loop: `run` is the one task that writes (across instances, under the
    publisher's file lock, `leader`), and `refresh` is called on the loop to ask for a
    reconcile soon. Idempotent: a reconcile that finds the slices as desired writes
    nothing, and any number of `refresh` calls before it cost one. Nothing needs to
    survive a crash: the next process lists the slices and writes only what differs.
    """

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        build: BuildSlices,
        reprobe: Reprobe | None = None,
        metrics: Metrics | None = None,
        *,
        resync_s: float = RESYNC_S,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self._kube = kube
        self._backoff = backoff or Backoff(BACKOFF_INITIAL_S, BACKOFF_MAX_S)
        self._watch_backoff = Backoff(BACKOFF_INITIAL_S, WATCH_BACKOFF_MAX_S, self._backoff.rng)
        self._sleep_for = sleep
        self._watch_proven = False
        self._node = node_name
        self._resync_s = resync_s  # list and reconcile at least this often, as informers do
        self._build = build
        self._reprobe = reprobe
        self._metrics = metrics or Metrics()
        # Fields this API server drops from the slices it is sent: compared without them.
        self._dropped: frozenset[Field] = frozenset()
        self._server_version: str | None = None
        self._follow_version = reprobe is not None
        self._version_due = self._follow_version  # learn it before the first write
        self._reprobe_due = False
        self._node_uid_due = True  # read the Node's UID before the next write
        self._refused = False  # the last write was refused as invalid
        # The server refused to update a slice in place although the layout is right:
        # replace such a slice by deleting and re-creating it.
        self._recreate = False
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set once the API server holds the desired slices
        # Remembered, so slices re-created after a deletion still move the pool forward:
        # a scheduler that has not yet seen the deletion must not take both as current.
        self._generation = 0
        self.last_publish: float | None = None

    def refresh(self, *, reprobe: bool = False) -> None:
        """The desired slices changed (what `build` reads: the inventory, health, what
        claims hold, the Node's topology): reconcile soon, re-probing first if asked."""
        self._reprobe_due = self._reprobe_due or (reprobe and self._reprobe is not None)
        self._wake.set()

    async def run(self) -> None:
        node_uid: str | None = None
        while True:
            self._watch_proven = listed = False
            retry_after: float | None = None
            try:
                await self._follow_server()
                if self._node_uid_due:
                    node_uid = await self._read_node_uid(node_uid)
                version = await self.reconcile(node_uid)
                # The server answered: an outage is over, and the next starts afresh
                # (an upgrade's restarts come minutes apart). Watches keep their own.
                listed = True
                self._backoff.reset()
                woken = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                # An outage may hide a control-plane upgrade; a refused write may be one.
                # A watch's 410 Gone (its version expired) is neither.
                if err.status != 410:
                    self._recheck_server()
                if err.status == 422 and self._reprobe is not None:
                    self._refused = self._reprobe_due = True
                retry_after = err.retry_after_s
                failure = f"ResourceSlices not in sync: {err}"
            except Exception:
                # Never give up on the node's slices: log it loudly and try again.
                log.exception("ResourceSlice reconcile failed", extra={"node": self._node})
                failure = ""
            else:
                if self._watch_proven or woken:
                    # New desired slices, or the server ended a watch that served: at once.
                    if self._watch_proven:
                        self._reset_backoff()
                    continue
                failure = "the slice watch ended before it served"
            # A successful LIST does not reset the watch's backoff: a server that answers
            # LISTs but refuses or ends every watch (overloaded: 429, or 410 Gone) would
            # otherwise be listed again every BACKOFF_INITIAL_S.
            if self._watch_proven:
                self._reset_backoff()
            backoff = self._watch_backoff if listed else self._backoff
            delay = backoff.delay(retry_after or 0.0)
            if failure:
                log.warning("%s; retrying in %.1fs", failure, delay, extra={"node": self._node})
            await self._sleep(delay)

    def _reset_backoff(self) -> None:
        self._backoff.reset()
        self._watch_backoff.reset()

    async def reconcile(self, node_uid: str | None) -> str:
        """One pass: make the server's slices equal the desired ones; return a resourceVersion."""
        self._wake.clear()
        current = await self._kube.list_resource_slices(self._node, DRIVER_NAME)
        existing, foreign = split_pool(map(decode_slice, current.items), self._node)
        desired = adopt(self._build(0, node_uid), existing, self._dropped)
        changed = not same(existing, desired)
        for old in foreign:
            log.warning(
                "deleting ResourceSlice %s of pool %r: this node's pool is %r",
                old.name,
                old.pool,
                self._node,
                extra={"node": self._node},
            )
            await self._delete(old.name)
        if changed:
            await self._write(existing, desired)
        else:
            log.debug("ResourceSlices up to date", extra={"node": self._node})
        self._recreate = False
        self.published.set()
        if not foreign and not changed:
            return current.resource_version  # nothing written: the list is current
        return (await self._kube.list_resource_slices(self._node, DRIVER_NAME)).resource_version

    async def _write(self, existing: list[ResourceSlice], adopted: list[Json]) -> None:
        """Write `adopted` (built for generation 0) as the pool's next generation."""
        seen = max((s.generation for s in existing), default=0)
        generation = self._generation = max(seen, self._generation) + 1
        desired = with_generation(adopted, generation)
        plan = pair(existing, desired)
        for old, new in plan.updates:
            await self._replace(old, new)
        for new in plan.creates:
            await self._create(new)
        for old in plan.deletes:
            await self._delete(old.name)
        self.last_publish = time.time()
        log.info(
            "ResourceSlices published",
            extra={"node": self._node, "generation": generation, "slices": len(desired)},
        )

    async def _replace(self, old: ResourceSlice, new: Json) -> None:
        name = old.name
        body = replacement(old, new)
        try:
            stored = await self._kube.replace_resource_slice(name, body)
        except ApiError as err:
            if err.status != 422 or not self._recreate:
                raise
            log.warning(
                "the API server refuses to update ResourceSlice %s in place, re-creating it: %s",
                name,
                err,
                extra={"node": self._node},
            )
            await self._delete(name)
            await self._create(new)
            return
        self._metrics.inc(PUBLISHES)
        self._learn(body, decode_slice(stored))

    async def _create(self, body: Json) -> None:
        stored = await self._kube.create_resource_slice(body)
        self._metrics.inc(PUBLISHES)
        self._learn(body, decode_slice(stored))

    async def _delete(self, name: str) -> None:
        await self._kube.delete_resource_slice(name)
        self._metrics.inc(PUBLISHES)

    def _learn(self, sent: Json, stored: ResourceSlice) -> None:
        """Note the fields the server dropped from a write, each named in one warning."""
        news = dropped_fields(sent, stored) - self._dropped
        for found in sorted(news):
            log.warning(
                "the API server dropped %s from ResourceSlice %s, probably a feature it does "
                "not serve: the pool is compared without it",
                spelled(found),
                stored.name,
                extra={"node": self._node},
            )
        self._dropped |= news

    def _recheck_server(self) -> None:
        """The server may have changed (upgraded, restored, its Node created again) since
        it was last asked: read its version and the Node's UID before the next write."""
        self._version_due = self._follow_version
        self._node_uid_due = True

    async def _read_node_uid(self, known: str | None) -> str:
        """The Node's UID; raises ApiError while the Node is missing."""
        uid = decode_node(await self._kube.get_node(self._node)).uid
        self._node_uid_due = False
        if known is not None and uid != known:
            log.info(
                "Node %s was created again (UID %s, was %s): ResourceSlices follow it",
                self._node,
                uid,
                known,
                extra={"node": self._node},
            )
        return uid

    async def _follow_server(self) -> None:
        """Re-probe the server's features when it may have changed under the driver."""
        if self._reprobe is None:
            return
        if self._version_due:
            try:
                version = await self._kube.server_version()
            except ApiError as err:
                if err.no_answer:
                    raise  # the server is away: back off, then ask again
                log.warning("API server version refused; upgrades are noticed by refusals: %s", err)
                self._follow_version = False
                version = self._server_version or ""
            self._version_due = False
            if self._server_version is not None and version != self._server_version:
                log.info(
                    "API server version changed from %s to %s: probing its features again",
                    self._server_version,
                    version,
                    extra={"node": self._node},
                )
                self._reprobe_due = True
            self._server_version = version
        if self._reprobe_due:
            changed = await self._reprobe()
            self._reprobe_due = False
            # Another server may keep what this one dropped: find out on the next write.
            self._dropped = frozenset()
            # Refused, yet the layout stands (its slices just passed dry-run creates): the
            # refusal is about the stored objects, which the next pass re-creates.
            self._recreate = self._refused and not changed
            self._refused = False

    async def _watch(self, version: str) -> bool:
        """Return when the slices may differ from the desired ones: True when new
        desired slices woke it. Marks the watch proven once it delivered an event or
        stayed open WATCH_PROVEN_S."""
        events = self._kube.watch_resource_slices(self._node, DRIVER_NAME, version)
        next_event = asyncio.ensure_future(anext(events, None))
        woken = asyncio.ensure_future(self._wake.wait())
        loop = asyncio.get_running_loop()
        opened = loop.time()
        resync_at = opened + self._resync_s
        try:
            while True:
                done, _ = await asyncio.wait(
                    {next_event, woken},
                    timeout=max(0.0, resync_at - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if woken in done:
                    return True
                if not done:
                    log.debug("periodic resync", extra={"node": self._node})
                    self._recheck_server()
                    return False
                event = next_event.result()
                if event is None:
                    # The server closed the watch (every few minutes, or on its way down).
                    self._recheck_server()
                    return False
                self._watch_proven = True
                kind = decode_event(event).type
                if kind == "DELETED":
                    # Perhaps the garbage collector's, after the Node was created again.
                    self._node_uid_due = True
                if kind != "BOOKMARK":
                    return False
                next_event = asyncio.ensure_future(anext(events, None))
        finally:
            self._watch_proven = self._watch_proven or loop.time() - opened >= WATCH_PROVEN_S
            for task in (next_event, woken):
                task.cancel()
            # The generator may still be inside the cancelled anext(): closing it before
            # that task has finished raises "asynchronous generator is already running".
            await asyncio.gather(next_event, woken, return_exceptions=True)
            await events.aclose()

    async def _sleep(self, delay: float) -> None:
        """Wait out a backoff, but wake early for new desired slices."""
        if self._sleep_for is not None:
            await self._sleep_for(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)
