"""networkNodeLayer1..4: the Node's EC2 topology labels as device attributes."""

from __future__ import annotations

from consts import LABEL_NETWORK_NODE_LAYER_PREFIX
from neuron_dra.resources.nodetopology import NodeTopology, from_labels

L = LABEL_NETWORK_NODE_LAYER_PREFIX


def test_the_three_layers_eks_sets_become_three_attributes() -> None:
    labels = {f"{L}1": "nn-aaa", f"{L}2": "nn-bbb", f"{L}3": "nn-ccc", "other": "x"}
    topology, problems = from_labels(labels)
    assert problems == ()
    assert topology.attributes() == {
        "networkNodeLayer1": "nn-aaa",
        "networkNodeLayer2": "nn-bbb",
        "networkNodeLayer3": "nn-ccc",
    }


def test_a_fourth_layer_is_published_where_the_node_has_one() -> None:
    labels = {f"{L}{n}": f"nn-{n}" for n in (1, 2, 3, 4)}
    topology, _ = from_labels(labels)
    assert topology.attributes()["networkNodeLayer4"] == "nn-4"
    assert len(topology.attributes()) == 4


def test_no_labels_no_attributes() -> None:
    assert from_labels({}) == (NodeTopology(), ())
    assert from_labels(None) == (NodeTopology(), ())
    assert NodeTopology().attributes() == {}


def test_only_the_layers_labelled_are_published() -> None:
    topology, problems = from_labels({f"{L}3": "nn-ccc", f"{L}5": "nn-e"})
    assert problems == ()
    assert topology.attributes() == {"networkNodeLayer3": "nn-ccc"}


def test_a_value_that_is_no_label_value_is_left_out_with_a_reason() -> None:
    labels = {f"{L}1": "", f"{L}2": "x" * 64, f"{L}3": "bad value", f"{L}4": "nn-d"}
    topology, problems = from_labels(labels)
    assert topology.attributes() == {"networkNodeLayer4": "nn-d"}
    assert len(problems) == 3
    assert problems[0] == (
        f"Node label {L}1='' is not a label value of 1 to 63 characters: "
        "networkNodeLayer1 is not published"
    )
    assert "xxx...'" in problems[1]
    assert "networkNodeLayer3" in problems[2]


def test_the_longest_label_value_fits_a_string_attribute() -> None:
    topology, problems = from_labels({f"{L}1": "n" * 63})
    assert problems == ()
    assert topology.attributes() == {"networkNodeLayer1": "n" * 63}


def test_changed_labels_give_a_different_topology() -> None:
    before, _ = from_labels({f"{L}3": "nn-ccc"})
    after, _ = from_labels({f"{L}3": "nn-ddd"})
    assert before != after
    assert before == from_labels({f"{L}3": "nn-ccc"})[0]
