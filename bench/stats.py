"""What the benchmarks' timed samples sum up to: percentiles, a case's summary (its p99
only where there are samples enough for one) and a rate of pods from the times they
were bound. Pure functions, with no other module of bench/ imported, so the tests
load this file alone."""

from __future__ import annotations

from typing import Any

P99_SAMPLES = 30
"""The fewest samples a p99 is given from: below, it is the slowest of a handful."""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(samples: list[float], algorithm: list[float]) -> dict[str, Any]:
    """p50 of `samples` (ms), p99 where there are P99_SAMPLES of them, and the samples."""
    out: dict[str, Any] = {
        "p50_ms": percentile(samples, 0.5),
        "samples_ms": [round(s, 1) for s in samples],
    }
    if len(samples) >= P99_SAMPLES:
        out["p99_ms"] = percentile(samples, 0.99)
    if algorithm:
        out["algorithm_p50_ms"] = percentile(algorithm, 0.5)
    return out


def throughput(bound: list[float]) -> float:
    """Pods a second from the times they were bound: n pods are bound over the n - 1
    intervals between the first binding and the last."""
    if len(bound) < 2:
        raise ValueError(f"a rate needs two pods bound at least, not {len(bound)}")
    first, last = min(bound), max(bound)
    if last == first:
        raise ValueError("every pod bound at the same instant: no rate")
    return (len(bound) - 1) / (last - first)
