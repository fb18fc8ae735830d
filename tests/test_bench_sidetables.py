"""The side-by-side figures of the docs against the run kept in
bench/results/side-by-side.json: each is what `python bench/sidetables.py` makes of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bench_modules import load

REPO = Path(__file__).resolve().parents[1]
SIDETABLES = REPO / "bench" / "sidetables.py"
KEPT = REPO / "bench" / "results" / "side-by-side.json"


def check(results: Path = KEPT, page: Path | None = None) -> subprocess.CompletedProcess[str]:
    pages = ["--page", str(page)] if page is not None else []
    return subprocess.run(
        [sys.executable, str(SIDETABLES), "--check", "--results", str(results), *pages],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_pages_are_what_the_kept_run_gives() -> None:
    done = check()
    assert done.returncode == 0, done.stderr


def test_the_kept_run_names_its_commit_and_load() -> None:
    run = json.loads(KEPT.read_text())
    assert len(run["repeats"]) >= 3
    assert set(run["run"]["load_average"]) == {"start", "end"}
    assert all(len(r["load_average"]) == 3 for r in run["repeats"])
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{run['run']['commit']}^{{commit}}"], cwd=REPO, check=False
    )
    assert known.returncode == 0, f"{run['run']['commit']} is no commit of this repository"


def test_a_figure_changed_in_the_kept_run_is_a_stale_table(tmp_path: Path) -> None:
    run = json.loads(KEPT.read_text())
    run["repeats"][0]["sizes"]["4"]["go"]["unprepare_p99_ms"] *= 3
    changed = tmp_path / "side-by-side.json"
    changed.write_text(json.dumps(run))
    done = check(changed)
    assert done.returncode == 1
    assert "performance.md: side-by-side" in done.stderr, done.stderr
    assert "reliability.md" not in done.stderr


def test_an_rss_changed_in_the_kept_run_is_a_stale_figure(tmp_path: Path) -> None:
    run = json.loads(KEPT.read_text())
    run["repeats"][-1]["rss_mib"]["neuron"] += 20
    changed = tmp_path / "side-by-side.json"
    changed.write_text(json.dumps(run))
    done = check(changed)
    assert done.returncode == 1
    assert "reliability.md: rss-end differ" in done.stderr, done.stderr
    assert "install.md: rss-most differ" in done.stderr, done.stderr


def test_a_page_without_markers_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    done = check(page=page)
    assert done.returncode == 1
    assert "nothing generated" in done.stderr


def test_the_figures_over_their_goal_are_named_from_the_median_of_the_repeats() -> None:
    sidetables = load("sidetables")
    run = json.loads(KEPT.read_text())
    run["repeats"] = run["repeats"][:3]  # three, whatever the kept run has
    for repeat in run["repeats"]:
        repeat["rss_mib"] = {"neuron": 40.0, "neuron_off": 40.0, "go": 40.0}
        for size in repeat["sizes"].values():
            size["neuron"] = dict(size["go"])
    assert sidetables.over_goal(run) == "none"

    # One repeat far over: its median stays under, and nothing is named.
    run["repeats"][0]["sizes"]["4"]["neuron"]["prepare_p99_ms"] *= 3
    assert sidetables.over_goal(run) == "none"
    # Two of three over: the median is, and so is the figure, with the range.
    run["repeats"][1]["sizes"]["4"]["neuron"]["prepare_p99_ms"] *= 2
    assert sidetables.over_goal(run) == "prepare p99 of 4 devices, 2.00 (1.00-3.00)"
