"""`make bench-scale` in miniature: the fleet benchmark runs end to end on a few nodes.

The benchmark itself asserts what each pod's claim got (a core claim cores, a whole
device claim devices); this checks that every phase produced figures, and that a full
node of the driver's layout publishes no core of its held devices and no device of its
held cores, while the layout published as before keeps them; and that kube-apiserver's
heap was profiled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_fleet_benchmark_runs_on_a_small_cluster(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "scale.py"),
            "--sizes",
            "20",
            "--layouts",
            "partitions,partitions-unordered,capacity",
            "--pods",
            "1",
            "--steady-pods",
            "3",
            "--steady-cases",
            "no claim,1 device",
            "--steady-repeats",
            "2",
            "--states",
            "full,mixed",
            "--churn-rates",
            "4",
            "--churn-cases",
            "1 device,1 core",
            "--churn-seconds",
            "2",
            "--churn-life",
            "1",
            "--heap-profile",
            "--out",
            str(out),
        ],
        check=True,
        timeout=900,
    )
    result = json.loads(out.read_text())
    cases = {
        "no claim",
        "1 device",
        "1 core",
        "4 cores of one device",
        "4 connected",
        "16 devices",
        "aws.amazon.com/neuron: 16",
    }
    for layout in ("partitions", "partitions-unordered"):
        step = result["layouts"][layout]["sizes"]["20"]
        assert set(step["empty"]) == set(step["full"]) == set(step["mixed"]) == cases, layout
        assert step["steady"]["pods_per_s"] > 0
        # The cases took turns, twice: the scheduler alone beside 1-device pods.
        turns = step["steady_cases"]
        assert list(turns) == ["no claim", "1 device"], layout
        assert [len(t) for t in turns.values()] == [2, 2], layout
        assert step["steady"] == turns["1 device"][0]
        assert all(c["pods_per_s"] > 0 for c in step["churn"])
        assert all(f["p50_ms"] > 0 for f in step["full"].values())
    # Every fourth node a trn2u (16 devices, the node device, 64 cores at LNC 2), the
    # rest trn2 (16 and 64); 18 of 20 held whole, n9 and n19 free. Held nodes keep
    # their devices and lose their cores, and a trn2u its node device.
    step = result["layouts"]["partitions"]["sizes"]["20"]
    assert step["devices_published_empty"] == 15 * 80 + 5 * 81
    assert step["fill"]["full"]["devices_published"] == 2 * 80 + 18 * 16
    # Mixed: 7 nodes held whole keep their 16 devices; 7 full of 1-core claims keep
    # their 64 cores and lose their devices; 6 free, n8 a trn2u.
    assert step["fill"]["mixed"]["devices_published"] == 7 * 16 + 7 * 64 + 5 * 80 + 81
    # Churning whole-device pods: the agent rewrites their nodes' slices where the
    # layout withdraws cores, and never as published before.
    # Whole-device pods, then core pods, each with the agent's rewrites and without: a
    # held core withdraws its device as a held device its cores.
    assert [c["case"] for c in step["churn"]] == ["1 device"] * 2 + ["1 core"] * 2
    for rewriting, still in (step["churn"][:2], step["churn"][2:]):
        assert rewriting["rewrite"] and rewriting["rewrites"] > 0
        assert rewriting["slice_writes_per_s"] > 0
        assert not still["rewrite"] and still["rewrites"] == 0
    # kube-apiserver's live heap, after publishing and in each state, with the
    # functions that hold it and the Go runtime's view of the same memory.
    for heap in (step["heap_after_publish"], step["fill"]["full"]["heap"]):
        assert 0 < heap["inuse_mib"] <= heap["runtime_mib"]["Sys"]
        assert heap["flat"] and heap["cum"]
        assert (tmp_path / heap["profile"]).stat().st_size > 0
    # Where cores are capacity, a node full of 1-core claims is its 16 devices shared
    # out 4 ways (LNC 2): 7 such nodes in the mixed state, beside 7 held whole.
    shared = result["layouts"]["capacity"]["sizes"]["20"]
    assert shared["fill"]["mixed"]["claims"] == 7 + 7 * 16 * 4
    assert set(shared["mixed"]) == cases
    before = result["layouts"]["partitions-unordered"]["sizes"]["20"]
    assert before["fill"]["full"]["devices_published"] == 1605
    assert before["devices_published_empty"] == 1605
    assert [c["rewrites"] for c in before["churn"]] == [0, 0]
