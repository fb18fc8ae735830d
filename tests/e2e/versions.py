"""Run the tests marked `versions` on every supported release and tabulate them.

    python -m tests.e2e.versions                      # all releases, the next one's beta too
    python -m tests.e2e.versions --release v1.34.4    # one (repeatable)
    python -m tests.e2e.versions --oldest             # the oldest, as `make test` does
    python -m tests.e2e.versions --table docs/operators/kubernetes-releases.md  # and its table
    python -m tests.e2e.versions --table-only docs/operators/kubernetes-releases.md

With ``--table``, each release's outcomes are kept in ``bench/results/versions/`` (one
file a column: the commit that ran, when, where, every test's result), and the table
is generated from every file there, so one release can be measured again alone and the
table checked against the raw results (``--table-only`` regenerates it without a run).
Each release runs in its own pytest process (the binaries are chosen by
environment); a test's `versions(check=...)` marker names its row, and what it
recorded as `detail` says how that release did it. A release whose binaries cannot
be built because the Go module proxy refuses modules they need is a column saying
so, naming them. Exits non-zero when any test failed, or a supported release (not
the next one's beta) could not be built, so `make test` can run it for the oldest
release.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from neuron_dra_harness.build import (
    KUBELET_ONLY_RELEASES,
    NEXT_RELEASES,
    RELEASES,
    build_release,
)
from neuron_dra_harness.standins import refused_modules

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results" / "versions"
BEGIN, END = "<!-- compatibility:begin -->", "<!-- compatibility:end -->"


@dataclass(frozen=True)
class Combination:
    control_plane: str
    kubelet: str

    @property
    def label(self) -> str:
        if self.kubelet == self.control_plane:
            return self.control_plane
        return f"{self.kubelet} kubelet, {self.control_plane}"


COMBINATIONS = (
    *(Combination(v, v) for v in (*RELEASES, *NEXT_RELEASES)),
    *(Combination(RELEASES[0], v) for v in KUBELET_ONLY_RELEASES),
)


@dataclass(frozen=True)
class Outcome:
    check: str
    test: str
    status: str  # passed, failed, skipped, unbuilt
    detail: str


UNBUILT = "unbuilt"
# A module skipped whole (the Karpenter suite outside `make test-karpenter`) is a case
# of no row: kept in the raw results, left out of the table.
UNMARKED = "(unmarked)"
NOT_BUILT = "not built here"


def unbuildable(combination: Combination) -> str | None:
    """Why the combination's binaries cannot be built on this machine, when the Go
    module proxy refuses what they need; None otherwise (any other build error is
    left to the pytest session, which reports it as the tests' failure)."""
    try:
        build_release(combination.control_plane)
        if combination.kubelet != combination.control_plane:
            build_release(combination.kubelet, kubelet_only=True)
    except RuntimeError as err:
        if refused := refused_modules(str(err)):
            return f"{NOT_BUILT}: the Go module proxy refuses " + ", ".join(refused)
    return None


def run(combination: Combination, extra: Sequence[str] = ()) -> list[Outcome]:
    if (why := unbuildable(combination)) is not None:
        print(f"== {combination.label}: {why}", flush=True)
        return [Outcome("(build)", "(build)", UNBUILT, why)]
    env = dict(os.environ)
    env["NEURON_DRA_K8S_VERSION"] = combination.control_plane
    env["NEURON_DRA_KUBELET_VERSION"] = combination.kubelet
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        # xunit1: the report keeps each test's recorded properties (check, detail).
        command = [
            sys.executable,
            "-m",
            "pytest",
            "tests/e2e",
            "-m",
            "versions",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit1",
            f"--junitxml={report}",
            *extra,
        ]
        print(f"== {combination.label}: {' '.join(command[2:])}", flush=True)
        subprocess.run(command, cwd=REPO, env=env, check=False)
        if not report.exists():
            return [Outcome("(session)", "(session)", "failed", "pytest wrote no report")]
        return outcomes(ET.parse(report).getroot())


def outcomes(root: ET.Element) -> list[Outcome]:
    found = []
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") or "" for p in case.iter("property")}
        status = "passed"
        detail = props.get("detail", "")
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                status = "skipped" if tag == "skipped" else "failed"
                message = element.get("message") or ""
                detail = message.removeprefix("Skipped: ").splitlines()[0] if message else tag
        check = props.get("check", UNMARKED)
        found.append(Outcome(check, case.get("name", "?"), status, detail))
    return found


def cell(results: list[Outcome]) -> str:
    if not results:
        return "not run"
    failed = [r for r in results if r.status == "failed"]
    if failed:
        return "**FAIL** " + "; ".join(f"{r.test}: {r.detail}"[:120] for r in failed)
    if all(r.status == "skipped" for r in results):
        return "n/a: " + results[0].detail
    details = sorted({r.detail for r in results if r.status == "passed" and r.detail})
    return "ok" + (" (" + "; ".join(details) + ")" if details else "")


def table(
    results: dict[Combination, list[Outcome]], runs: dict[Combination, Run] | None = None
) -> str:
    runs = runs or {}
    checks = sorted(
        {o.check for found in results.values() for o in found if o.status != UNBUILT} - {UNMARKED}
    )
    columns = list(results)
    dates = sorted({runs[c].date for c in columns if c in runs})
    commits = sorted({runs[c].commit[:12] for c in columns if c in runs})
    machines = sorted({runs[c].machine for c in columns if c in runs})
    lines = [
        f"Measured {' to '.join(dict.fromkeys([dates[0], dates[-1]])) if dates else 'never'} "
        f"on {', '.join(machines) or platform.machine()} with `make test-versions` "
        f"({sum(len(v) for v in results.values())} test runs; commit "
        f"{', '.join(commits) or 'none'}; raw results in `bench/results/versions/`).",
        "",
        "| check | " + " | ".join(c.label for c in columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    unbuilt = {c: o.detail for c in columns for o in results[c] if o.status == UNBUILT}
    for check in checks:
        row = [
            NOT_BUILT if c in unbuilt else cell([o for o in results[c] if o.check == check])
            for c in columns
        ]
        lines.append(f"| {check} | " + " | ".join(row) + " |")
    # Why a column was not built, once under the table rather than in each of its cells.
    lines += ["", *(f"{c.label}: {why}." for c, why in unbuilt.items())] if unbuilt else []
    return "\n".join(lines)


@dataclass(frozen=True)
class Run:
    """Where and from what a column was measured."""

    commit: str
    dirty: bool
    date: str
    machine: str
    load_average: tuple[float, float, float]


def this_run() -> Run:
    """The checkout and machine running now."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return Run(
        commit,
        bool(status.strip()),
        datetime.date.today().isoformat(),
        platform.machine(),
        os.getloadavg(),
    )


def result_file(combination: Combination) -> Path:
    """bench/results/versions/v1.34.4.json, or v1.33.13-kubelet-v1.34.4.json."""
    name = combination.control_plane
    if combination.kubelet != combination.control_plane:
        name = f"{combination.kubelet}-kubelet-{combination.control_plane}"
    return RESULTS / f"{name}.json"


def keep(combination: Combination, found: list[Outcome], where: Run) -> None:
    """Write one column's raw results: the run, then every test's outcome."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    body = {
        "control_plane": combination.control_plane,
        "kubelet": combination.kubelet,
        "run": dataclasses.asdict(where),
        "outcomes": [dataclasses.asdict(o) for o in found],
    }
    result_file(combination).write_text(json.dumps(body, indent=1) + "\n")


def stored() -> tuple[dict[Combination, list[Outcome]], dict[Combination, Run]]:
    """Every kept column, in the table's order (``COMBINATIONS``)."""
    results: dict[Combination, list[Outcome]] = {}
    runs: dict[Combination, Run] = {}
    for combination in COMBINATIONS:
        path = result_file(combination)
        if not path.is_file():
            continue
        body = json.loads(path.read_text())
        results[combination] = [Outcome(**o) for o in body["outcomes"]]
        run_ = body["run"]
        runs[combination] = Run(**{**run_, "load_average": tuple(run_["load_average"])})
    return results, runs


def rewrite(page: Path, text: str) -> None:
    content = page.read_text()
    start, end = content.index(BEGIN) + len(BEGIN), content.index(END)
    page.write_text(content[:start] + "\n" + text + "\n" + content[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--release", action="append", help="a control-plane release to run")
    parser.add_argument("--oldest", action="store_true", help="only the oldest release")
    parser.add_argument(
        "--table",
        type=Path,
        help="keep each release's results in bench/results/versions/ and rewrite the "
        "compatibility table in this file from every release kept there",
    )
    parser.add_argument(
        "--table-only", type=Path, help="rewrite the table from the kept results; run nothing"
    )
    args, extra = parser.parse_known_args(argv)
    if args.table_only:
        rewrite(args.table_only, table(*stored()))
        return 0
    wanted = [RELEASES[0]] if args.oldest else args.release
    chosen = [c for c in COMBINATIONS if not wanted or c.control_plane in wanted]
    if wanted:
        chosen = [c for c in chosen if c.kubelet == c.control_plane]
    results: dict[Combination, list[Outcome]] = {}
    runs: dict[Combination, Run] = {}
    for combination in chosen:
        runs[combination] = this_run()  # the checkout and the load as the column starts
        results[combination] = run(combination, extra)
        if args.table:
            keep(combination, results[combination], runs[combination])
    if args.table:
        rewrite(args.table, table(*stored()))
    print(table(results, runs))
    return 1 if failed(results) else 0


def failed(results: dict[Combination, list[Outcome]]) -> bool:
    """A test failed, or a supported release could not be built (the next one's beta
    may not be, where the module proxy does not serve it yet)."""
    return any(
        o.status == "failed" or (o.status == UNBUILT and c.control_plane not in NEXT_RELEASES)
        for c, found in results.items()
        for o in found
    )


if __name__ == "__main__":
    raise SystemExit(main())
