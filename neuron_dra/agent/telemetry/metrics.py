"""Prometheus metrics: counters and histograms the agent updates, gauges read at scrape.

prometheus_client keeps the series and writes the text format; `metricsserver`
serves it over HTTP.

A scrape computes two kinds of gauges: `gauges`, from the agent's in-memory
state, on the event loop (that state is only ever changed there, so it is read
consistently); and `file_gauges`, which read sysfs, in a thread of their own,
so that a slow or hung device file never stalls a prepare.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from prometheus_client import Counter, Histogram, Info
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from neuron_dra.agent.files.offloop import in_daemon_thread
from neuron_dra.agent.telemetry import metricsserver
from neuron_dra.agent.telemetry.buildinfo import build_labels
from neuron_dra.agent.telemetry.metricsserver import MAX_CONNECTIONS, TIMEOUT_S, Authorize

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
Labels = tuple[tuple[str, str], ...]
Gauges = Callable[[], Iterable["Sample"]]
BEFORE_SCRAPE_S = 2.0


@dataclass(frozen=True)
class Sample:
    """One gauge value computed at scrape time."""

    name: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class Spec:
    kind: str  # counter, histogram or gauge
    help: str
    labels: tuple[str, ...] = ()  # of counters and histograms; gauges label each sample
    # A counter read at scrape (from sysfs), not kept here: its samples label themselves.
    at_scrape: bool = False


BUILD_INFO = "neuron_dra_build_info"

# Every metric the driver exposes, documented in one place, in exposition order.
METRICS: dict[str, Spec] = {
    BUILD_INFO: Spec(
        "gauge",
        "1, labelled with the driver's version and those of Python, grpcio and prometheus_client.",
    ),
    "neuron_dra_devices": Spec("gauge", "Neuron devices by health and allocation state."),
    "neuron_dra_prepared_claims": Spec("gauge", "Claims currently prepared on this node."),
    "neuron_dra_prepare_duration_seconds": Spec(
        "histogram", "NodePrepareResources time per claim."
    ),
    "neuron_dra_unprepare_duration_seconds": Spec(
        "histogram", "NodeUnprepareResources time per claim."
    ),
    "neuron_dra_prepare_phase_duration_seconds": Spec(
        "histogram",
        "Prepare time per claim by phase: api (claim read), cdi (config and spec), checkpoint.",
        ("phase",),
    ),
    "neuron_dra_prepare_errors_total": Spec(
        "counter", "Claims not prepared, by reason.", ("reason",)
    ),
    "neuron_dra_unprepare_errors_total": Spec(
        "counter", "Claims not unprepared, by reason.", ("reason",)
    ),
    "neuron_dra_claim_status_pending": Spec(
        "gauge", "Claims whose status.devices write or clear is waiting or being retried."
    ),
    "neuron_dra_claim_status_errors_total": Spec(
        "counter",
        "Writes of a prepared claim's status.devices that failed and are tried again, by "
        "reason: forbidden, refused (invalid, or refused by a policy), unavailable, internal.",
        ("reason",),
    ),
    "neuron_dra_slice_publishes_total": Spec(
        "counter", "ResourceSlice creates, updates and deletes sent to the API server."
    ),
    "neuron_dra_slice_last_publish_timestamp_seconds": Spec(
        "gauge", "Time of the last slice write."
    ),
    "neuron_dra_health_events_total": Spec(
        "counter", "Devices marked unhealthy, by error kind.", ("kind",)
    ),
    "neuron_dra_metrics_token_reviews_total": Spec(
        "counter",
        "Reviews of /metrics bearer tokens not known yet, and renewals of expired grants, "
        "by result: allowed, "
        "unauthorized, forbidden, unavailable (the API server did not answer) or limited "
        "(too many new tokens: not sent for review).",
        ("result",),
    ),
    "neuron_dra_registered": Spec(
        "gauge", "1 once the kubelet has registered the plugin, 0 before and after."
    ),
    "neuron_dra_device_healthy": Spec(
        "gauge", "1 while the device is in service, 0 while a health source keeps it out."
    ),
    "neuron_dra_unwatched_devices": Spec(
        "gauge",
        "Devices with no sysfs health source the driver can read (neither "
        "stats/hardware/health_status nor ECC counters).",
    ),
    "neuron_dra_health_poll_stalled": Spec(
        "gauge",
        "1 while the device health poll runs past its deadline (a sysfs read or the "
        "kernel log hangs): devices keep their last known health until it ends.",
    ),
    "neuron_dra_recursive_readonly_mounts": Spec(
        "gauge",
        "Host mounts the DaemonSet asks to be recursively read-only, by state: effective, "
        "or not_effective (a mount below one is still read-write: the runtime fell back).",
    ),
    "neuron_dra_device_plugin_conflict": Spec(
        "gauge",
        "1 while the Neuron device plugin serves this node too: the driver publishes no "
        "device there until it is gone.",
    ),
    "neuron_dra_instance_type_derived": Spec(
        "gauge",
        "1 when the node's instance type is not in the driver's catalogue and its devices "
        "are published as its sysfs says (connected sets, LNC, cores); 0 when it is.",
    ),
    "neuron_dra_pod_resources_up": Spec(
        "gauge", "1 when the kubelet's PodResources API answered its last call."
    ),
    "neuron_dra_device_allocation_info": Spec(
        "gauge",
        "1 for each container holding a Neuron device through this driver: its namespace, "
        "pod, container and claim, the DRA device and the physical device it covers.",
    ),
    "neuron_dra_device_power_draw_ratio": Spec(
        "gauge",
        "Power drawn as a fraction of the device's maximum, averaged over the Neuron "
        "driver's last one-minute period (stats/power/utilization).",
    ),
    "neuron_dra_device_memory_used_bytes": Spec(
        "gauge", "Device memory allocated on the device, all its NeuronCores together."
    ),
    "neuron_dra_device_healthcheck_heartbeat": Spec(
        "gauge",
        "The device firmware's health-check heartbeat, an 8-bit value that advances while "
        "the firmware runs (driver 2.30+, Trainium2 and 3).",
    ),
    "neuron_dra_device_executions_total": Spec(
        "counter",
        "NeuronCore executions on the device since the Neuron driver loaded, by outcome.",
        at_scrape=True,
    ),
    "neuron_dra_device_ecc_errors_total": Spec(
        "counter",
        "ECC errors the device reports, by memory (hbm, sram) and kind (uncorrected, "
        "repairable_uncorrected, corrected).",
        at_scrape=True,
    ),
}


class _Families:
    """What `generate_latest` reads: metric families already collected."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


