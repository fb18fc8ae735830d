"""What the API server serves, learned by dry runs.

A server whose feature gate is off drops the gated fields without a word, and
releases validate shared counters differently: Kubernetes 1.34 wants them beside
the devices that consume them, 1.35 and later refuse that and want them in a
slice of their own. So the driver asks the server itself: it dry-run-creates
the very slices it would publish, in each layout, and looks at what comes back.
Versions are never compared: a gate can be on or off in any release.

Judging the answers and wording the decisions are pure (`judge`,
`choose_layout`, `log_lines`); only the coroutines talk to the server, through
the Kube client they are given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from consts import DRIVER_NAME, TAINT_UNHEALTHY
from neuron_dra.agent.apiclient.kube import ApiError, Json, Kube
from neuron_dra.agent.objects.slice import ResourceSlice
from neuron_dra.agent.objects.slice import decode as decode_slice
from neuron_dra.resources.limits import CounterLayout
from neuron_dra.resources.slices import UltraServerDevices
from neuron_dra.resources.taints import INFORMATIONAL

log = logging.getLogger(__name__)

# Newest first: a 1.34 server with counters refuses the own-slice layout, so trying it
# first costs that release one refused dry run; 1.35+ need no second try.
LAYOUT_PREFERENCE = (CounterLayout.OWN_SLICE, CounterLayout.BESIDE_DEVICES)

LAYOUT_WORDS = {
    CounterLayout.OWN_SLICE: "counters in their own slice",
    CounterLayout.BESIDE_DEVICES: "counters beside devices",
    None: "no shared counters",
}
UNKNOWN_VERSION = "(version unknown)"
_NODE_ONLY = (
    "the API server drops shared counters (DRAPartitionableDevices off): publishing only the "
    "whole-node device; use --ultraserver-devices=devices for single devices"
)
_NO_CORES = (
    "the API server drops shared counters (DRAPartitionableDevices off): NeuronCores are not "
    "published as devices, whole devices only"
)
_CORES = "publishing each logical NeuronCore as a device, drawing on its device's counter"
_NO_TAINTS = "the API server drops device taints: unhealthy devices are withdrawn"
_TAINTS = "the API server serves device taints: unhealthy devices are tainted"
_NO_NOTICES = (
    "the API server drops or refuses informational device taints (effect None, "
    "Kubernetes 1.35+ with DRADeviceTaints): unwatched devices, corrected ECC errors and "
    "slow heartbeats are logged and counted only"
)
_NOTICES = (
    "the API server serves informational device taints: unwatched devices, corrected ECC "
    "errors and slow heartbeats are tainted with effect None"
)


class Answer(StrEnum):
    """How the server took one layout's slices."""

    KEPT = "kept"  # every slice accepted, its counters intact
    DROPPED = "dropped"  # accepted, with the counters dropped (DRAPartitionableDevices off)
    REFUSED = "refused"  # a slice refused as invalid: not this release's layout


@dataclass(frozen=True)
class Uses:
    """What the node's slices use, as the probes decided."""

    mode: UltraServerDevices = UltraServerDevices.BOTH
    layout: CounterLayout | None = None  # None: the pool has no shared counters
    taints: bool = True
    cores: bool = False  # logical NeuronCores published as devices
    notices: bool = True  # informational taints (effect None) kept


# --- pure decisions -----------------------------------------------------------


def judge(sent: Sequence[ResourceSlice], returned: Sequence[ResourceSlice | None]) -> Answer:
    """The answer to dry-run creates of `sent`, given what came back; None: refused.

    Counters are kept when every counter set and every device's consumption comes
    back; a server with DRAPartitionableDevices off returns the slices without them.
    """
    if len(returned) < len(sent) or any(r is None for r in returned):
        return Answer.REFUSED
    kept = all(
        r is not None and _counters(s) == _counters(r) for s, r in zip(sent, returned, strict=False)
    )
    return Answer.KEPT if kept else Answer.DROPPED


def choose_layout(answers: Mapping[CounterLayout, Answer]) -> CounterLayout | None:
    """The preferred layout whose slices kept their counters; None: counters not served."""
    return next((lay for lay in LAYOUT_PREFERENCE if answers.get(lay) is Answer.KEPT), None)


def accepted_layout(answers: Mapping[CounterLayout, Answer]) -> CounterLayout | None:
    """The preferred layout the server took at all, counters kept or not."""
    taken = (Answer.KEPT, Answer.DROPPED)
    return next((lay for lay in LAYOUT_PREFERENCE if answers.get(lay) in taken), None)


