"""A fleet that churns: pods starting and ending at a steady rate, and the slice
rewrites the agent makes for them, simulated as the agent writes them.

Each pod has a claim of one case (bench/pods.py: 1 whole device by default, or 1
NeuronCore, the pods of an inference fleet sharing devices by core); it is created
`rate` a second and lives
`life` seconds once bound (its work), then is deleted with its claim. Its node's
agent learns of the prepare when the pod is bound (the kubelet prepares before the
containers start) and of the unprepare when the pod is deleted, and, as
`neuron_dra.agent.holdings` does, rebuilds the node's slices `HELD_SETTLE_S` after the
first change of a burst, one rewrite for all the changes of the burst, and only where
what the node's prepared claims hold changed (a held core withdraws its device, as a
held device its cores). A rewrite is what the publisher does: list the
node's slices, write each in place in a new generation, list again.

Measured over the phase: ResourceSlice writes a second at the API server
(apiserver_request_total), pods put back in the scheduler's queue by event
(scheduler_queue_incoming_pods_total), the time a node's pool is of two generations
(incomplete) per rewrite, the pods' p50/p99 from creation to binding and pods/s.
Run with `rewrite=False`, the agent never rewrites (every core stays published): the
same churn without the rewrites' cost and without what they save. That is also what
the agent now writes for holds shorter than its `--withdraw-after` (60 s by default),
such as these pods' few seconds; `rewrite=True` is the agent withdrawing at once
(`--withdraw-after=0`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fleet import Fleet, claim_path, slice_path
from observe import Metrics, SchedulerMetrics, slice_writes
from pods import Case, Scheduling
from stats import summary, throughput

from neuron_dra.agent.holdings import HELD_SETTLE_S

Obj = dict[str, Any]
CHURN = Case("1 device", 1)


@dataclass
class Agents:
    """The agents of the churned nodes: what each node's prepared claims hold, and the
    rewrite due `HELD_SETTLE_S` after the first change of a burst."""

    fleet: Fleet
    rewrite: bool
    # node -> claim -> the devices (whole devices or cores) it holds
    holds: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    rewrites: int = 0
    _due: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timers: list[threading.Timer] = field(default_factory=list)
    _publishing: dict[str, threading.Lock] = field(default_factory=dict)

    def changed(self, node: str, claim: str, devices: frozenset[str]) -> None:
        """`claim` prepared on `node` holding `devices` (empty: unprepared)."""
        with self._lock:
            claims = self.holds.setdefault(node, {})
            if devices:
                claims[claim] = devices
            else:
                claims.pop(claim, None)
            if not self.rewrite or node in self._due:
                return
            self._due.add(node)
            self._publishing.setdefault(node, threading.Lock())
            timer = threading.Timer(HELD_SETTLE_S, self._settled, (node,))
            self._timers.append(timer)
        timer.start()

    def _settled(self, node: str) -> None:
        # One publisher a node: the rewrites of a node never overlap.
        with self._publishing[node]:
            with self._lock:
                self._due.discard(node)
                held = frozenset().union(*self.holds.get(node, {}).values())
            if held == self.fleet.held.get(node, frozenset()):
                return
            api = self.fleet.api
            path = slice_path() + f"?fieldSelector=spec.nodeName%3D{node}"
            api.call("GET", path)
            self.fleet.publish(node, held)
            api.call("GET", path)
        with self._lock:
            self.rewrites += 1

    def settle(self) -> None:
        """Wait for every rewrite due."""
        while True:
            with self._lock:
                timers = list(self._timers)
                self._timers.clear()
            if not timers:
                return
            for timer in timers:
                timer.join()


def churn(
    scheduling: Scheduling,
    fleet: Fleet,
    apiserver: Metrics,
    scheduler: SchedulerMetrics,
    *,
    rate: float,
    seconds: float,
    life: float,
    rewrite: bool,
    case: Case = CHURN,
) -> Obj:
    """`rate` pods of `case` a second for `seconds`, each living `life` seconds once
    bound."""
    agents = Agents(fleet, rewrite)
    pods = max(2, round(rate * seconds))
    writes, incoming = slice_writes(apiserver.text()), scheduler.incoming()
    rewrites_before = len(fleet.incomplete_s)
    created: dict[str, float] = {}
    latency: list[float] = []
    bound: list[float] = []

    def live(name: str) -> None:
        at = scheduling.watch.wait_bound(name, timeout=600)
        latency.append((at - created[name]) * 1000)
        bound.append(at)
        claim = fleet.api.call("GET", claim_path(name))
        results = claim["status"]["allocation"]["devices"]["results"]
        [node] = {r["pool"] for r in results}
        agents.changed(node, name, frozenset(r["device"] for r in results))
        time.sleep(life)  # the pod's work: the churn itself, not a synchronisation
        scheduling.release(name, case)
        agents.changed(node, name, frozenset())

    started = time.monotonic()
    with ThreadPoolExecutor(max(4, round(rate * (life + 2)))) as pool:
        futures = []
        for i in range(pods):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the offered rate itself, not a synchronisation
            created[name := scheduling.submit(case)] = time.monotonic()
            futures.append(pool.submit(live, name))
        for future in futures:
            future.result()
    agents.settle()
    elapsed = time.monotonic() - started
    after = scheduler.incoming()
    figures = summary(latency, [])
    incomplete = fleet.incomplete_s[rewrites_before:]
    figures |= {
        "case": case.name,
        "offered_per_s": rate,
        "pods": pods,
        "life_s": life,
        "rewrite": rewrite,
        "pods_per_s": throughput(bound),
        "seconds": elapsed,
        "rewrites": agents.rewrites,
        "slice_writes_per_s": (slice_writes(apiserver.text()) - writes) / elapsed,
        "requeued": {
            k: v - incoming.get(k, 0.0) for k, v in after.items() if v - incoming.get(k, 0.0)
        },
        "incomplete_ms": sorted(round(s * 1000, 1) for s in incomplete),
    }
    for name in created:
        scheduling.gone(name, case)
    return figures
