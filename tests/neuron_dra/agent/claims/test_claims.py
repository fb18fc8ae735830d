from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from neuron_dra.agent.claims import plan as plan_module
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.exclusive import check_exclusive
from neuron_dra.agent.claims.plan import (
    ClaimError,
    Holding,
    PreparedClaim,
    format_cores,
    plan,
)
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim, neuron_config, opaque, ultraserver_config
from tests.sysfs_tree import FakeNode

REF = ClaimRef("default", "claim", "0c7d2a1e-1111-4222-8333-944455556666")


def inventory_of(fake_node: FakeNode, instance_type: str, **kw: object) -> NodeInventory:
    return discover(fake_node(instance_type, **kw)).inventory  # type: ignore[arg-type]


def planned(
    inventory: NodeInventory,
    devices: list[str] | dict[str, list[str]],
    config: list[dict[str, object]] | None = None,
) -> PreparedClaim:
    return plan(REF, allocated_claim(REF.uid, devices, config=config), inventory, "node-a")


def env(prepared: PreparedClaim) -> dict[str, str]:
    return dict(prepared.env)


def test_a_row_of_trn2_gets_its_logical_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(inventory, [f"neurondevice{i}" for i in (6, 4, 7, 5)])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "16-31"}  # LNC 2: 4 per device
    assert [d.device for d in prepared.devices] == [f"neurondevice{i}" for i in (6, 4, 7, 5)]
    assert [d.neuron_devices[0].dev_path for d in prepared.devices] == [
        "/dev/neuron6",
        "/dev/neuron4",
        "/dev/neuron7",
        "/dev/neuron5",
    ]
    assert all(d.request_names == ("neurons",) for d in prepared.devices)


def test_lnc_1_from_the_claim_doubles_the_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    all16 = [f"neurondevice{i}" for i in range(16)]
    prepared = planned(inventory, all16, [opaque(neuron_config(1))])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-127", "NEURON_LOGICAL_NC_CONFIG": "1"}