def log_lines(
    version: str, pool: str, before: Uses | None, after: Uses, *, auto: bool, cores: bool = False
) -> list[tuple[int, str]]:
    """(level, message) for what a probe decided; `before` None: the first probe.

    A layout change gets one line naming the server version and both layouts.
    `auto`: the operator left the UltraServer devices to the driver. `cores`: the
    operator wants NeuronCores published where they can be.
    """
    lines: list[tuple[int, str]] = []
    node_only = auto and after.mode is UltraServerDevices.NODE
    if before is None and node_only:
        lines.append((logging.WARNING, _NODE_ONLY))
    elif before is None and after.layout is not None:
        words = LAYOUT_WORDS[after.layout]
        lines.append(
            (
                logging.INFO,
                f"API server {version} serves shared counters: publishing pool {pool} with {words}",
            )
        )
    elif before is not None and after.layout != before.layout:
        lines.append(
            (
                logging.WARNING if after.layout is None else logging.INFO,
                f"API server {version} serves {LAYOUT_WORDS[after.layout]}: re-laying pool {pool} "
                f"(was: {LAYOUT_WORDS[before.layout]})"
                + ("; publishing only the whole-node device" if node_only else ""),
            )
        )
    if cores and after.cores != (before.cores if before is not None else None):
        if after.cores:
            lines.append((logging.INFO, _CORES))
        elif after.layout is None:
            lines.append((logging.WARNING, _NO_CORES))
        else:
            lines.append(
                (
                    logging.WARNING,
                    f"NeuronCores are not published as devices: with "
                    f"{LAYOUT_WORDS[after.layout]} they break a "
                    "ResourceSlice limit",
                )
            )
    if not after.taints and (before is None or before.taints):
        lines.append((logging.WARNING, _NO_TAINTS))
    elif after.taints and before is not None and not before.taints:
        lines.append((logging.INFO, _TAINTS))
    if after.notices != (before.notices if before is not None else True):
        lines.append((logging.INFO, _NOTICES if after.notices else _NO_NOTICES))
    return lines


def _counters(piece: ResourceSlice) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The counter sets a slice defines and the (device, set) pairs its devices consume."""
    uses = sorted((d.name, counter_set) for d in piece.devices for counter_set in d.counter_sets)
    return tuple(sorted(piece.shared_counters)), tuple(uses)


# --- asking the server -----------------------------------------------------------


async def server_version(kube: Kube) -> str:
    """The API server's gitVersion, for the log; raises ApiError when it gives no answer."""
    try:
        return await kube.server_version() or UNKNOWN_VERSION
    except ApiError as err:
        if err.no_answer:
            raise
        return UNKNOWN_VERSION


async def probe_counter_layout(
    kube: Kube, build: Callable[[CounterLayout], list[Json]]
) -> dict[CounterLayout, Answer]:
    """Each layout's answer, in preference order, up to the first that keeps its counters.

    `build` gives the slices to publish in a layout. Raises ApiError when the
    server gives no answer, so the caller retries rather than decide on nothing.
    """
    answers: dict[CounterLayout, Answer] = {}
    for layout in LAYOUT_PREFERENCE:
        answers[layout] = answer = await _dry_run(kube, build(layout), layout)
        if answer is Answer.KEPT:
            break
    return answers


async def _dry_run(kube: Kube, slices: Sequence[Json], layout: CounterLayout) -> Answer:
    returned: list[ResourceSlice | None] = []
    for body in slices:
        try:
            returned.append(decode_slice(await kube.create_resource_slice(body, dry_run=True)))
        except ApiError as err:
            if err.no_answer:
                raise
            # Expected on every release but one: a 422 names the rule this layout breaks.
            log.info("the API server refuses %s: %s", LAYOUT_WORDS[layout], err)
            returned.append(None)
            break
    return judge([decode_slice(body) for body in slices], returned)


def taint_probe(node: str, effect: str = "NoSchedule") -> Json:
    """The slice `probe_taints` dry-run-creates: one device tainted with `effect`.

    In the node's own pool: a dry run passes admission, and the admission policy lets
    the plugin write no other pool. Never stored, so the published pool is untouched.
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{DRIVER_NAME}-probe-"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "probe",
                    "taints": [{"key": TAINT_UNHEALTHY, "value": "probe", "effect": effect}],
                }
            ],
        },
    }


async def probe_taints(kube: Kube, node: str) -> bool:
    """Whether the server keeps device taints (DRADeviceTaints), from a dry-run probe slice."""
    try:
        created = await kube.create_resource_slice(taint_probe(node), dry_run=True)
    except ApiError as err:
        if err.no_answer:
            raise  # the caller retries
        log.warning("probe for ResourceSlice taints refused, assuming not served: %s", err)
        return False
    return any(d.taints for d in decode_slice(created).devices)


async def probe_informational_taints(kube: Kube, node: str) -> bool:
    """Whether the server keeps device taints of effect None, from a dry-run probe slice.

    Kubernetes 1.35 added the effect: 1.34 refuses it (422, unsupported value) where
    it keeps taints at all, and a server with DRADeviceTaints off drops every taint.
    """
    try:
        created = await kube.create_resource_slice(taint_probe(node, INFORMATIONAL), dry_run=True)
    except ApiError as err:
        if err.no_answer:
            raise  # the caller retries
        # Expected on 1.34: the decision's own line (`log_lines`) is the one said.
        log.debug("the API server refuses informational device taints: %s", err)
        return False
    devices = decode_slice(created).devices
    return any(t.effect == INFORMATIONAL for d in devices for t in d.taints)
