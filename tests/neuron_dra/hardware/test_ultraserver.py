"""UltraServer membership as the Neuron driver shows it in /sys/class/neuron_device.

Two layouts: nodes that elect their UltraServer (trn2u, trn3p) show the ids of
their units of 2 and 4 nodes (`server_id_2/4`, `node_id_2/4`); trn3 nodes placed
by their reservation show `reservation_id`, `node_id` and `node_cnt`. Both list
the runtime's modes in `ultraserver_mode` (X4=1, X2H=2, X2V=3, X1=4).
"""

from __future__ import annotations

import pytest

from neuron_dra.hardware.discovery import Discovery, discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.inventory import UltraServer
from neuron_dra.resources.nodelabels import ultraserver_labels
from tests.sysfs_tree import FakeNode, write

CLASS = "sys/class/neuron_device"


def messages(result: Discovery) -> dict[str, str]:
    return {f.path: f.message for f in result.findings}


@pytest.mark.parametrize("instance_type", ["trn3.48xlarge", "trn3-dev0.48xlarge"])
def test_a_reservation_of_four_is_the_unit_of_four(fake_node: FakeNode, instance_type: str) -> None:
    root = fake_node(instance_type, ultraserver=FakeUltraServer("0000004005590728", 2))
    assert not (root / CLASS / "server_id_4").exists()
    result = discover(root)
    assert result.findings == ()
    assert result.inventory.ultraserver == UltraServer(
        server_id_2=None,
        server_id_4="0000004005590728",
        node_id_2=None,
        node_id_4=2,
        modes=(1, 4),  # X2V is offered, but no sysfs file names a pair: not advertised
        runtime_modes=(1, 3, 4),
        reservation_id="0000004005590728",
    )


def test_a_reservation_of_two_is_the_unit_of_two(fake_node: FakeNode) -> None:
    root = fake_node("trn3.48xlarge", ultraserver=FakeUltraServer("r-17", 1, nodes=2))
    us = discover(root).inventory.ultraserver
    assert us is not None
    assert (us.unit(2), us.unit(4), us.modes, us.runtime_modes) == (
        ("r-17", 1),
        None,
        (1, 2),
        (3, 4),
    )
    assert us.runtime_mode(2) == 3  # the pair is joined by its vertical links
    assert us.reservation_id == "r-17"


def test_trn3p_elects_its_ultraserver_like_trn2u(fake_node: FakeNode) -> None:
    root = fake_node("trn3p.48xlarge", ultraserver=FakeUltraServer("us-9", 2))
    assert not (root / CLASS / "reservation_id").exists()
    us = discover(root).inventory.ultraserver
    assert us is not None
    assert (us.unit(4), us.unit(2), us.reservation_id) == (("us-9", 2), ("us-9-1", 0), None)


@pytest.mark.parametrize(
    ("node_cnt", "node_id", "reservation"),
    [("1", "0", "0000004005590728"), ("4", "-1", "r-1"), ("4", "0", "0000000000000000")],
)
def test_a_node_outside_any_multi_node_unit_has_no_membership(
    fake_node: FakeNode, node_cnt: str, node_id: str, reservation: str
) -> None:
    root = fake_node("trn3.48xlarge")
    write(root, f"{CLASS}/node_cnt", node_cnt + "\n")
    write(root, f"{CLASS}/node_id", node_id + "\n")
    write(root, f"{CLASS}/reservation_id", reservation + "\n")
    result = discover(root)
    assert result.inventory.ultraserver is None
    assert messages(result)["/sys/class/neuron_device"] == (
        f"not in a unit of 2 or 4 nodes (node_cnt {node_cnt}, node_id {node_id}, "
        f"reservation_id {reservation}): whole-node device withheld"
    )


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        (
            "node_id",
            "busy\n",
            "busy (the Neuron driver is reconfiguring); ignored until it settles",
        ),
        ("reservation_id", "ab/cd\n", "invalid value 'ab/cd': not usable as a label value"),
        ("node_cnt", "four\n", "invalid value 'four': not an integer from -1 to 64"),
    ],
)
def test_unreadable_reservation_files_withhold_membership(
    fake_node: FakeNode, file: str, text: str, message: str
) -> None:
    root = fake_node("trn3.48xlarge")
    write(root, f"{CLASS}/{file}", text)
    result = discover(root)
    assert result.inventory.ultraserver is None
    found = messages(result)
    assert found[f"/{CLASS}/{file}"].startswith(message)
    assert found["/sys/class/neuron_device"] == (
        "UltraServer membership unknown: whole-node device withheld"
    )


def test_missing_reservation_file_withholds_membership(fake_node: FakeNode) -> None:
    root = fake_node("trn3.48xlarge")
    (root / CLASS / "node_cnt").unlink()
    result = discover(root)
    assert result.inventory.ultraserver is None
    assert messages(result)["/sys/class/neuron_device/node_cnt"] == "missing"


def test_an_elected_pair_without_a_unit_of_four(fake_node: FakeNode) -> None:
    # What the driver shows after a lame-duck election: a 2-node UltraServer.
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-2", 1, modes="2,4"))
    write(root, f"{CLASS}/server_id_4", "0000000000000000\n")
    write(root, f"{CLASS}/node_id_4", "-1\n")
    result = discover(root)
    assert result.findings == ()
    us = result.inventory.ultraserver
    assert us is not None
    assert (us.unit(4), us.unit(2), us.modes) == (None, ("us-2-0", 1), (1, 2))
    assert us.runtime_mode(2) == 2


def test_modes_name_node_counts_the_runtime_modes_allow(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 0, modes="1,3,4"))
    us = discover(root).inventory.ultraserver
    assert us is not None
    assert (us.modes, us.runtime_modes) == ((1, 2, 4), (1, 3, 4))
    assert [us.runtime_mode(n) for n in (4, 2, 1)] == [1, 3, 4]


def test_labels_of_a_reservation_node_name_its_one_unit(fake_node: FakeNode) -> None:
    root = fake_node("trn3.48xlarge", ultraserver=FakeUltraServer("r-5", 3))
    labels = ultraserver_labels(discover(root).inventory)
    assert labels == {
        "neuron.amazonaws.com/ultraserver-mode": "1_4",
        "neuron.amazonaws.com/ultraserver-server-id-2": None,
        "neuron.amazonaws.com/ultraserver-server-id-4": "r-5",
        "neuron.amazonaws.com/ultraserver-node-id-2": None,
        "neuron.amazonaws.com/ultraserver-node-id-4": "3",
    }


def test_fake_reservations_are_two_or_four_nodes(fake_node: FakeNode) -> None:
    with pytest.raises(ValueError, match="cannot be in an UltraServer of 3 nodes"):
        fake_node("trn3.48xlarge", ultraserver=FakeUltraServer(nodes=3))
    with pytest.raises(ValueError, match="cannot be in an UltraServer of 2 nodes"):
        fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer(nodes=2))


def test_an_elected_node_in_no_unit_has_no_membership(fake_node: FakeNode) -> None:
    # What the driver shows when the election failed: the node runs alone.
    root = fake_node("trn2u.48xlarge", ultraserver=FakeUltraServer(modes="4"))
    for size in (2, 4):
        write(root, f"{CLASS}/server_id_{size}", "0000000000000000\n")
        write(root, f"{CLASS}/node_id_{size}", "-1\n")
    result = discover(root)
    assert result.inventory.ultraserver is None
    assert messages(result) == {
        "/sys/class/neuron_device": "not in a unit of 2 or 4 nodes: whole-node device withheld"
    }
