from __future__ import annotations

import asyncio
import platform
import re
from importlib.metadata import version
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from consts import DRA_DRIVER_VERSION
from neuron_dra.agent.telemetry.metrics import METRICS, Metrics, Sample


def families(text: str) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    found: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            found.setdefault(family.name, {})[key] = sample.value
    return found


def test_exposition_parses_and_counts() -> None:
    metrics = Metrics()
    metrics.observe("neuron_dra_prepare_duration_seconds", 0.004)
    metrics.observe("neuron_dra_prepare_duration_seconds", 0.2)
    metrics.inc("neuron_dra_prepare_errors_total", reason="claim")
    metrics.inc("neuron_dra_health_events_total", kind='odd"kind')
    metrics.gauges = lambda: [Sample("neuron_dra_devices", (("health", "healthy"),), 15)]
    parsed = families(metrics.render())
    prepare = parsed["neuron_dra_prepare_duration_seconds"]
    assert prepare[("neuron_dra_prepare_duration_seconds_count", ())] == 2
    assert prepare[("neuron_dra_prepare_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert prepare[("neuron_dra_prepare_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    errors = parsed["neuron_dra_prepare_errors"]
    assert errors[("neuron_dra_prepare_errors_total", (("reason", "claim"),))] == 1
    health = parsed["neuron_dra_health_events"]
    assert health[("neuron_dra_health_events_total", (("kind", 'odd"kind'),))] == 1
    assert parsed["neuron_dra_devices"][("neuron_dra_devices", (("health", "healthy"),))] == 15


def test_every_metric_is_prefixed_and_documented() -> None:
    assert all(name.startswith("neuron_dra_") for name in METRICS)
    assert all(spec.help.endswith(".") for spec in METRICS.values())


def test_the_docs_document_every_metric_with_its_type() -> None:
    page = (Path(__file__).parents[4] / "docs/operators/health-and-metrics.md").read_text()
    rows = re.findall(r"^\| `(neuron_dra_\w+)(?:\{[\w,]*\})?` \| (\w+) \|", page, re.MULTILINE)
    assert dict(rows) == {name: spec.kind for name, spec in METRICS.items()}


def test_every_family_is_exposed_with_its_documented_type() -> None:
    metrics = Metrics()
    for name, spec in METRICS.items():
        labels = {label: "x" for label in spec.labels}
        if spec.kind == "counter" and not spec.at_scrape:
            metrics.inc(name, 1, **labels)
        elif spec.kind == "histogram":
            metrics.observe(name, 0.01, **labels)
    metrics.gauges = lambda: [
        Sample(n, (), 1) for n, spec in METRICS.items() if spec.kind == "gauge" or spec.at_scrape
    ]
    exposed = {
        family.name: family.type for family in text_string_to_metric_families(metrics.render())
    }
    # The parser names a counter family without its `_total`.
    assert exposed == {n.removesuffix("_total"): spec.kind for n, spec in METRICS.items()}


def test_http_endpoint() -> None:
    async def main() -> tuple[bytes, bytes]:
        metrics = Metrics()
        metrics.inc("neuron_dra_slice_publishes_total")
        server = await metrics.serve(0, "127.0.0.1")
        port = server.sockets[0].getsockname()[1]
        answers = []
        for path in (b"/metrics", b"/other"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            answers.append(await reader.read())
            writer.close()
        server.close()
        return answers[0], answers[1]

    ok, missing = asyncio.run(main())
    assert ok.startswith(b"HTTP/1.1 200 OK") and b"neuron_dra_slice_publishes_total 1" in ok
    assert missing.startswith(b"HTTP/1.1 404")


def test_labelled_histograms() -> None:
    metrics = Metrics()
    metrics.observe("neuron_dra_prepare_phase_duration_seconds", 0.002, phase="api")
    metrics.observe("neuron_dra_prepare_phase_duration_seconds", 0.0004, phase="cdi")
    parsed = families(metrics.render())["neuron_dra_prepare_phase_duration_seconds"]
    assert parsed[("neuron_dra_prepare_phase_duration_seconds_count", (("phase", "api"),))] == 1
    assert parsed[("neuron_dra_prepare_phase_duration_seconds_sum", (("phase", "cdi"),))] == 0.0004
    assert (
        parsed[
            (
                "neuron_dra_prepare_phase_duration_seconds_bucket",
                (("le", "0.001"), ("phase", "cdi")),
            )
        ]
        == 1
    )


def test_build_info_names_the_versions_running() -> None:
    parsed = families(Metrics().render())["neuron_dra_build_info"]
    labels = {
        "version": DRA_DRIVER_VERSION,
        "python_version": platform.python_version(),
        "grpcio_version": version("grpcio"),
        "prometheus_client_version": version("prometheus-client"),
    }
    assert parsed == {("neuron_dra_build_info", tuple(sorted(labels.items()))): 1.0}


def test_durations_are_named_duration_seconds() -> None:
    histograms = [name for name, spec in METRICS.items() if spec.kind == "histogram"]
    assert histograms and all(name.endswith("_duration_seconds") for name in histograms)
