"""Figures of fleet-scale.md's summary ("What the figures say"), each made from one or
two runs of bench/scale.py kept in bench/results (fleet-*.json, heap-*.json).

Registered in bench/figures.py's FIGURES beside the interleaved runs' figures, and
quoted and checked the same way, so the summary cannot keep a figure its runs no longer
give. A range over the cases is over the cases with a claim: a pod with no claim never
reaches the allocator, so it says nothing of a layout. Pure: no module of bench/ but
stats is imported, so the tests load this file alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stats import percentile

Obj = dict[str, Any]
Figure = Callable[[dict[str, Obj]], str]
NO_CLAIM = "no claim"
DECODED_SLICES = "k8s.io/api/resource/v1.(*ResourceSlice).Unmarshal"
"""The function under which kube-apiserver's heap holds the ResourceSlices it decoded."""


def _step(kept: dict[str, Obj], file: str, layout: str) -> Obj:
    """The one size a run of bench/scale.py measured `layout` at."""
    [step] = kept[file]["layouts"][layout]["sizes"].values()
    return step  # type: ignore[no-any-return]


def _size(kept: dict[str, Obj], file: str, layout: str) -> int:
    """That size: the nodes the run published."""
    [size] = kept[file]["layouts"][layout]["sizes"]
    return int(size)


def _rss(step: Obj, phase: str, component: str) -> int:
    """`component`'s RSS in MiB after publishing (`published`) or at the end of a state."""
    rss = step["rss_mib_after_publish"] if phase == "published" else step["fill"][phase]["rss_mib"]
    return int(rss[component])


def _span(values: list[float], unit: str, digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:,.{digits}f}-{high:,.{digits}f}{unit}"


def _claimed(step: Obj, state: str, exclude: tuple[str, ...] = ()) -> dict[str, float]:
    """p50 ms of each case with a claim of one state, but those in `exclude`."""
    return {
        case: figures["p50_ms"]
        for case, figures in step[state].items()
        if case != NO_CLAIM and case not in exclude
    }


def rss(file: str, layout: str, phases: tuple[str, ...], component: str) -> Figure:
    """`component`'s RSS in each phase, in MiB: "2,387 and 2,670 MiB"."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        return " and ".join(f"{_rss(step, p, component):,}" for p in phases) + " MiB"

    return figure


def rss_gib(file: str, layout: str, phases: tuple[str, ...]) -> Figure:
    """kube-apiserver's RSS over phases in GiB, as a range where there are two."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        values = [_rss(step, p, "kube-apiserver") / 1024 for p in phases]
        return _span(values, " GiB", 1) if len(values) > 1 else f"{values[0]:.1f} GiB"

    return figure


def rss_per_node(file: str, layout: str) -> Figure:
    """kube-apiserver's RSS after publishing over the nodes published, in MiB."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        per_node = _rss(step, "published", "kube-apiserver") / _size(kept, file, layout)
        return f"{per_node:.1f} MiB a node"

    return figure


def devices_published(file: str, layout: str) -> Figure:
    """The devices the fleet published, empty."""

    def figure(kept: dict[str, Obj]) -> str:
        return f"{_step(kept, file, layout)['devices_published_empty']:,}"

    return figure


def _decoded_mib(step: Obj) -> float:
    """The ResourceSlices kube-apiserver's heap held decoded after publishing, in MiB."""
    return float({row[0]: row[2] for row in step["heap_after_publish"]["cum"]}[DECODED_SLICES])


