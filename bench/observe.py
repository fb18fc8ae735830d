"""What the benchmarks watch on a running control plane: pods as they are bound (a
watch), and the counters of the kube-scheduler's and the kube-apiserver's /metrics."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from neuron_dra_harness.cluster import Cluster

Labels = dict[str, str]


def metric_sum(text: str, name: str, where: Callable[[Labels], bool] = lambda _: True) -> float:
    """The sum of the samples of metric `name` (a counter's `_total`, a histogram's
    `_sum`) whose labels satisfy `where`, in a Prometheus text exposition."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and where(sample.labels)
    )


def metric_by(text: str, name: str, label: str) -> dict[str, float]:
    """The samples of metric `name` summed by the value of `label`."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = sample.labels.get(label, "")
                out[key] = out.get(key, 0.0) + sample.value
    return out


SLICE_WRITES = ("POST", "PUT", "PATCH", "DELETE")


def slice_writes(apiserver_metrics: str) -> float:
    """ResourceSlice writes the API server has answered (apiserver_request_total)."""
    return metric_sum(
        apiserver_metrics,
        "apiserver_request_total",
        lambda labels: (
            labels.get("resource") == "resourceslices" and labels.get("verb") in SLICE_WRITES
        ),
    )


class PodWatch:
    """A watch on the namespace's pods, on a connection of its own, in a thread:
    when each pod was first seen bound, on the monotonic clock, and which pods the
    scheduler first found unschedulable."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        url = urlsplit(cluster.server)
        assert url.hostname is not None
        listing = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")
        version = listing["metadata"]["resourceVersion"]
        self._connection = http.client.HTTPSConnection(
            url.hostname, url.port, context=ssl.create_default_context(cafile=str(cluster.ca_file))
        )
        self._connection.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion={version}"
            "&timeoutSeconds=3600",
            headers={"Authorization": f"Bearer {cluster.token}", "Accept": "application/json"},
        )
        self._response = self._connection.getresponse()
        assert self._response.status == 200, self._response.status
        self.bound: dict[str, float] = {}
        self.unschedulable: set[str] = set()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while line := self._response.readline():
                now = time.monotonic()
                pod = json.loads(line)["object"]
                name = pod.get("metadata", {}).get("name", "")
                conditions = pod.get("status", {}).get("conditions") or []
                with self._changed:
                    if pod.get("spec", {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = now
                        self._changed.notify_all()
                    if any(
                        c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions
                    ):
                        self.unschedulable.add(name)
        except (OSError, ValueError, http.client.HTTPException):
            if not self._closed:
                raise
        finally:
            with self._changed:
                self._closed = True
                self._changed.notify_all()

    def wait_bound(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self._changed:
            while name not in self.bound:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise TimeoutError(f"pod {name} not bound after {timeout:.0f} s")
                self._changed.wait(left)
            return self.bound[name]

    def close(self) -> None:
        self._closed = True
        sock = self._connection.sock
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # ends the thread's read; it closes the response
        self._thread.join(timeout=5)
        self._connection.close()


class Metrics:
    """A component's /metrics on a keep-alive connection: the kube-scheduler's (its
    serving certificate self-signed in memory) or the kube-apiserver's."""

    def __init__(self, cluster: Cluster, component: str = "kube-scheduler") -> None:
        if component == "kube-apiserver":
            url = urlsplit(cluster.server)
            host, port = url.hostname or "127.0.0.1", url.port
            context = ssl.create_default_context(cafile=str(cluster.ca_file))
        else:
            [proc] = [c for c in cluster.components if c.name == component]
            [port_text] = [a.split("=", 1)[1] for a in proc.argv if a.startswith("--secure-port=")]
            host, port = "127.0.0.1", int(port_text)
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._connection = http.client.HTTPSConnection(host, port, context=context, timeout=30)
        self._headers = {"Authorization": f"Bearer {cluster.token}"}

    def text(self) -> str:
        try:
            self._connection.request("GET", "/metrics", headers=self._headers)
            answer = self._connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionError):
            # The server closed the idle keep-alive connection (a long setup between
            # two reads): once more, on a new one.
            self._connection.close()
            self._connection.request("GET", "/metrics", headers=self._headers)
            answer = self._connection.getresponse()
        text = answer.read().decode()
        assert answer.status == 200, (answer.status, text[:200])
        return text

    def close(self) -> None:
        self._connection.close()


class SchedulerMetrics(Metrics):
    """The kube-scheduler's scheduling_algorithm_duration_seconds sum: with one pod
    scheduled at a time, its growth over a pod is that pod's Filter and Score wall
    time inside the scheduler, without the API writes and the queue. And the pods
    put back in its queue, by the event that moved them."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster, "kube-scheduler")

    def algorithm_s(self) -> float:
        return metric_sum(self.text(), "scheduler_scheduling_algorithm_duration_seconds_sum")

    def incoming(self) -> dict[str, float]:
        """scheduler_queue_incoming_pods_total by event: pods added to its queues."""
        return metric_by(self.text(), "scheduler_queue_incoming_pods_total", "event")