def test_node_default_lnc_1_applies_without_config(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge", lnc=1)
    assert env(planned(inventory, ["neurondevice1"])) == {"NEURON_RT_VISIBLE_CORES": "8-15"}


def test_claim_config_wins_over_class_config(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    configs = [opaque(neuron_config(2)), opaque(neuron_config(1), source="FromClass")]
    assert env(planned(inventory, ["neurondevice0"], configs))["NEURON_LOGICAL_NC_CONFIG"] == "2"
    configs = [opaque(neuron_config(1)), opaque(neuron_config(2), source="FromClass")]
    assert env(planned(inventory, ["neurondevice0"], configs))["NEURON_LOGICAL_NC_CONFIG"] == "1"


def test_non_contiguous_devices_list_their_cores(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    prepared = planned(inventory, ["neurondevice6", "neurondevice1"])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "2,3,12,13"}


def test_other_drivers_results_and_configs_are_ignored(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    claim = allocated_claim(
        REF.uid,
        ["neurondevice0"],
        config=[
            opaque({"anything": True}, driver="efa.aws.com"),
        ],
    )
    claim["status"]["allocation"]["devices"]["results"] += [
        {"request": "efa", "driver": "efa.aws.com", "pool": "node-a", "device": "efa0"},
        {"request": "neurons", "driver": "neuron.aws.com", "pool": "node-b", "device": "x"},
    ]
    prepared = plan(REF, claim, inventory, "node-a")
    assert [d.device for d in prepared.devices] == ["neurondevice0"]
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-1"}


def test_configs_apply_only_to_their_requests(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    with pytest.raises(ClaimError) as caught:
        planned(
            inventory,
            {"a": ["neurondevice0"], "b": ["neurondevice1"]},
            [opaque(neuron_config(1), requests=["a"])],
        )
    assert str(caught.value) == (
        f"claim {REF}: request a asks for logical NeuronCore size 1, request b for 2 (the "
        "node's default); the requests of one claim share one NeuronCore layout"
    )
    prepared = planned(
        inventory,
        {"a": ["neurondevice0"], "b": ["neurondevice1"]},
        [opaque(neuron_config(1), requests=["a", "b"])],
    )
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-15", "NEURON_LOGICAL_NC_CONFIG": "1"}


def test_a_request_without_config_takes_the_node_default(fake_node: FakeNode) -> None:
    # Request a says what the node does anyway; only effective sizes can disagree.
    inventory = inventory_of(fake_node, "trn2.48xlarge", lnc=1)
    prepared = planned(
        inventory,
        {"a": ["neurondevice0"], "b": ["neurondevice1"]},
        [opaque(neuron_config(1), requests=["a"])],
    )
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "0-15", "NEURON_LOGICAL_NC_CONFIG": "1"}


def test_disagreeing_requests_are_named_in_words(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge", lnc=1)
    with pytest.raises(ClaimError) as caught:
        planned(
            inventory,
            {"a": ["neurondevice0"], "b": ["neurondevice1"], "c": ["neurondevice2"]},
            [opaque(neuron_config(2), requests=["b", "c"])],
        )
    assert str(caught.value) == (
        f"claim {REF}: request a asks for logical NeuronCore size 1 (the node's default), "
        "requests b and c for 2; the requests of one claim share one NeuronCore layout"
    )


def test_each_request_gets_the_cores_of_its_own_devices(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(
        inventory, {"a": ["neurondevice0"], "b": ["neurondevice5"]}, [opaque(neuron_config(2))]
    )
    # A container referencing the whole claim gets every device, so every core.
    assert env(prepared) == {
        "NEURON_RT_VISIBLE_CORES": "0,1,2,3,20,21,22,23",
        "NEURON_LOGICAL_NC_CONFIG": "2",
    }
    # What does not depend on the devices is the same for every container.
    assert prepared.common_env == (("NEURON_LOGICAL_NC_CONFIG", "2"),)
    # A container referencing one request gets that request's devices, so their cores only.
    assert prepared.request_env == (
        ("a", (("NEURON_RT_VISIBLE_CORES", "0-3"),)),
        ("b", (("NEURON_RT_VISIBLE_CORES", "20-23"),)),
    )


def test_a_container_asking_two_extended_resources_sees_the_cores_of_both(
    fake_node: FakeNode,
) -> None:
    """`aws.amazon.com/neuron: 1` and `aws.amazon.com/neuroncore: 2` in one container:
    the scheduler's claim has two requests for that container, each a CDI device of
    its own, and CDI keeps one value of NEURON_RT_VISIBLE_CORES. Each carries both."""
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(
        inventory,
        {
            "container-0-request-0": ["neurondevice0"],
            "container-0-request-1": ["neuroncore48", "neuroncore49"],
            "container-1-request-0": ["neurondevice5"],
        },
    )
    assert prepared.request_env == (
        ("container-0-request-0", (("NEURON_RT_VISIBLE_CORES", "0,1,2,3,48,49"),)),
        ("container-0-request-1", (("NEURON_RT_VISIBLE_CORES", "0,1,2,3,48,49"),)),
        ("container-1-request-0", (("NEURON_RT_VISIBLE_CORES", "20-23"),)),
    )


def test_one_request_puts_all_its_env_on_every_container(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    prepared = planned(inventory, ["neurondevice6", "neurondevice1"])
    assert prepared.common_env == prepared.env == (("NEURON_RT_VISIBLE_CORES", "2,3,12,13"),)
    assert prepared.request_env == ()


def test_requests_with_the_same_devices_share_their_env(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    prepared = planned(inventory, {"work": ["neurondevice3"], "watch": ["neurondevice3"]})
    assert prepared.common_env == prepared.env == (("NEURON_RT_VISIBLE_CORES", "6-7"),)
    assert prepared.request_env == ()
    assert [(d.request_names, d.device) for d in prepared.devices] == [
        (("work",), "neurondevice3"),
        (("watch",), "neurondevice3"),
    ]


def test_a_device_listed_twice_for_a_request_is_prepared_once(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    prepared = planned(inventory, ["neurondevice2", "neurondevice4", "neurondevice2"])
    assert [d.device for d in prepared.devices] == ["neurondevice2", "neurondevice4"]
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "4,5,8,9"}


def test_admin_access_is_kept_per_result(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    claim = allocated_claim(REF.uid, {"work": ["neurondevice0"], "watch": ["neurondevice1"]})
    claim["status"]["allocation"]["devices"]["results"][1]["adminAccess"] = True
    prepared = plan(REF, claim, inventory, "node-a")
    assert [(d.device, d.admin_access) for d in prepared.devices] == [
        ("neurondevice0", False),
        ("neurondevice1", True),
    ]


@pytest.mark.parametrize("request_name", ["Not_A_Label", "a.b", "-a"])
def test_request_names_that_cannot_name_a_cdi_device_are_refused(
    fake_node: FakeNode, request_name: str
) -> None:
    # The API server only stores DNS labels; anything else is a corrupted object.
    inventory = inventory_of(fake_node, "inf2.48xlarge")
    with pytest.raises(ClaimError, match=f"request name {request_name!r} is not a DNS label"):
        planned(inventory, {"a": ["neurondevice0"], request_name: ["neurondevice1"]})


def test_subrequests_report_the_parent_request_too(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    prepared = planned(inventory, {"neurons/big": ["neurondevice0"]})
    assert prepared.devices[0].request_names == ("neurons", "neurons/big")


def test_ultraserver_node_device(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-3", 3))
    prepared = planned(inventory, ["neuronnode"], [opaque(ultraserver_config(4))])
    assert len(prepared.devices[0].neuron_devices) == 16
    assert env(prepared) == {
        "NEURON_RT_VISIBLE_CORES": "0-63",
        "NEURON_RT_ULTRASERVER_MODE": "1",
        "NEURON_RT_ULTRASERVER_SERVER_ID": "us-3",
        "NEURON_RT_ULTRASERVER_NODE_ID": "3",
    }
    pair = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(2))]))
    assert pair["NEURON_RT_ULTRASERVER_MODE"] == "3"  # X2V, what a healthy trn2u offers
    assert pair["NEURON_RT_ULTRASERVER_SERVER_ID"] == "us-3-1"
    assert pair["NEURON_RT_ULTRASERVER_NODE_ID"] == "1"


@pytest.mark.parametrize(
    ("instance_type", "devices", "config", "message"),
    [
        (
            "inf2.48xlarge",
            ["neurondevice0"],
            [opaque(neuron_config(1))],
            "NeuronConfig.logicalNeuronCore is set for request 'neurons' but inf2.48xlarge has "
            "no logical NeuronCores",
        ),
        (
            "trn2.48xlarge",
            ["neurondevice0"],
            [opaque(neuron_config(3))],
            "config[0] from the claim: NeuronConfig: field 'logicalNeuronCore': 3 is not allowed; "
            "allowed values: 1, 2",
        ),
        (
            "trn2.48xlarge",
            ["neurondevice0"],
            [opaque([1])],
            "config[0] from the claim: parameters must be an object, not an array",
        ),
        (
            "trn2.48xlarge",
            ["neurondevice0"],
            [opaque(ultraserver_config(4))],
            "UltraServerConfig applies to request 'neurons' whose device neurondevice0 is not the "
            "whole node; it is only valid for the neuronnode device",
        ),
        (
            "trn2.48xlarge",
            ["neuronnode"],
            [],
            "device neuronnode needs UltraServer membership, which this node does not report",
        ),
        ("trn2u.48xlarge", ["neuronnode"], [opaque(ultraserver_config(1), source="FromClass")], ""),
        ("trn2.48xlarge", ["neurondevice16"], [], "device neurondevice16 is not on this node"),
    ],
)
def test_bad_claims_name_claim_field_and_allowed_values(
    fake_node: FakeNode,
    instance_type: str,
    devices: list[str],
    config: list[dict[str, object]],
    message: str,
) -> None:
    inventory = inventory_of(fake_node, instance_type)
    if not message:
        assert planned(inventory, devices, config).env[-1] == ("NEURON_RT_ULTRASERVER_MODE", "4")
        return
    with pytest.raises(ClaimError) as caught:
        planned(inventory, devices, config)
    assert str(caught.value) == f"claim {REF}: {message}" or message in str(caught.value)
    assert str(caught.value).startswith(f"claim default/claim ({REF.uid}): ")


@pytest.mark.parametrize(("listed", "runtime_mode"), [("1,2,4", "2"), ("1,2,3,4", "3")])
def test_a_pair_uses_the_vertical_links_where_the_driver_offers_them(
    fake_node: FakeNode, listed: str, runtime_mode: str
) -> None:
    unit = FakeUltraServer("us-5", 2, modes=listed)
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=unit)
    pair = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(2))]))
    assert pair["NEURON_RT_ULTRASERVER_MODE"] == runtime_mode  # X2V=3 if listed, else X2H=2
    assert (pair["NEURON_RT_ULTRASERVER_SERVER_ID"], pair["NEURON_RT_ULTRASERVER_NODE_ID"]) == (
        "us-5-1",
        "0",
    )


def test_a_single_node_unit_gets_no_ids(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-5", 1))
    alone = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(1))]))
    assert alone == {"NEURON_RT_VISIBLE_CORES": "0-63", "NEURON_RT_ULTRASERVER_MODE": "4"}


