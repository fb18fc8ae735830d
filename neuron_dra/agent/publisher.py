"""Keep the API server's ResourceSlices for this node equal to the desired ones.

A watch on the node's slices wakes the reconciler whenever anything changes
them (the kubelet deletes a node's slices when it starts), so a deleted slice
is back within one round trip. API outages are retried with capped
exponential backoff; nothing here ever gives up or crashes the process.
Every write bumps the pool generation, which tells the scheduler which slices
of the pool are current.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from consts import DRIVER_NAME
from neuron_dra.agent.kube import ApiError, Json, Kube

log = logging.getLogger(__name__)

BuildSlices = Callable[[int, str | None], list[Json]]  # (generation, node uid) -> slices

BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 10.0  # recovery after an outage within ~10 s; ~0.1 req/s per node meanwhile


class SlicePublisher:
    def __init__(self, kube: Kube, node_name: str, build: BuildSlices) -> None:
        self._kube = kube
        self._node = node_name
        self._build = build
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set once the API server holds the desired slices
        self.writes = 0
        # Remembered, so slices re-created after a deletion still move the pool forward:
        # a scheduler that has not yet seen the deletion must not take both as current.
        self._generation = 0
        self.last_publish: float | None = None

    def refresh(self, build: BuildSlices) -> None:
        """New desired slices (the inventory changed): reconcile soon."""
        self._build = build
        self._wake.set()

    async def run(self) -> None:
        delay = BACKOFF_INITIAL_S
        node_uid: str | None = None
        while True:
            try:
                if node_uid is None:
                    node_uid = (await self._kube.get_node(self._node))["metadata"]["uid"]
                version = await self.reconcile(node_uid)
                delay = BACKOFF_INITIAL_S
                await self._watch(version, node_uid)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                log.warning(
                    "ResourceSlices not in sync, retrying in %.1fs: %s", delay, err,
                    extra={"node": self._node},
                )  # fmt: skip
            except Exception:
                # Never give up on the node's slices: log it loudly and try again.
                log.exception("ResourceSlice reconcile failed, retrying in %.1fs", delay)
            else:
                continue
            await self._sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S) * random.uniform(0.8, 1.0)

    async def reconcile(self, node_uid: str | None) -> str:
        """One pass: make the server's slices equal the desired ones; return a resourceVersion."""
        self._wake.clear()
        current = await self._kube.list_resource_slices(self._node, DRIVER_NAME)
        existing = sorted(current.items, key=lambda s: str(s["metadata"]["name"]))
        desired = self._build(0, node_uid)
        if _same(existing, desired):
            self.published.set()
            return current.resource_version
        seen = max((s["spec"]["pool"]["generation"] for s in existing), default=0)
        generation = self._generation = max(seen, self._generation) + 1
        desired = self._build(generation, node_uid)
        for old, new in zip(existing, desired, strict=False):
            body = copy.deepcopy(new)
            body["metadata"] = {
                **{k: v for k, v in new["metadata"].items() if k != "generateName"},
                "name": old["metadata"]["name"],
                "resourceVersion": old["metadata"]["resourceVersion"],
            }
            await self._kube.replace_resource_slice(old["metadata"]["name"], body)
        for new in desired[len(existing) :]:
            await self._kube.create_resource_slice(new)
        for old in existing[len(desired) :]:
            await self._kube.delete_resource_slice(old["metadata"]["name"])
        self.writes += 1
        self.last_publish = time.time()
        log.info(
            "ResourceSlices published",
            extra={"node": self._node, "generation": generation, "slices": len(desired)},
        )
        self.published.set()
        return (await self._kube.list_resource_slices(self._node, DRIVER_NAME)).resource_version

    async def _watch(self, version: str, node_uid: str | None) -> None:
        """Return when the slices may differ from the desired ones."""
        events = self._kube.watch_resource_slices(self._node, DRIVER_NAME, version)
        next_event = asyncio.ensure_future(anext(events, None))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            while True:
                done, _ = await asyncio.wait(
                    {next_event, woken}, return_when=asyncio.FIRST_COMPLETED
                )
                if woken in done:
                    return
                event = next_event.result()
                if event is None:
                    return  # the server closed the watch; list again
                if event.get("type") != "BOOKMARK":
                    return
                next_event = asyncio.ensure_future(anext(events, None))
        finally:
            for task in (next_event, woken):
                task.cancel()
            # The generator may still be inside the cancelled anext(): closing it before
            # that task has finished raises "asynchronous generator is already running".
            await asyncio.gather(next_event, woken, return_exceptions=True)
            await events.aclose()

    async def _sleep(self, delay: float) -> None:
        """Wait out a backoff, but wake early for new desired slices."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)


def _same(existing: list[Json], desired: list[Json]) -> bool:
    if len(existing) != len(desired):
        return False
    return all(
        _comparable(old["spec"]) == _comparable(new["spec"])
        and old["metadata"].get("ownerReferences") == new["metadata"].get("ownerReferences")
        for old, new in zip(existing, desired, strict=True)
    )


def _comparable(spec: Json) -> Any:
    spec = copy.deepcopy(spec)
    spec["pool"].pop("generation", None)
    return spec
