"""A change measured: two kept runs of bench/scale.py, before and after it, side by side.

`compare-NAME-before.json` and `compare-NAME-after.json` in bench/results make the
table `compare-NAME` of the fleet page (bench/tables.py): for each layout, size and
fleet state both runs measured, each case's p50 before and after and their ratio,
then what kube-apiserver and kube-scheduler held after publishing and, where the runs
profiled it, the slices decoded in kube-apiserver's heap.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
SLICES = "k8s.io/api/resource/v1.(*ResourceSlice).Unmarshal"


def compare_table(before: Obj, after: Obj) -> str:
    lines = ["| layout | nodes, state | case | p50 ms before | after | after / before |"]
    lines.append("|---|---|---|---|---|---|")
    for name, old in before["layouts"].items():
        new = after["layouts"].get(name)
        if new is None:
            continue
        for size, was in old["sizes"].items():
            now = new["sizes"].get(size)
            if now is None:
                continue
            for state in ("empty", *was.get("fill", {})):
                for case, figures in was.get(state, {}).items():
                    if case not in now.get(state, {}):
                        continue
                    a, b = figures["p50_ms"], now[state][case]["p50_ms"]
                    lines.append(
                        f"| {name} | {int(size):,}, {state} | {case} | {a:.0f} | {b:.0f} | "
                        f"{b / a:.2f} |"
                    )
            lines += [
                f"| {name} | {int(size):,}, published | {what} | {a} | {b} | {b / a:.2f} |"
                for what, a, b in _held(was, now)
            ]
    return "\n".join(lines)


def _held(was: Obj, now: Obj) -> list[tuple[str, float, float]]:
    """(what, before, after) in MiB after publishing."""
    rows = [
        (f"{component} RSS MiB", was["rss_mib_after_publish"][component], rss)
        for component, rss in now["rss_mib_after_publish"].items()
        if component in ("kube-apiserver", "kube-scheduler")
    ]
    old, new = _decoded(was.get("heap_after_publish")), _decoded(now.get("heap_after_publish"))
    if old and new:
        rows.append(("decoded slices MiB", old, new))
    return rows


def _decoded(heap: Obj | None) -> float | None:
    """MiB of decoded ResourceSlices in a kept heap profile's summary."""
    if heap is None:
        return None
    return next((float(r[2]) for r in heap["cum"] if r[0] == SLICES), None)