def test_a_trn3_reservation_names_its_unit(fake_node: FakeNode) -> None:
    unit = FakeUltraServer("0000004005590728", 3)
    inventory = inventory_of(fake_node, "trn3.48xlarge", ultraserver=unit)
    whole = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(4))]))
    assert whole == {
        "NEURON_RT_VISIBLE_CORES": "0-63",
        "NEURON_RT_ULTRASERVER_MODE": "1",
        "NEURON_RT_ULTRASERVER_SERVER_ID": "0000004005590728",
        "NEURON_RT_ULTRASERVER_NODE_ID": "3",
    }
    with pytest.raises(
        ClaimError, match="ultraserverMode 2 is not supported by this UltraServer; supported: 1, 4"
    ):
        planned(inventory, ["neuronnode"], [opaque(ultraserver_config(2))])


def test_a_trn3_reservation_of_two_is_a_vertical_pair(fake_node: FakeNode) -> None:
    unit = FakeUltraServer("r-2", 1, nodes=2)
    inventory = inventory_of(fake_node, "trn3-dev0.48xlarge", ultraserver=unit)
    pair = env(planned(inventory, ["neuronnode"], [opaque(ultraserver_config(2))]))
    assert pair["NEURON_RT_ULTRASERVER_MODE"] == "3"
    assert (pair["NEURON_RT_ULTRASERVER_SERVER_ID"], pair["NEURON_RT_ULTRASERVER_NODE_ID"]) == (
        "r-2",
        "1",
    )


