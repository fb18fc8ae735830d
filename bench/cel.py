"""Device selector throughput: evaluations per second of compiled selectors.

Devices are the driver's own ResourceSlice output for simulated nodes of
several instance types; each selector is compiled once and evaluated against
every device, as a scheduler (or an offline simulation) does. Prints evals/s
per selector for the fast path and the general (celpy) path, and merges
`cel_evals_per_s` (fast path, all selectors) into bench/results/latest.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import Counters, FakeUltraServer, build_fake_node
from neuron_dra.resources.slices import SliceOptions, build_slices
from neuron_dra.tools.cel import DeviceView, Selector, compile_selector

REPO = Path(__file__).resolve().parents[1]

RESULTS = REPO / "bench" / "results" / "latest.json"

# The selectors of the documentation and examples/specs.
SELECTORS = [
    "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'",
    "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge' && "
    "device.attributes['neuron.aws.com'].neuronDriverVersion == '2.24.7.0'",
    "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'",
    "device.attributes['neuron.aws.com'].resourceType == 'neuron_device'",
]

NODES: list[tuple[str, FakeUltraServer | None]] = [
    ("trn2.48xlarge", None),
    ("trn2u.48xlarge", FakeUltraServer()),
    ("trn1.32xlarge", None),
    ("inf2.48xlarge", None),
    ("inf1.24xlarge", None),
]


def devices() -> list[DeviceView]:
    views: list[DeviceView] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (instance_type, ultraserver) in enumerate(NODES):
            root = build_fake_node(
                Path(tmp) / str(i), instance_type, ultraserver=ultraserver, counters=Counters.NONE
            )
            for slice_ in build_slices(discover(root).inventory, SliceOptions(f"node-{i}")):
                spec = slice_["spec"]
                views += [DeviceView.from_slice_device(spec["driver"], d) for d in spec["devices"]]
    return views


def rate(selector: Selector, views: list[DeviceView], seconds: float, general: bool) -> float:
    evaluate = selector.matches_general if general else selector.matches
    count, start = 0, time.perf_counter()
    while True:
        for view in views:
            evaluate(view)
        count += len(views)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per selector and path")
    parser.add_argument("--no-write", action="store_true", help="do not update latest.json")
    args = parser.parse_args()

    views = devices()
    selectors = [compile_selector(s) for s in SELECTORS]
    print(f"{len(views)} devices from {len(NODES)} simulated nodes")
    print(f"{'fast evals/s':>13} {'celpy evals/s':>14}  selector")
    total_fast = total_general = 0.0
    for selector in selectors:
        assert selector.fast is not None, selector.expression
        fast = rate(selector, views, args.seconds, general=False)
        general = rate(selector, views, args.seconds / 4, general=True)
        # Overall = harmonic combination: time per evaluation averaged over the selectors.
        total_fast += 1 / fast
        total_general += 1 / general
        print(f"{fast:13,.0f} {general:14,.0f}  {' '.join(selector.expression.split())}")
    overall = len(selectors) / total_fast
    overall_general = len(selectors) / total_general
    print(f"{overall:13,.0f} {overall_general:14,.0f}  overall")

    if not args.no_write:
        result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        result["cel_evals_per_s"] = round(overall)
        result["cel_general_evals_per_s"] = round(overall_general)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
