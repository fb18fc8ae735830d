"""bench/stats.py: the rate of a steady phase and when a p99 is given."""

from __future__ import annotations

import pytest

from tests.bench_modules import load

stats = load("stats")


def test_pods_bound_at_the_offered_rate_count_as_that_rate() -> None:
    # 25 pods bound 0.2 s apart, 0.04 s after each was created 5 a second: 5 a second.
    # Counting 25 pods over the 24 intervals from the first creation gave 5.17.
    bound = [0.04 + i / 5 for i in range(25)]
    assert stats.throughput(bound) == pytest.approx(5.0)


def test_a_rate_needs_two_bindings_apart() -> None:
    with pytest.raises(ValueError, match="two pods"):
        stats.throughput([1.0])
    with pytest.raises(ValueError, match="same instant"):
        stats.throughput([1.0, 1.0])


def test_a_p99_is_given_from_thirty_samples_only() -> None:
    few = stats.summary([float(i) for i in range(29)], [])
    assert "p99_ms" not in few and few["p50_ms"] == 14.0
    enough = stats.summary([float(i) for i in range(100)], [1.0, 3.0, 2.0])
    assert enough["p99_ms"] == 98.0 and enough["algorithm_p50_ms"] == 2.0
