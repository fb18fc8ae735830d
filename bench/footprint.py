"""The node agent's footprint: what `neuron-dra run` imports and what the image installs.

- The agent's wheel set (the project's wheel and its pinned runtime
  dependencies, `pip install --target`, bytecode included), the same with the
  `cli` extra (what the Dockerfile installs) and with the `tools` extra:
  installed size and distributions.
- The run path's imports from the agent-only set alone, in a fresh
  interpreter that sees nothing else (`python -S`): exactly the modules
  `neuron-dra run` loads before its event loop (the command line, then
  `neuron_dra.agent.run`), their count, the median wall time of 5 runs and the
  10 biggest modules by cumulative `-X importtime`.

Figures are printed and merged into bench/results/latest.json. Installing
needs the package index (or pip's cache), as the image build does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from neuron_dra_harness.distribution import TOOL_MODULES, build_wheel

REPO = Path(__file__).resolve().parents[1]

RESULTS = REPO / "bench" / "results" / "latest.json"
# What `neuron-dra run` imports before its sockets are served: the CLI module, then the
# entry of the agent it runs. The rest of the agent follows in a worker thread.
RUN_PATH = "import neuron_dra.cli, neuron_dra.agent.run"
AGENT_PATH = f"{RUN_PATH}, neuron_dra.agent.node"
# RSS after each step, in the order the agent takes them; the last comes with the first
# claim that carries an opaque config.
RSS_STEPS = (
    ("interpreter", ""),
    ("asyncio (and ssl)", "import asyncio"),
    ("grpc", "import grpc.aio"),
    ("kubelet protocols (generated code)", "import neuron_dra.agent.kubelet.plugin"),
    ("command line and run entry: sockets served", RUN_PATH),
    ("prometheus_client", "import prometheus_client"),
    ("the rest of the agent", AGENT_PATH),
    ("pydantic and the config schema (first claim with a config)", "import api.config"),
)


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", *args], check=True, cwd=REPO)


def install(wheel: Path, target: Path, extra: str = "") -> dict[str, Any]:
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    pip("install", "--target", str(target), "--constraint", "constraints.txt", requirement)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file() and not p.is_symlink())
    dists: dict[str, float] = {}
    for info in target.glob("*.dist-info"):
        # RECORD lists every installed file of the distribution, bytecode included.
        files = [row.split(",")[0] for row in (info / "RECORD").read_text().splitlines()]
        found = (target / f for f in files if f and not f.startswith(".."))
        total = sum(p.stat().st_size for p in found if p.is_file())
        dists[info.name.split("-")[0]] = round(total / 2**20, 1)
    return {"installed_mib": round(size / 2**20, 1), "distributions": dists}


def imports(target: Path, runs: int) -> dict[str, Any]:
    """The run path's imports from `target` alone."""
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    probe = (
        "import sys, time\n"
        "started = time.perf_counter()\n"
        f"{RUN_PATH}\n"
        "print(time.perf_counter() - started, len(sys.modules))\n"
        "print('\\n'.join(sys.modules))"
    )
    times, modules = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-S", "-c", probe],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=target,
        ).stdout.splitlines()
        seconds, count = out[0].split()
        times.append(float(seconds))
        modules = out[1:]
        assert int(count) == len(modules)
    trace = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", RUN_PATH],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=target,
    ).stderr
    rows: list[dict[str, Any]] = []
    for line in trace.splitlines():
        # "import time:       self [us] |  cumulative | imported package"
        if not line.startswith("import time:") or "[us]" in line:
            continue
        self_us, cumulative_us, module = line.removeprefix("import time:").split("|")
        rows.append(
            {
                "module": module.strip(),
                "cumulative_ms": round(int(cumulative_us) / 1000, 1),
                "self_ms": round(int(self_us) / 1000, 1),
            }
        )
    rows.sort(key=lambda r: -r["cumulative_ms"])
    return {
        "run_import_s": round(statistics.median(times), 3),
        "run_import_modules": len(modules),
        "run_imports_tools": sorted(m for m in modules if m.startswith(TOOL_MODULES)),
        "import_top": rows[:10],
    }


def rss_steps(target: Path) -> list[dict[str, Any]]:
    """VmRSS after each of RSS_STEPS, in one fresh interpreter that sees only `target`."""
    lines = [
        "def rss():",
        "    for line in open('/proc/self/status'):",
        "        if line.startswith('VmRSS:'):",
        "            return int(line.split()[1]) / 1024",
    ]
    for _, code in RSS_STEPS:
        lines += [code or "pass", "print(rss())"]
    out = subprocess.run(
        [sys.executable, "-S", "-c", "\n".join(lines)],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
        cwd=target,
    ).stdout.split()
    found, previous = [], 0.0
    for (step, _), value in zip(RSS_STEPS, map(float, out), strict=True):
        found.append(
            {"step": step, "rss_mib": round(value, 1), "added_mib": round(value - previous, 1)}
        )
        previous = value
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="import timings, median taken")
    parser.add_argument("--no-write", action="store_true", help="do not update latest.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="neuron-dra-footprint-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        agent = install(wheel, work / "agent")
        cli = install(wheel, work / "cli", "cli")
        tools = install(wheel, work / "tools", "tools")
        figures: dict[str, Any] = {
            "agent_installed_mib": agent["installed_mib"],
            "agent_distributions": len(agent["distributions"]),
            "agent_largest_mib": dict(
                sorted(agent["distributions"].items(), key=lambda kv: -kv[1])[:6]
            ),
            "image_installed_mib": cli["installed_mib"],
            "tools_installed_mib": tools["installed_mib"],
            "tools_extra_distributions": sorted(
                set(tools["distributions"]) - set(agent["distributions"])
            ),
        } | imports(work / "agent", args.runs)
        figures["rss_by_import"] = rss_steps(work / "agent")

    if not args.no_write:
        merged = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(merged | figures, indent=2) + "\n")
    scalars = {k: v for k, v in figures.items() if k not in ("import_top", "rss_by_import")}
    width = max(map(len, scalars))
    for key, value in scalars.items():
        print(f"{key:<{width}}  {value}")
    print(f"\n{'neuron-dra run imports: module':<44} {'cumulative ms':>13} {'self ms':>8}")
    for row in figures["import_top"]:
        print(f"{row['module']:<44} {row['cumulative_ms']:>13} {row['self_ms']:>8}")
    print(f"\n{'RSS after importing':<60} {'MiB':>6} {'added':>6}")
    for row in figures["rss_by_import"]:
        print(f"{row['step']:<60} {row['rss_mib']:>6} {row['added_mib']:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
