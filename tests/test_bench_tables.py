"""docs/contributors/fleet-scale.md against the runs kept in bench/results: every
table of the page is what `python bench/tables.py` makes of them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLES = REPO / "bench" / "tables.py"
PAGE = REPO / "docs" / "contributors" / "fleet-scale.md"
KEPT = REPO / "bench" / "results"


def check(page: Path = PAGE, results: Path = KEPT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TABLES), "--check", "--page", str(page), "--results", str(results)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_fleet_page_is_what_the_kept_runs_give() -> None:
    runs = sorted(KEPT.glob("fleet-*.json"))
    assert runs, "no run kept in bench/results"
    # Small: what the tables need and the samples behind each figure.
    assert all(p.stat().st_size < 100_000 for p in runs), [p.stat().st_size for p in runs]
    done = check()
    assert done.returncode == 0, done.stderr


def test_a_figure_changed_in_a_kept_run_is_a_stale_table(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(KEPT, results)
    path = sorted(results.glob("fleet-*.json"))[0]
    run = json.loads(path.read_text())
    step = next(iter(next(iter(run["layouts"].values()))["sizes"].values()))
    step["empty"]["1 device"]["p50_ms"] += 1000
    path.write_text(json.dumps(run))
    done = check(results=results)
    assert done.returncode == 1
    stale = done.stderr.split("tables ", 1)[1].split(" differ", 1)[0].split(", ")
    assert "measured" in stale and "churn" not in stale, done.stderr


def test_a_page_without_markers_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    done = check(page=page)
    assert done.returncode == 1 and "no generated table" in done.stderr


def test_a_layout_measured_at_two_sizes_in_two_runs_keeps_both() -> None:
    """A run of 2,000 nodes beside one of 1,000 adds rows; it replaces none. Each size
    says what its run's API server served (the 5,000-node run: resource.k8s.io v1
    alone, the earlier ones its betas too)."""
    page = PAGE.read_text()
    for size, served in (
        ("1,000", "v1, v1beta1, v1beta2"),
        ("2,000", "v1, v1beta1, v1beta2"),
        ("5,000", "v1"),
    ):
        for layout in ("devices", "partitions"):
            carried = next(line for line in page.splitlines() if line.startswith(f"| {layout} |"))
            assert f"{size} ({served}): " in carried, (layout, size)
        assert f"| {size}, 90% full | 1 device |" in page