def test_unsupported_ultraserver_mode(fake_node: FakeNode) -> None:
    root = fake_node("trn2u.48xlarge")
    (root / "sys/class/neuron_device/ultraserver_mode").write_text("2,4\n")  # X2H, X1
    inventory = discover(root).inventory
    with pytest.raises(
        ClaimError, match="ultraserverMode 4 is not supported by this UltraServer; supported: 1, 2"
    ):
        planned(inventory, ["neuronnode"], [opaque(ultraserver_config(4))])


def test_uid_and_allocation_are_checked(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    other = allocated_claim("another-uid", ["neurondevice0"])
    with pytest.raises(ClaimError, match="the API server has UID another-uid, a different claim"):
        plan(REF, other, inventory, "node-a")
    unallocated = allocated_claim(REF.uid, ["neurondevice0"])
    unallocated["status"] = {}
    with pytest.raises(ClaimError, match="not allocated"):
        plan(REF, unallocated, inventory, "node-a")
    with pytest.raises(ClaimError, match=r"no device of neuron\.aws\.com on pool node-b allocated"):
        plan(REF, allocated_claim(REF.uid, ["neurondevice0"]), inventory, "node-b")


@pytest.mark.parametrize(
    ("break_", "message"),
    [
        (lambda c: c.update(metadata="x"), "metadata is str, not an object"),
        (lambda c: c["metadata"].update(uid=7), "metadata.uid is int, not a string"),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(device=0),
            r"status\.allocation\.devices\.results\[0\]\.device is int, not a string",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(adminAccess="y"),
            r"results\[0\]\.adminAccess is str, not a boolean",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"].update(config=[{"requests": [1]}]),
            r"config\[0\]\.requests\[0\] is int, not a string",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"].update(config=[{"opaque": []}]),
            r"config\[0\]\.opaque is list, not an object",
        ),
    ],
)
def test_a_malformed_claim_names_the_field(
    fake_node: FakeNode, break_: Callable[[dict[str, Any]], None], message: str
) -> None:
    inventory = inventory_of(fake_node, "inf2.xlarge")
    claim = allocated_claim(REF.uid, ["neurondevice0"])
    break_(claim)
    with pytest.raises(ClaimError, match=f"^claim .*: malformed ResourceClaim: .*{message}"):
        plan(REF, claim, inventory, "node-a")


