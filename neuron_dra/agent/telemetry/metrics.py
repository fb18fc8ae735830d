"""Prometheus metrics: counters and histograms the agent updates, gauges read at scrape.

prometheus_client keeps the series and writes the text format. The HTTP side
is a small asyncio server of its own, bounded in time, size and connections:
the library's own server runs a thread per connection with no time bound, and
its aiohttp handler would bring aiohttp's server into the agent (about 300 ms
of imports and 9 MiB).

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
from http import HTTPStatus

from prometheus_client import Counter, Histogram, Info
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric

from neuron_dra.agent.files.offloop import in_daemon_thread
from neuron_dra.agent.telemetry.buildinfo import build_labels

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
Labels = tuple[tuple[str, str], ...]
Gauges = Callable[[], Iterable["Sample"]]
# The HTTP status of a request with this Authorization header (or none): `metricsauth`.
Authorize = Callable[[str | None], Awaitable[int]]
_REFUSED = {
    HTTPStatus.UNAUTHORIZED: (b"a bearer token is needed\n", b"WWW-Authenticate: Bearer\r\n"),
    HTTPStatus.FORBIDDEN: (b"not allowed to get /metrics\n", b""),
    # New tokens come faster than the API server is asked to review them.
    HTTPStatus.TOO_MANY_REQUESTS: (b"too many new tokens\n", b"Retry-After: 1\r\n"),
    HTTPStatus.SERVICE_UNAVAILABLE: (b"authorization unavailable\n", b""),
}

# Request bounds of the HTTP endpoint. A scrape is one short GET: its head fits
# in a few hundred bytes, and Prometheus gives up after its own timeout (10 s).
MAX_HEAD_BYTES = 8192
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 16
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
        "Bearer tokens of /metrics requests not known yet, by result: allowed, "
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
    def __init__(self) -> None:
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
        self.gauges: Gauges = lambda: ()  # called on the event loop: no I/O
        self.file_gauges: Gauges = lambda: ()  # called in a worker thread: may read sysfs
        # Awaited on the event loop before the gauges are read, for at most
        # BEFORE_SCRAPE_S: state the gauges show that another process holds.
        self.before_scrape: Callable[[], Awaitable[None]] | None = None
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
        """GET /metrics and /healthz over plain HTTP/1.1, one request per connection.

        Every step of a connection (reading the head, the scrape, writing the
        answer) is bounded by `timeout_s`, the head by MAX_HEAD_BYTES, and the
        connections served at once by `max_connections`. With `authorize`, /metrics
        is answered only when it says 200 of the request's Authorization header.
        """
        open_connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal open_connections
            open_connections += 1
            try:
                if open_connections > max_connections:
                    answer = _response(b"503 Service Unavailable", b"busy\n")
                else:
                    answer = await self._answer(reader, timeout_s, authorize)
                if answer:
                    writer.write(answer)
                    await asyncio.wait_for(writer.drain(), timeout_s)
            except (TimeoutError, ConnectionError):
                pass  # a client that stalls or goes away: drop it
            except Exception:
                log.exception("metrics request failed")
            finally:
                open_connections -= 1
                writer.close()

        server = await asyncio.start_server(handle, host, port, limit=MAX_HEAD_BYTES)
        log.info("metrics served", extra={"port": server.sockets[0].getsockname()[1]})
        return server

    async def _answer(
        self, reader: asyncio.StreamReader, timeout_s: float, authorize: Authorize | None
    ) -> bytes:
        """The response to one request; empty when the client is to be dropped unanswered."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
        except asyncio.LimitOverrunError:
            return _response(b"431 Request Header Fields Too Large", b"request head too large\n")
        except (TimeoutError, asyncio.IncompleteReadError):
            return b""
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
            return _response(b"400 Bad Request", b"bad request\n")
        method, path = parts[0], parts[1].split(b"?", 1)[0]
        if path not in (b"/metrics", b"/healthz"):
            return _response(b"404 Not Found", b"not found\n")
        if method != b"GET":
            return _response(b"405 Method Not Allowed", b"GET only\n", b"Allow: GET\r\n")
        if path == b"/healthz":
            return _response(b"200 OK", b"ok\n")
        if authorize is not None:
            try:
                verdict = await asyncio.wait_for(
                    authorize(_header(head, b"authorization")), timeout_s
                )
            except TimeoutError:
                verdict = HTTPStatus.SERVICE_UNAVAILABLE  # the API server is slow to review
            if verdict != HTTPStatus.OK:
                if verdict not in _REFUSED:
                    verdict = HTTPStatus.SERVICE_UNAVAILABLE
                refused = HTTPStatus(verdict)
                line = f"{refused.value} {refused.phrase}".encode()
                return _response(line, *_REFUSED[refused])
        try:
            body = await self.scrape(timeout_s)
        except TimeoutError:
            log.warning("metrics scrape timed out: a device file read is slow or hung")
            return _response(b"503 Service Unavailable", b"scrape timed out\n")
        except Exception:
            log.exception("metrics scrape failed")
            return _response(b"500 Internal Server Error", b"scrape failed\n")
        return _response(b"200 OK", body, kind=CONTENT_TYPE_PLAIN_0_0_4.encode())


def _header(head: bytes, name: bytes) -> str | None:
    """The first value of header `name` (lower case) in a request head."""
    for line in head.split(b"\r\n")[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


def _without_created(series: Counter | Histogram | Info) -> list[Metric]:
    families = list(series.collect())
    for family in families:
        # `_created` series are OpenMetrics': in the text format they would be extra,
        # undocumented gauge families.
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return families


def _response(status: bytes, body: bytes, extra: bytes = b"", kind: bytes = b"text/plain") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + kind
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n"
        + extra
        + b"\r\n"
        + body
    )
