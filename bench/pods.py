"""Pods of bench/scale.py: the cases a user writes, timed one at a time from creation
to binding, or created at a steady rate; and what their times sum up to."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fleet import NAMESPACE, RESOURCE, Api, Layout, claim_path
from observe import PodWatch, SchedulerMetrics
from stats import summary, throughput

from consts import DRIVER_NAME
from neuron_dra.resources.slices import CoreLayout
from neuron_dra_harness.cluster import Cluster
from neuron_dra_harness.workloads import claim_spec

Obj = dict[str, Any]


@dataclass(frozen=True)
class Case:
    name: str
    devices: int  # allocation results the claim gets
    cores: int = 0  # logical cores asked for (0: whole devices)
    group: int | None = None
    extended: bool = False  # a device-plugin-style pod: no claim of its own


CASES = (
    Case("no claim", 0),
    Case("1 device", 1),
    Case("1 core", 1, cores=1),
    Case("4 cores of one device", 4, cores=4),
    Case("4 connected", 4, group=4),
    Case("16 devices", 16),
    Case("aws.amazon.com/neuron: 16", 16, extended=True),
)
STEADY = "1 device"


def claim_for(case: Case, layout: Layout, lnc: int) -> Obj:
    """The claim a user writes for `case` where `layout` is published."""
    if not case.cores:
        return claim_spec(case.devices, group=case.group)
    if layout.cores is CoreLayout.CAPACITY:
        # One share of a device: the physical cores of `cases.cores` logical ones.
        exactly = {
            "deviceClassName": f"neuroncore.{DRIVER_NAME}",
            "count": 1,
            "capacity": {"requests": {"cores": str(case.cores * lnc)}},
        }
        return {"devices": {"requests": [{"name": "neurons", "exactly": exactly}]}}
    spec: Obj = {
        "devices": {
            "requests": [
                {
                    "name": "neurons",
                    "exactly": {
                        "deviceClassName": f"neuroncore.{DRIVER_NAME}",
                        "count": case.cores,
                    },
                }
            ]
        }
    }
    if case.cores > 1:
        spec["devices"]["constraints"] = [
            {"requests": ["neurons"], "matchAttribute": f"{DRIVER_NAME}/deviceId"}
        ]
    return spec


@dataclass
class Scheduling:
    """Pods of each case, one at a time or at a steady rate, timed to their binding."""

    cluster: Cluster
    api: Api
    watch: PodWatch
    metrics: SchedulerMetrics
    layout: Layout
    lnc: int
    count: int = 0
    retries: int = 0

    def submit(self, case: Case) -> str:
        self.count += 1
        name = f"p{self.count}"
        container: Obj = {"name": "c", "image": "none"}
        spec: Obj = {
            "automountServiceAccountToken": False,
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        }
        if case.extended:
            limits = {"aws.amazon.com/neuron": str(case.devices)}
            container["resources"] = {"limits": limits, "requests": limits}
        elif case.devices:
            claim = {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": claim_for(case, self.layout, self.lnc),
            }
            self.api.call("POST", claim_path(), claim)
            container["resources"] = {"claims": [{"name": "neurons"}]}
            spec["resourceClaims"] = [{"name": "neurons", "resourceClaimName": name}]
        self.api.call(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec},
        )
        return name

    def _check(self, name: str, case: Case) -> None:
        if case.extended or not case.devices:
            return
        claim = self.api.call("GET", claim_path(name))
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == (
            1 if self.layout.cores is CoreLayout.CAPACITY and case.cores else case.devices
        ), results
        prefix = (
            "neuroncore"
            if case.cores and self.layout.cores is CoreLayout.PARTITIONS
            else "neurondevice"
        )
        assert all(r["device"].startswith(prefix) for r in results), results

    def release(self, name: str, case: Case) -> None:
        self.api.call(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", {"gracePeriodSeconds": 0}
        )
        if case.devices and not case.extended:
            self.api.call("DELETE", claim_path(name))

    def gone(self, name: str, case: Case) -> None:
        """The claim the pod used is deallocated and deleted (or, for a device-plugin
        pod, the pod is gone), so the next pod sees the same cluster."""
        path = (
            claim_path(name)
            if case.devices and not case.extended
            else f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"
        )
        deadline = time.monotonic() + 60
        while self.api.call("GET", path, ok=(404,)).get("kind") not in ("Status", None):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still there")
            time.sleep(0.01)

    def once(self, case: Case) -> tuple[float, float]:
        """One pod of `case`: ms from creation to binding, and ms of the scheduler's
        Filter and Score for it."""
        algorithm = self.metrics.algorithm_s()
        started = time.monotonic()
        name = self.submit(case)
        bound = self.watch.wait_bound(name, timeout=300)
        algorithm = (self.metrics.algorithm_s() - algorithm) * 1000
        self.retries += name in self.watch.unschedulable
        self._check(name, case)
        self.release(name, case)
        self.gone(name, case)
        return (bound - started) * 1000, algorithm

    def cases(self, cases: list[Case], pods: int) -> Obj:
        for case in cases:
            self.once(case)  # warm-up
        times: dict[str, list[tuple[float, float]]] = {c.name: [] for c in cases}
        for _ in range(pods):
            for case in cases:
                times[case.name].append(self.once(case))
        return {
            name: summary([t for t, _ in samples], [a for _, a in samples])
            for name, samples in times.items()
        }

    def steady(self, case: Case, pods: int, rate: float) -> Obj:
        """`pods` pods of `case` created `rate` a second, each released once bound."""
        names: list[str] = []
        created: dict[str, float] = {}
        releaser = ThreadPoolExecutor(2)
        done: list[float] = []

        def release(name: str) -> None:
            done.append((self.watch.wait_bound(name, timeout=600) - created[name]) * 1000)
            self.release(name, case)

        started = time.monotonic()
        futures = []
        for i in range(pods):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the steady rate itself, not a synchronisation
            now = time.monotonic()
            name = self.submit(case)
            created[name] = now
            names.append(name)
            futures.append(releaser.submit(release, name))
        for future in futures:
            future.result()
        releaser.shutdown()
        for name in names:
            self.gone(name, case)
        figures = summary(done, [])
        figures["pods_per_s"] = throughput([self.watch.bound[n] for n in names])
        figures["offered_per_s"] = rate
        return figures