def test_a_bug_in_the_plan_is_not_blamed_on_the_claim(
    fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TypeError of the driver's own surfaces as one (the preparer logs its traceback
    and counts it as internal), not as a malformed claim."""
    inventory = inventory_of(fake_node, "inf2.xlarge")

    def broken(*args: object) -> None:
        raise TypeError("a bug")

    monkeypatch.setattr(plan_module, "_with_env", broken)
    with pytest.raises(TypeError, match="a bug"):
        plan(REF, allocated_claim(REF.uid, ["neurondevice0"]), inventory, "node-a")


OTHER = ClaimRef("team", "other", "5e2a0c1d-2222-4333-8444-955566667777")
NO_SHARING = (
    "a Neuron device or NeuronCore serves one claim at a time unless a request has adminAccess"
)


def test_a_device_another_claim_holds_is_refused(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(inventory, ["neurondevice2", "neurondevice3"])
    held = [Holding(OTHER, "node-a", "neurondevice3", admin_access=False)]
    with pytest.raises(ClaimError) as caught:
        check_exclusive(prepared, held, inventory)
    assert str(caught.value) == (
        f"claim {REF}: device neurondevice3 is already prepared for claim {OTHER}; {NO_SHARING}"
    )


@pytest.mark.parametrize(("ours", "theirs"), [(True, False), (False, True), (True, True)])
def test_admin_access_on_either_side_may_share(
    fake_node: FakeNode, ours: bool, theirs: bool
) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    claim = allocated_claim(REF.uid, ["neurondevice3"])
    claim["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = ours
    prepared = plan(REF, claim, inventory, "node-a")
    check_exclusive(prepared, [Holding(OTHER, "node-a", "neurondevice3", theirs)], inventory)


def test_only_the_holdings_of_other_claims_on_this_pool_count(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    prepared = planned(inventory, ["neurondevice3"])
    check_exclusive(
        prepared,
        [
            Holding(REF, "node-a", "neurondevice3", admin_access=False),  # its own earlier record
            Holding(OTHER, "node-b", "neurondevice3", admin_access=False),
            Holding(OTHER, "node-a", "neurondevice4", admin_access=False),
        ],
        inventory,
    )


def test_the_whole_node_device_overlaps_each_device(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-3", 3))
    whole = planned(inventory, ["neuronnode"])
    with pytest.raises(ClaimError) as caught:
        check_exclusive(whole, [Holding(OTHER, "node-a", "neurondevice7", False)], inventory)
    assert str(caught.value) == (
        f"claim {REF}: device neuronnode and device neurondevice7, already prepared for claim "
        f"{OTHER}, share /dev/neuron7; {NO_SHARING}"
    )
    one = planned(inventory, ["neurondevice7"])
    with pytest.raises(ClaimError, match="device neurondevice7 and device neuronnode, already "):
        check_exclusive(one, [Holding(OTHER, "node-a", "neuronnode", False)], inventory)


def test_format_cores() -> None:
    assert format_cores([4]) == "4"
    assert format_cores([0, 1, 2, 3]) == "0-3"
    assert format_cores([2, 3, 8, 9]) == "2,3,8,9"


# --- NeuronCores -----------------------------------------------------------------


def test_cores_get_their_device_node_and_exactly_their_numbers(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")  # LNC 2: device 3 has cores 12-15
    prepared = planned(inventory, ["neuroncore14", "neuroncore12"])
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "12,14"}
    assert [d.neuron_devices[0].dev_path for d in prepared.devices] == ["/dev/neuron3"] * 2
    assert [d.cores for d in prepared.devices] == [(14,), (12,)]
    # Cores of two devices, and a core beside a whole device.
    assert env(planned(inventory, ["neuroncore3", "neuroncore4"])) == {
        "NEURON_RT_VISIBLE_CORES": "3-4"
    }
    assert env(planned(inventory, ["neurondevice0", "neuroncore9"])) == {
        "NEURON_RT_VISIBLE_CORES": "0,1,2,3,9"
    }


def test_cores_are_numbered_at_the_nodes_lnc(fake_node: FakeNode) -> None:
    lnc1 = inventory_of(fake_node, "trn2.48xlarge", lnc=1)  # 8 a device
    prepared = planned(lnc1, ["neuroncore127"])
    assert prepared.devices[0].neuron_devices[0].dev_path == "/dev/neuron15"
    assert env(prepared) == {"NEURON_RT_VISIBLE_CORES": "127"}
    with pytest.raises(ClaimError, match="device neuroncore64 is not on this node"):
        planned(inventory_of(fake_node, "trn2.48xlarge", name="lnc2"), ["neuroncore64"])  # 0-63


def test_an_lnc_on_a_core_is_refused_with_the_reason(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    with pytest.raises(ClaimError) as caught:
        planned(inventory, ["neuroncore5"], [opaque(neuron_config(1))])
    assert str(caught.value) == (
        f"claim {REF}: NeuronConfig.logicalNeuronCore is set for request 'neurons', whose "
        "device neuroncore5 is one logical NeuronCore of neurondevice1; a core is as large as "
        "the node's LNC (2), fixed when the node boots: remove the field, or ask for whole "
        "devices (DeviceClass neuron.aws.com) to set it"
    )
    # Hardware without LNC says that first.
    with pytest.raises(ClaimError, match="has no logical NeuronCores"):
        planned(
            inventory_of(fake_node, "inf2.48xlarge"), ["neuroncore1"], [opaque(neuron_config(1))]
        )
    # An LNC for a whole-device request of a claim that also holds a core: one layout.
    requests = {"device": ["neurondevice0"], "core": ["neuroncore9"]}
    with pytest.raises(ClaimError, match="share one NeuronCore layout"):
        planned(inventory, requests, [opaque(neuron_config(1), requests=["device"])])


@pytest.mark.parametrize(
    ("ours", "theirs", "shared"),
    [
        ("neuroncore13", "neurondevice3", "share /dev/neuron3 (core 13)"),
        ("neurondevice3", "neuroncore13", "share /dev/neuron3 (core 13)"),
        ("neuroncore13", "neuronnode", "share /dev/neuron3 (core 13)"),
        ("neurondevice3", "neuronnode", "share /dev/neuron3"),
        ("neuronnode", "neurondevice3", "share /dev/neuron3"),
    ],
)
def test_a_core_overlaps_its_device_and_the_node_device(
    fake_node: FakeNode, ours: str, theirs: str, shared: str
) -> None:
    inventory = inventory_of(fake_node, "trn2u.48xlarge", ultraserver=FakeUltraServer("us-1", 0))
    held = [Holding(OTHER, "node-a", theirs, admin_access=False)]
    with pytest.raises(ClaimError) as caught:
        check_exclusive(planned(inventory, [ours]), held, inventory)
    assert str(caught.value) == (
        f"claim {REF}: device {ours} and device {theirs}, already prepared for claim {OTHER}, "
        f"{shared}; {NO_SHARING}"
    )


def test_disjoint_cores_of_one_device_go_to_two_claims(fake_node: FakeNode) -> None:
    inventory = inventory_of(fake_node, "trn2.48xlarge")
    held = [Holding(OTHER, "node-a", "neuroncore12", admin_access=False)]
    check_exclusive(planned(inventory, ["neuroncore13", "neuroncore14"]), held, inventory)
    with pytest.raises(ClaimError, match="device neuroncore12 is already prepared"):
        check_exclusive(planned(inventory, ["neuroncore12"]), held, inventory)
