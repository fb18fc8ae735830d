"""PodGroups in the simulator: a gang is placed whole in one topology domain, or not at all."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuron_dra.tools.simulate import Cluster, InputError, Outcome, simulate, simulated_nodes

REPO = Path(__file__).resolve().parents[3]
GANG = REPO / "examples" / "specs" / "podgroup" / "us-4-node-gang.yaml"
SERVER = "neuron.amazonaws.com/ultraserver-server-id-4"


def run(paths: list[Path], taken: Sequence[tuple[str, str]] = ()) -> list[Outcome]:
    cluster = Cluster(simulated_nodes([("trn2u.48xlarge", 8)]), {})
    for node, device in taken:
        cluster.take(node, device, "test")
    return simulate(paths, cluster)


def test_a_gang_that_fits_lands_whole_on_one_ultraserver() -> None:
    outcomes = run([GANG])
    assert [o.node for o in outcomes] == [f"trn2u.48xlarge-{i}" for i in range(4)]
    assert {o.claim.pod_group for o in outcomes} == {"default/us-4-node-gang"}


def test_a_gang_that_does_not_fit_on_the_first_ultraserver_takes_the_second() -> None:
    outcomes = run([GANG], [("trn2u.48xlarge-3", "neurondevice0")])
    assert [o.node for o in outcomes] == [f"trn2u.48xlarge-{i}" for i in range(4, 8)]


def test_a_gang_one_member_short_places_none_and_says_why() -> None:
    busy = [("trn2u.48xlarge-3", "neurondevice0"), ("trn2u.48xlarge-7", "neurondevice0")]
    outcomes = run([GANG], busy)
    assert not any(o.allocated for o in outcomes)
    held = (
        "1 device matches the selectors, 0 free (1 held through shared counters by "
        "allocated devices), fewer than the 1 requested"
    )
    for outcome in outcomes:
        assert outcome.reasons == [
            "PodGroup default/us-4-node-gang (gang.minCount 4): at most 3 of its 4 pods fit "
            f"at once on nodes sharing {SERVER}, so none is placed",
            f"{SERVER}=us-0: pod default/us-4-node-gang-3: trn2u.48xlarge-3: {held}",
            f"{SERVER}=us-1: pod default/us-4-node-gang-3: trn2u.48xlarge-7: {held}",
        ]


def test_without_its_podgroup_the_same_pods_bind_where_they_fit(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d and d["kind"] != "PodGroup"]
    for doc in docs:
        if doc["kind"] == "Pod":
            doc["spec"].pop("schedulingGroup")
    path = tmp_path / "loose.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    busy = [("trn2u.48xlarge-3", "neurondevice0"), ("trn2u.48xlarge-7", "neurondevice0")]
    assert [o.allocated for o in run([path], busy)] == [True, True, True, False]


def test_a_pod_joining_a_podgroup_not_among_the_inputs_is_refused(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d and d["kind"] != "PodGroup"]
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    with pytest.raises(InputError, match="joins PodGroup default/us-4-node-gang, which is not"):
        run([path])


def test_a_gang_with_fewer_pods_than_its_min_count_waits(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d]
    docs = [d for d in docs if d["metadata"]["name"] != "us-4-node-gang-3" or d["kind"] != "Pod"]
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    outcomes = run([path])
    assert len(outcomes) == 3 and not any(o.allocated for o in outcomes)
    assert outcomes[0].reasons == [
        "PodGroup default/us-4-node-gang (gang.minCount 4): 3 pods among the inputs; the "
        "scheduler waits for the rest and places none"
    ]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"gang": {"minCount": 0}}, "minCount must be a positive integer"),
        ({}, "needs exactly one of basic and gang"),
        ({"basic": {}, "gang": {"minCount": 1}}, "needs exactly one of basic and gang"),
    ],
)
def test_a_bad_podgroup_is_refused(tmp_path: Path, policy: dict[str, Any], message: str) -> None:
    docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "PodGroup":
            doc["spec"]["schedulingPolicy"] = policy
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    with pytest.raises(InputError, match=message):
        run([path])


def test_a_basic_podgroup_places_each_pod_on_its_own(tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(GANG.read_text()) if d]
    for doc in docs:
        if doc["kind"] == "PodGroup":
            doc["spec"] = {"schedulingPolicy": {"basic": {}}}
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    busy = [("trn2u.48xlarge-3", "neurondevice0"), ("trn2u.48xlarge-7", "neurondevice0")]
    assert [o.allocated for o in run([path], busy)] == [True, True, True, False]