class Metrics:
    def __init__(
        self,
        *,
        gauges: Gauges | None = None,
        file_gauges: Gauges | None = None,
        before_scrape: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """The sources a scrape reads beside the counters and histograms: `gauges` on the
        event loop (no I/O), `file_gauges` in a worker thread (may read sysfs), and
        `before_scrape` awaited on the loop first, for at most BEFORE_SCRAPE_S (state
        the gauges show that another process holds)."""
        # Unregistered: each agent (and each test) has its own series, not the global registry's.
        self._counters = {
            name: Counter(name, spec.help, spec.labels, registry=None)
            for name, spec in METRICS.items()
            if spec.kind == "counter" and not spec.at_scrape
        }
        self._histograms = {
            name: Histogram(name, spec.help, spec.labels, registry=None, buckets=LATENCY_BUCKETS_S)
            for name, spec in METRICS.items()
            if spec.kind == "histogram"
        }
        # An Info is exposed as the gauge `<name>_info`, 1 with its labels (set at scrape).
        self._build = Info(
            BUILD_INFO.removesuffix("_info"), METRICS[BUILD_INFO].help, registry=None
        )
        self.gauges: Gauges = gauges or _none
        self.file_gauges: Gauges = file_gauges or _none
        self.before_scrape = before_scrape
        self._scrape: asyncio.Future[bytes] | None = None

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        counter = self._counters[name]
        (counter.labels(**labels) if labels else counter).inc(amount)

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        histogram = self._histograms[name]
        (histogram.labels(**labels) if labels else histogram).observe(seconds)

    def render(self) -> str:
        """The text exposition, every gauge read in the calling thread."""
        return self._expose(list(self.gauges())).decode()

    async def scrape(self, timeout_s: float = TIMEOUT_S) -> bytes:
        """The text exposition, the file gauges read off the event loop.

        One reading at a time: scrapes that arrive while one runs share its
        result, so a hung device file holds one thread, not one per scrape.
        Raises TimeoutError when the reading takes longer than `timeout_s`.
        """
        running = self._scrape
        if (
            running is None
            or running.done()
            or running.get_loop() is not asyncio.get_running_loop()
        ):
            self._scrape = running = asyncio.ensure_future(self._collect())
        return await asyncio.wait_for(asyncio.shield(running), timeout_s)

    async def _collect(self) -> bytes:
        if self.before_scrape is not None:
            try:
                await asyncio.wait_for(self.before_scrape(), BEFORE_SCRAPE_S)
            except Exception:
                # The gauges say what is known; the hook reports its own failures.
                log.debug("before-scrape hook failed", exc_info=True)
        gauges = list(self.gauges())
        # A daemon thread, not an executor's: a read that never returns must not hold up
        # the agent's exit, which joins executor threads.
        return await in_daemon_thread(lambda: self._expose(gauges), "neuron-dra-metrics")

    def _expose(self, gauges: list[Sample]) -> bytes:
        by_name: dict[str, list[Sample]] = {}
        for sample in (*gauges, *self.file_gauges()):
            by_name.setdefault(sample.name, []).append(sample)
        families: list[Metric] = []
        self._build.info(dict(build_labels()))
        for name, spec in METRICS.items():
            series: Counter | Histogram | Info | None = self._counters.get(name)
            series = self._build if name == BUILD_INFO else series or self._histograms.get(name)
            if series is not None:
                families += _without_created(series)
            elif name in by_name:
                # A counter family is named without `_total`; its samples with it.
                family_name = name.removesuffix("_total") if spec.kind == "counter" else name
                family = Metric(family_name, spec.help, spec.kind)
                for sample in by_name[name]:
                    family.add_sample(name, dict(sample.labels), sample.value)
                families.append(family)
        return generate_latest(_Families(families))

    async def serve(
        self,
        port: int,
        host: str = "0.0.0.0",
        *,
        timeout_s: float = TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        authorize: Authorize | None = None,
    ) -> asyncio.Server:
        """GET /metrics and /healthz over plain HTTP/1.1 (`metricsserver.serve`)."""
        return await metricsserver.serve(
            self.scrape,
            port,
            host,
            timeout_s=timeout_s,
            max_connections=max_connections,
            authorize=authorize,
        )


def _without_created(series: Counter | Histogram | Info) -> list[Metric]:
    families = list(series.collect())
    for family in families:
        # `_created` series are OpenMetrics': in the text format they would be extra,
        # undocumented gauge families.
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return families


def _none() -> list[Sample]:
    return []
