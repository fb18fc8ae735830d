"""Prometheus metrics: counters and histograms the agent updates, gauges read at scrape.

The text exposition format is small enough to write directly, which keeps a
client library out of the node agent's memory and start-up.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
Labels = tuple[tuple[str, str], ...]


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS_S))
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(LATENCY_BUCKETS_S, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1


@dataclass(frozen=True)
class Sample:
    """One gauge value computed at scrape time."""

    name: str
    labels: Labels
    value: float


# name -> (type, help): every metric the driver exposes, documented in one place.
METRICS: dict[str, tuple[str, str]] = {
    "neuron_dra_devices": ("gauge", "Neuron devices by health and allocation state."),
    "neuron_dra_prepared_claims": ("gauge", "Claims currently prepared on this node."),
    "neuron_dra_prepare_duration_seconds": ("histogram", "NodePrepareResources time per claim."),
    "neuron_dra_unprepare_duration_seconds": (
        "histogram",
        "NodeUnprepareResources time per claim.",
    ),
    "neuron_dra_prepare_phase_seconds": (
        "histogram",
        "Prepare time per claim by phase: api (claim read), cdi (config and spec), checkpoint.",
    ),
    "neuron_dra_prepare_errors_total": ("counter", "Claims not prepared, by reason."),
    "neuron_dra_unprepare_errors_total": ("counter", "Claims not unprepared, by reason."),
    "neuron_dra_slice_publishes_total": (
        "counter",
        "ResourceSlice creates, updates and deletes sent to the API server.",
    ),
    "neuron_dra_slice_last_publish_timestamp_seconds": ("gauge", "Time of the last slice write."),
    "neuron_dra_health_events_total": ("counter", "Devices marked unhealthy, by error kind."),
    "neuron_dra_device_utilization_ratio": ("gauge", "Device utilization from sysfs, 0 to 1."),
}


class Metrics:
    def __init__(self) -> None:
        self._counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self._histograms: dict[str, dict[Labels, _Histogram]] = defaultdict(
            lambda: defaultdict(_Histogram)
        )
        self.gauges: Callable[[], Iterable[Sample]] = lambda: ()

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self._counters[name][tuple(sorted(labels.items()))] += amount

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        self._histograms[name][tuple(sorted(labels.items()))].observe(seconds)

    def render(self) -> str:
        samples: dict[str, list[str]] = defaultdict(list)
        for name, series in self._counters.items():
            for labels, value in series.items():
                samples[name].append(f"{name}{_labels(labels)} {_number(value)}")
        for name, by_labels in self._histograms.items():
            for labels, histogram in by_labels.items():
                cumulative = 0
                for bound, count in zip(LATENCY_BUCKETS_S, histogram.counts, strict=True):
                    cumulative += count
                    le = (*labels, ("le", str(bound)))
                    samples[name].append(f"{name}_bucket{_labels(le)} {cumulative}")
                everything = (*labels, ("le", "+Inf"))
                samples[name].append(f"{name}_bucket{_labels(everything)} {histogram.count}")
                samples[name].append(f"{name}_sum{_labels(labels)} {_number(histogram.total)}")
                samples[name].append(f"{name}_count{_labels(labels)} {histogram.count}")
        for sample in self.gauges():
            samples[sample.name].append(
                f"{sample.name}{_labels(sample.labels)} {_number(sample.value)}"
            )
        lines = []
        for name, (kind, help_text) in METRICS.items():
            if name in samples:
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
        return "\n".join(lines) + "\n"

    async def serve(self, port: int, host: str = "0.0.0.0") -> asyncio.Server:
        """GET /metrics over plain HTTP; anything else is 404."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
                if path == b"/metrics":
                    body, status = self.render().encode(), b"200 OK"
                    kind = b"text/plain; version=0.0.4; charset=utf-8"
                else:
                    body, status, kind = b"not found\n", b"404 Not Found", b"text/plain"
                writer.write(
                    b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                    + b"\r\nContent-Length: " + str(len(body)).encode()
                    + b"\r\nConnection: close\r\n\r\n" + body
                )  # fmt: skip
                await writer.drain()
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, host, port)
        log.info("metrics served", extra={"port": server.sockets[0].getsockname()[1]})
        return server


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in labels)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(labels, escaped, strict=True)) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)
