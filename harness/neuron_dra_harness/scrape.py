"""The plugin's metrics endpoint as the tests and benchmarks read it: one GET of
`/metrics`, parsed by prometheus_client's own text parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

Series = dict[str, list[dict[str, str]]]


def samples(url: str, timeout_s: float = 5.0) -> list[Sample]:
    """Every sample the endpoint at `url` exposes now."""
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        text = answer.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def by_name(url: str) -> Series:
    """Each sample's labels, and its value under "value" (its repr), by sample name."""
    found: Series = {}
    for sample in samples(url):
        found.setdefault(sample.name, []).append({**sample.labels, "value": repr(sample.value)})
    return found
