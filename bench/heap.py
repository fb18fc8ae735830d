"""Where kube-apiserver's memory goes: its live heap by the code that allocated it.

`heap(cluster, out)` asks the API server (which must run with `--profiling=true`)
for a heap profile taken right after a garbage collection, keeps it at `out`, and
returns what `go tool pprof` makes of it: the live heap in MiB, the functions that
allocated most of it (flat: allocated there; cum: there and below), and the Go
runtime's own counters (live heap against what the process holds from the system),
which tell the part of the RSS that is the collector's headroom from the part that
is objects.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from neuron_dra_harness.cluster import Cluster

Obj = dict[str, Any]
ROWS = 30
_ROW = re.compile(
    r"^\s*(?P<flat>[\d.]+)(?:MB)?\s+[\d.]+%\s+[\d.]+%\s+(?P<cum>[\d.]+)(?:MB)?\s+[\d.]+%\s+"
    r"(?P<name>.+)$"
)
_TOTAL = re.compile(r"of (?P<total>[\d.]+)MB total")
_MEMSTAT = re.compile(r"^# (?P<name>HeapAlloc|HeapInuse|HeapIdle|HeapReleased|Sys|NextGC) = (\d+)")
MIB = 2**20
# `go tool pprof -unit=MB` prints mebibytes: pprof's "MB" is 1 << 20 bytes
# (github.com/google/pprof internal/measurement/measurement.go, UnitTypes:
# {"MB", []string{"mb", "mbyte", "megabyte"}, float64(1 << 20)}), so its figures are
# MiB as printed.


def heap(cluster: Cluster, out: Path) -> Obj:
    """kube-apiserver's live heap after a collection, kept at `out` and summed up."""
    out.write_bytes(_get(cluster, "/debug/pprof/heap?gc=1"))
    runtime = {
        m["name"]: round(int(m[2]) / MIB)
        for line in _get(cluster, "/debug/pprof/heap?debug=1").decode().splitlines()
        if (m := _MEMSTAT.match(line))
    }
    flat, total = _top(cluster, out, "-flat")
    cum, _ = _top(cluster, out, "-cum")
    return {
        "profile": out.name,
        "inuse_mib": total,
        "runtime_mib": runtime,
        "flat": flat,
        "cum": cum,
    }


def _get(cluster: Cluster, path: str) -> bytes:
    request = urllib.request.Request(
        cluster.server + path, headers={"Authorization": f"Bearer {cluster.token}"}
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=120) as reply:
        body: bytes = reply.read()
    return body


def _top(cluster: Cluster, profile: Path, order: str) -> tuple[list[list[Any]], int]:
    """pprof's top rows in `order` as [function, flat MiB, cum MiB], and the total."""
    text = subprocess.run(
        [
            "go",
            "tool",
            "pprof",
            "-top",
            order,
            "-sample_index=inuse_space",
            "-unit=MB",
            f"-nodecount={ROWS}",
            str(cluster.binaries.kube_apiserver),
            str(profile),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse_top(text)


def parse_top(text: str) -> tuple[list[list[Any]], int]:
    """The rows of `go tool pprof -top -unit=MB` as [function, flat MiB, cum MiB], and
    the total it shows, rounded to the MiB: pprof's MB is a MiB already."""
    rows = [
        [m["name"].strip(), round(float(m["flat"])), round(float(m["cum"]))]
        for line in text.splitlines()
        if (m := _ROW.match(line))
    ]
    total = _TOTAL.search(text)
    return rows, round(float(total["total"])) if total else 0