def per_device(file: str, layout: str, what: str) -> Figure:
    """kube-apiserver's RSS (`rss`), or the slices its heap holds decoded (`decoded`),
    after publishing, over the devices published, in KiB."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        mib = _rss(step, "published", "kube-apiserver") if what == "rss" else _decoded_mib(step)
        return f"{mib * 1024 / step['devices_published_empty']:.1f} KiB"

    return figure


def decoded_over_json(file: str) -> Figure:
    """How many times its JSON a published device takes decoded in kube-apiserver's
    heap, the smallest and largest over the run's layouts: decoded slices after
    publishing over the devices published, against the slices' bytes over their devices
    (the run's trn2 and UltraServer trn2u nodes in their share)."""

    def figure(kept: dict[str, Obj]) -> str:
        run = kept[file]
        weigh = {"trn2.48xlarge": 1 - run["ultraserver_share"]}
        weigh["trn2u.48xlarge"] = run["ultraserver_share"]
        times = []
        for layout, figures in run["layouts"].items():
            json_bytes = sum(w * figures["bytes_per_node"][k] for k, w in weigh.items())
            devices = sum(w * figures["devices_per_node"][k] for k, w in weigh.items())
            step = _step(kept, file, layout)
            decoded = _decoded_mib(step) * 2**20 / step["devices_published_empty"]
            times.append(decoded / (json_bytes / devices))
        return f"{min(times):.1f} to {max(times):.1f} times"

    return figure


def ratio_span(state: str, partitions: str, devices: str) -> Figure:
    """The driver's layout's p50 over whole devices only's, of each case with a claim of
    one state: the smallest and the largest, as "0.72-1.41x"."""

    def figure(kept: dict[str, Obj]) -> str:
        ours = _claimed(_step(kept, partitions, "partitions"), state)
        theirs = _claimed(_step(kept, devices, "devices"), state)
        return _span([ours[c] / theirs[c] for c in ours if c in theirs], "x", 2)

    return figure


def over_goal(file: str, states: tuple[str, ...], goal: float) -> Figure:
    """The cases with a claim whose ratio of the layouts is over `goal`, each with its
    state and ratio, as the measured table gives them."""

    def figure(kept: dict[str, Obj]) -> str:
        over = []
        for state in states:
            ours = _claimed(_step(kept, file, "partitions"), state)
            theirs = _claimed(_step(kept, file, "devices"), state)
            for case in (c for c in ours if c in theirs):
                ratio = round(ours[case] / theirs[case], 2)
                if ratio > goal:
                    name = case if ":" not in case else f"`{case}`"
                    over.append(f"{name} {state} ({ratio:.2f})")
        return " and ".join(over) if over else "none"

    return figure


def p50_span(
    file: str, layout: str, states: tuple[str, ...], exclude: tuple[str, ...] = ()
) -> Figure:
    """The smallest and largest p50 of the cases with a claim of `states`, in ms."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        values = [p for s in states for p in _claimed(step, s, exclude).values()]
        return _span(values, " ms")

    return figure


def state_ratio_span(file: str, layout: str, states: tuple[str, ...], base: str) -> Figure:
    """Each case with a claim of `states` over the same case in `base`: the smallest and
    the largest ratio, as "1.8-5.4x"."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        under = _claimed(step, base)
        ratios = [p / under[c] for s in states for c, p in _claimed(step, s).items()]
        return _span(ratios, "x", 1)

    return figure


def case_p50(file: str, layout: str, state: str, case: str) -> Figure:
    """One case's p50 in one state, in ms."""

    def figure(kept: dict[str, Obj]) -> str:
        return f"{_step(kept, file, layout)[state][case]['p50_ms']:,.0f} ms"

    return figure


def case_ratio(
    file: str,
    layout: str,
    state: str,
    case: str,
    base: str,
    *,
    base_state: str | None = None,
    digits: int = 1,
) -> Figure:
    """One case's p50 over another's of the same layout, in the same state or in
    `base_state`, as "2.5x"."""

    def figure(kept: dict[str, Obj]) -> str:
        step = _step(kept, file, layout)
        under = step[base_state or state][base]["p50_ms"]
        return f"{step[state][case]['p50_ms'] / under:.{digits}f}x"

    return figure


def claims(file: str, layout: str, state: str) -> Figure:
    """The claims allocated to fill the fleet to `state`."""

    def figure(kept: dict[str, Obj]) -> str:
        return f"{_step(kept, file, layout)['fill'][state]['claims']:,}"

    return figure


def steady(file: str, layout: str) -> Figure:
    """The pods a second the steady phase kept, of those offered."""

    def figure(kept: dict[str, Obj]) -> str:
        phase = _step(kept, file, layout)["steady"]
        return f"{phase['pods_per_s']:.2f} of {phase['offered_per_s']:.0f} pods/s"

    return figure


def steady_turns(file: str, layout: str, case: str) -> Figure:
    """The pods a second each turn of `case`'s steady phase kept, turn by turn."""

    def figure(kept: dict[str, Obj]) -> str:
        turns = _step(kept, file, layout)["steady_cases"][case]
        return " and ".join(f"{t['pods_per_s']:.2f}" for t in turns)

    return figure


def _slice_requeues(churn: Obj) -> float:
    return float(sum(v for k, v in churn["requeued"].items() if "ResourceSlice" in k))


CHURNED: dict[str, Callable[[Obj], str]] = {
    "p50 ms": lambda c: f"{c['p50_ms']:,.0f} ms",
    "p50 s": lambda c: f"{c['p50_ms'] / 1000:.1f} s",
    "pods/s": lambda c: f"{c['pods_per_s']:.2f}",
    "pods": lambda c: f"{c['pods']:,}",
    "rewrites": lambda c: f"{c['rewrites']:,}",
    "slice writes/s": lambda c: f"{c['slice_writes_per_s']:.1f}",
    "incomplete p50": lambda c: f"{percentile(c['incomplete_ms'], 0.5):,.0f} ms",
    "incomplete p99": lambda c: f"{percentile(c['incomplete_ms'], 0.99) / 1000:.1f} s",
    "slice requeues": lambda c: f"{_slice_requeues(c):,.0f}",
}
"""What a churn phase is quoted by, and how."""


def _churn(
    kept: dict[str, Obj], file: str, layout: str, case: str, offered: float
) -> dict[bool, Obj]:
    """The phases churning `case` at `offered` a second, by whether the agent rewrote."""
    return {
        c["rewrite"]: c
        for c in _step(kept, file, layout)["churn"]
        if c["offered_per_s"] == offered and c.get("case", "1 device") == case
    }


def churned(
    file: str, layout: str, offered: float, rewrite: bool, what: str, *, case: str = "1 device"
) -> Figure:
    """A figure of the churn phase of `case` pods offered at `offered` a second, the
    agent rewriting its slices for their holds or not."""

    def figure(kept: dict[str, Obj]) -> str:
        return CHURNED[what](_churn(kept, file, layout, case, offered)[rewrite])

    return figure


def rewrite_cost(file: str, case: str, offered: float) -> Figure:
    """The p50 of a churn with the agent's rewrites over the same churn without them."""

    def figure(kept: dict[str, Obj]) -> str:
        phases = _churn(kept, file, "partitions", case, offered)
        return f"{phases[True]['p50_ms'] / phases[False]['p50_ms']:.2f}x"

    return figure


F5000 = "fleet-5000.json"
S5000 = "steady-5000-1.json"
ST5000 = "states-5000-138-1.json"
F1000 = "fleet-1000-partitions.json"
D1000 = "fleet-1000-devices.json"
C137 = "churn-1000-1.json"
C138 = "churn-1000-138-1.json"
FLEET_FIGURES: dict[str, Figure] = {
    "rss-5000-apiserver": rss(F5000, "partitions", ("published", "full"), "kube-apiserver"),
    "rss-5000-scheduler": rss(F5000, "partitions", ("published", "full"), "kube-scheduler"),
    "rss-5000-devices": rss(F5000, "devices", ("published", "full"), "kube-apiserver"),
    "devices-5000": devices_published(F5000, "partitions"),
    "rss-5000-a-node": rss_per_node(F5000, "partitions"),
    "rss-5000-a-device": per_device(F5000, "partitions", "rss"),
    "decoded-5000-a-device": per_device(F5000, "partitions", "decoded"),
    "rss-1000-betas": rss(F1000, "partitions", ("published",), "kube-apiserver"),
    "rss-1000-betas-a-node": rss_per_node(F1000, "partitions"),
    "rss-2000-betas": rss("fleet-2000.json", "partitions", ("published",), "kube-apiserver"),
    "rss-2000-betas-a-node": rss_per_node("fleet-2000.json", "partitions"),
    "decoded-over-json": decoded_over_json("heap-1000-v1.json"),
    "ratios-5000-empty": ratio_span("empty", F5000, F5000),
    "ratios-5000-full": ratio_span("full", F5000, F5000),
    "p50s-5000": p50_span(F5000, "partitions", ("empty", "full")),
    "1-core-5000-empty": case_p50(F5000, "partitions", "empty", "1 core"),
    "1-core-5000-full": case_p50(F5000, "partitions", "full", "1 core"),
    "over-goal-5000": over_goal(F5000, ("empty", "full"), 1.25),
    "core-over-device-5000-empty": case_ratio(F5000, "partitions", "empty", "1 core", "1 device"),
    "core-over-device-5000-full": case_ratio(F5000, "partitions", "full", "1 core", "1 device"),
    "steady-5000": steady(F5000, "partitions"),
    "steady-turns-5000-no-claim": steady_turns(S5000, "partitions", NO_CLAIM),
    "steady-turns-5000-1-device": steady_turns(S5000, "partitions", "1 device"),
    "steady-turns-5000-devices-no-claim": steady_turns(S5000, "devices", NO_CLAIM),
    "steady-turns-5000-devices-1-device": steady_turns(S5000, "devices", "1 device"),
    "steady-5000-devices": steady(F5000, "devices"),
    **{
        f"core-full-5000-{slug}": case_ratio(
            ST5000, "partitions", "core-full-1", case, "1 device", base_state="full", digits=2
        )
        for slug, case in (("1-core", "1 core"), ("1-device", "1 device"))
    },
    "empty-5000-1-core": case_ratio(ST5000, "partitions", "empty", "1 core", "1 device", digits=2),
    "claims-5000-core-full": claims(ST5000, "partitions", "core-full-1"),
    "rss-5000-core-full": rss(ST5000, "partitions", ("full", "core-full-1"), "kube-apiserver"),
    "steady-5000-138": steady(ST5000, "partitions"),
    "ratios-1000-full": ratio_span("full", F1000, D1000),
    "ratios-1000-empty": ratio_span("empty", F1000, D1000),
    "steady-1000": steady(F1000, "partitions"),
    "steady-1000-devices": steady(D1000, "devices"),
    "core-full-over-full": state_ratio_span(
        F1000, "partitions", ("core-full-1", "core-full-4"), "full"
    ),
    "p50s-core-full-1": p50_span(F1000, "partitions", ("core-full-1",)),
    "p50s-full": p50_span(F1000, "partitions", ("full",)),
    "p50s-core-full-4": p50_span(F1000, "partitions", ("core-full-4",)),
    "claims-core-full-1": claims(F1000, "partitions", "core-full-1"),
    "claims-core-full-4": claims(F1000, "partitions", "core-full-4"),
    "rss-1000-core-full": rss_gib(F1000, "partitions", ("core-full-1", "core-full-4")),
    "rss-1000-full": rss_gib(F1000, "partitions", ("full",)),
    "p50s-mixed": p50_span(F1000, "partitions", ("mixed",), ("aws.amazon.com/neuron: 16",)),
    "mixed-16": case_p50(F1000, "partitions", "mixed", "aws.amazon.com/neuron: 16"),
    "churn-2-p50-rewriting": churned(F1000, "partitions", 2, True, "p50 ms"),
    "churn-2-p50": churned(F1000, "partitions", 2, False, "p50 ms"),
    "churn-2-rewrites": churned(F1000, "partitions", 2, True, "rewrites"),
    "churn-2-pods": churned(F1000, "partitions", 2, True, "pods"),
    "churn-2-writes": churned(F1000, "partitions", 2, True, "slice writes/s"),
    "churn-2-incomplete": churned(F1000, "partitions", 2, True, "incomplete p50"),
    "churn-2-requeued": churned(F1000, "partitions", 2, True, "slice requeues"),
    "churn-cores-8-137": rewrite_cost(C137, "1 core", 8),
    "churn-cores-8-138": rewrite_cost(C138, "1 core", 8),
    "churn-cores-8-pods-137": churned(C137, "partitions", 8, True, "pods/s", case="1 core"),
    "churn-cores-8-pods-137-kept": churned(C137, "partitions", 8, False, "pods/s", case="1 core"),
    "churn-cores-8-pods-138": churned(C138, "partitions", 8, True, "pods/s", case="1 core"),
    "churn-cores-8-pods-138-kept": churned(C138, "partitions", 8, False, "pods/s", case="1 core"),
    "churn-8-pods-per-s-rewriting": churned(F1000, "partitions", 8, True, "pods/s"),
    "churn-8-pods-per-s": churned(F1000, "partitions", 8, False, "pods/s"),
    "churn-8-pods-per-s-devices": churned(D1000, "devices", 8, False, "pods/s"),
    "churn-8-p50-s-rewriting": churned(F1000, "partitions", 8, True, "p50 s"),
    "churn-8-p50-s": churned(F1000, "partitions", 8, False, "p50 s"),
    "churn-8-writes": churned(F1000, "partitions", 8, True, "slice writes/s"),
    "churn-8-incomplete": churned(F1000, "partitions", 8, True, "incomplete p99"),
    "churn-8-requeued": churned(F1000, "partitions", 8, True, "slice requeues"),
    "churn-8-p50": churned(F1000, "partitions", 8, False, "p50 ms"),
    "churn-8-p50-rewriting": churned(F1000, "partitions", 8, True, "p50 ms"),
}
