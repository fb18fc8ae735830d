"""Generated inputs through every parser of user- or API-supplied data.

Opaque parameters come from users, ResourceClaims from the API server: neither
may crash the driver or produce an error that leaves the user guessing. The
properties are checked on deterministic examples (derandomize) so a failure
in CI is a failure on every run; `make fuzz` runs them on fresh ones
(``NEURON_DRA_FUZZ_FRESH=1`` and a ``--hypothesis-seed`` it prints).
"""

from __future__ import annotations

import ast
import copy
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from api.config import API_VERSIONS, ConfigError, NeuronConfig, UltraServerConfig, decode
from consts import DRIVER_NAME, NODE_DEVICE_NAME
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import CheckpointStore
from neuron_dra.agent.claims.checkpoint import decode as decode_checkpoint
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import ClaimError, PreparedClaim, plan
from neuron_dra.agent.claims.preparer import Outcome, Preparer
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import FakeUltraServer, build_fake_node
from neuron_dra.hardware.inventory import NodeInventory

POOL = "node-a"
BOOT = "5f0e9c1a-0000-4000-8000-00000000f001"
Obj = dict[str, Any]

# Deterministic and without per-example deadlines: CI machines are slow and shared.
FUZZ = settings(
    deadline=None,
    derandomize=os.environ.get("NEURON_DRA_FUZZ_FRESH") != "1",
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------------- strategies

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
# Up to twice what the API stores (10 KiB of parameters): size is no problem either.
huge_strings = st.integers(min_value=1_000, max_value=20_000).map(lambda n: "\u00e9/" * n)
json_values = st.recursive(
    scalars | huge_strings,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)
# Values near the valid ones (repeated entries weigh more): the typos users make.
number_like = st.sampled_from([1, 2, 4, 1, 2, 0, 3, -1, 1.0, True, False, "1", None])
api_versions = st.sampled_from([*API_VERSIONS, *API_VERSIONS, "neuron.aws.com/v2", "", 1, None])
kinds: st.SearchStrategy[object] = st.sampled_from(
    ["NeuronConfig"] * 4 + ["UltraServerConfig"] * 4 + ["neuronconfig", "", 0, None, []]
)


def without(keys: list[str]) -> st.SearchStrategy[list[str]]:
    """Fields to leave out: mostly none, so that the checks past them are reached too."""
    return st.sampled_from([[]] * 4 * len(keys) + [[k] for k in keys] + [keys])


def _drop(obj: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in dropped}


config_like = st.builds(
    lambda known, extra, dropped: _drop({**extra, **known}, dropped),
    st.fixed_dictionaries(
        {"apiVersion": api_versions | json_values, "kind": kinds},
        optional={
            "logicalNeuronCore": number_like | json_values,
            "ultraserverMode": number_like | json_values,
        },
    ),
    st.dictionaries(st.text(max_size=12), json_values, max_size=1),
    without(["apiVersion", "kind"]),
)
parameters = config_like | json_values

KNOWN_KINDS: dict[str, type[NeuronConfig] | type[UltraServerConfig]] = {
    "NeuronConfig": NeuronConfig,
    "UltraServerConfig": UltraServerConfig,
}


# ---------------------------------------------------------------------- opaque parameters


def check_config_error(params: object, message: str) -> None:
    """The message names what was wrong: the expected shape, the kind, or each field."""
    if not isinstance(params, dict):
        assert message.startswith("parameters must be an object, not "), message
        return
    kind = params.get("kind")
    if not (isinstance(kind, str) and kind in KNOWN_KINDS):
        assert message.startswith(f"kind {kind!r} is not one of NeuronConfig, UltraServerConfig")
        return
    assert message.startswith(f"{kind}: "), message
    parts = message.removeprefix(f"{kind}: ")
    # Field names are quoted as Python reprs, so odd characters show escaped.
    named = [ast.literal_eval(q) for q in _FIELD.findall(parts)]
    assert named, message
    fields = KNOWN_KINDS[kind].model_fields
    for name in named:
        assert name in fields or name in params, (name, message)


_FIELD = re.compile(r"""(?:^|; )(?:unknown )?field ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


@settings(FUZZ, max_examples=6000)
@given(parameters)
def test_decode_returns_a_config_or_a_config_error(params: object) -> None:
    try:
        config = decode(params)
    except ConfigError as err:
        check_config_error(params, str(err))
    else:
        assert isinstance(config, NeuronConfig | UltraServerConfig)
        assert isinstance(params, dict)
        assert config.kind == params["kind"]
        assert config.apiVersion in API_VERSIONS


# ---------------------------------------------------------------------- claims

INSTANCE_TYPES = ("trn2.48xlarge", "trn2u.48xlarge", "inf2.48xlarge")


@pytest.fixture(scope="module")
def inventories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, NodeInventory]:
    """Built once: fake sysfs trees are thousands of files, and plan never changes them."""
    root = tmp_path_factory.mktemp("nodes")
    return {
        t: discover(
            build_fake_node(
                root / t,
                t,
                ultraserver=FakeUltraServer("us-a", 1) if t.startswith("trn2u") else None,
            )
        ).inventory
        for t in INSTANCE_TYPES
    }


UIDS = ["0c7d2a1e-0000-4000-8000-00000000000" + str(i) for i in range(4)]
devices = st.sampled_from(
    [f"neurondevice{i}" for i in (0, 1, 5, 11, 15)] * 2
    + [f"neurondevice{i}" for i in (16, 99)]
    + [NODE_DEVICE_NAME, NODE_DEVICE_NAME, "", "gpu0"]
)
drivers = st.sampled_from([DRIVER_NAME] * 4 + ["efa.aws.com", "gpu.nvidia.com", ""])
pools = st.sampled_from([POOL] * 4 + ["node-b", ""])
requests = st.sampled_from(["neurons", "neurons", "neurons/small", "other", ""])


def obj_of(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Obj]:
    """Objects with every field of `fields`, or with some left out, as the API omits empty ones."""
    return st.builds(_drop, st.fixed_dictionaries(fields), without(list(fields)))


results = obj_of({"request": requests, "driver": drivers, "pool": pools, "device": devices})
opaque_config = obj_of(
    {
        "source": st.sampled_from(["FromClass", "FromClaim", "FromClaim", "", "Other"]),
        "requests": st.lists(requests, max_size=2),
        "opaque": obj_of({"driver": drivers, "parameters": parameters}),
    }
)
allocation = obj_of(
    {
        "devices": obj_of(
            {
                "results": st.lists(results, min_size=1, max_size=4) | st.just([]),
                "config": st.lists(opaque_config, max_size=3),
            }
        ),
        "nodeSelector": st.just({}),
    }
)
# Every field typed as the resource.k8s.io/v1 schema types it, any of them left out.
# Claims are for UIDS[0] mostly, so that later checks are reached.
claim_objects = obj_of(
    {
        "apiVersion": st.just("resource.k8s.io/v1"),
        "kind": st.just("ResourceClaim"),
        "metadata": obj_of(
            {
                "name": st.just("c"),
                "namespace": st.just("ns"),
                "uid": st.sampled_from([UIDS[0]] * 8 + ["another-uid", ""]),
            }
        ),
        "status": obj_of({"allocation": allocation, "reservedFor": st.just([])}),
    }
)


def _replace_somewhere(obj: Any, value: Any, rnd: random.Random) -> Any:
    """`obj` with one value, at a random depth, replaced by `value`."""
    obj = copy.deepcopy(obj)
    if not isinstance(obj, dict | list) or not obj:
        return value
    node = obj
    while True:
        key = rnd.choice(list(node)) if isinstance(node, dict) else rnd.randrange(len(node))
        child = node[key]
        if not isinstance(child, dict | list) or not child or rnd.random() < 0.3:
            node[key] = value
            return obj
        node = child


# The same, with any value anywhere replaced by arbitrary JSON: a client or API
# server version whose objects do not follow the schema this driver was built for.
garbage = st.builds(
    _replace_somewhere, claim_objects, json_values, st.randoms(use_true_random=False)
)


def check_plan(ref: ClaimRef, obj: Obj, inventory: NodeInventory) -> None:
    try:
        prepared = plan(ref, obj, inventory, POOL)
    except ClaimError as err:
        assert str(err).startswith(f"claim {ref.namespace}/{ref.name} ({ref.uid}): "), str(err)
    else:
        assert isinstance(prepared, PreparedClaim)
        assert prepared.claim == ref
        assert prepared.devices


@settings(FUZZ, max_examples=4000)
@given(claim_objects, st.sampled_from(INSTANCE_TYPES))
def test_plan_of_schema_shaped_claims(
    inventories: dict[str, NodeInventory], obj: Obj, instance_type: str
) -> None:
    check_plan(ClaimRef("ns", "c", UIDS[0]), obj, inventories[instance_type])


# Stops at the first failure: shrinking it would only cost time.
@settings(FUZZ, max_examples=1000, phases=[Phase.generate], report_multiple_bugs=False)
@given(garbage, st.sampled_from(INSTANCE_TYPES))
def test_plan_of_claims_with_wrong_types(
    inventories: dict[str, NodeInventory], obj: Any, instance_type: str
) -> None:
    check_plan(ClaimRef("ns", "c", UIDS[0]), obj, inventories[instance_type])


# ---------------------------------------------------------------------- prepare


class FlakyApi:
    """Claims by name; a missing name is the API server's 404."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def get_claim(self, namespace: str, name: str) -> Obj:
        if name not in self.objects:
            raise ApiError(404, f'resourceclaims "{name}" not found')
        found: Obj = copy.deepcopy(self.objects[name])
        return found


def _with_identity(obj: Any, uid: str, keep_uid: bool) -> Any:
    """Mostly claims that are who the kubelet says, so later checks are reached."""
    if keep_uid and isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        obj["metadata"]["uid"] = uid
    return obj


@settings(FUZZ, max_examples=300)
@given(
    st.lists(
        st.tuples(claim_objects | garbage | st.just(None), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(INSTANCE_TYPES),
)
def test_prepare_outcomes_are_devices_or_an_error(
    inventories: dict[str, NodeInventory],
    claims: list[tuple[Any, bool]],
    instance_type: str,
) -> None:
    # Not tmp_path: a fresh directory per generated example, removed right away.
    root = Path(tempfile.mkdtemp())
    try:
        cdi_root, checkpoint = root / "cdi", root / "plugin" / "checkpoint.json"
        refs = [ClaimRef("ns", f"c{i}", UIDS[i]) for i in range(len(claims))]
        api = FlakyApi(
            {
                ref.name: _with_identity(copy.deepcopy(obj), ref.uid, keep)
                for ref, (obj, keep) in zip(refs, claims, strict=True)
                if obj is not None
            }
        )
        inventory = inventories[instance_type]
        preparer = Preparer(
            inventory=lambda: inventory,
            pool=POOL,
            cdi_root=cdi_root,
            store=CheckpointStore(checkpoint),
            boot_id=BOOT,
            get_claim=api.get_claim,
        )
        preparer.start()

        outcomes = preparer.prepare(refs)
        check_outcomes(refs, outcomes, cdi_root, checkpoint)
        unprepared = preparer.unprepare(refs)
        assert all(not o.error for o in unprepared.values()), unprepared
        assert cdi.spec_uids(cdi_root) == set()
        assert preparer.prepared == {}
    finally:
        shutil.rmtree(root)


def check_outcomes(
    refs: list[ClaimRef], outcomes: dict[str, Outcome], cdi_root: Path, checkpoint: Path
) -> None:
    """Each claim has devices or an error; only the prepared ones have a spec and a record."""
    assert set(outcomes) == {r.uid for r in refs}
    recorded = decode_checkpoint(checkpoint.read_bytes())[1] if checkpoint.exists() else {}
    specs = cdi.spec_uids(cdi_root)
    for ref in refs:
        outcome = outcomes[ref.uid]
        assert bool(outcome.devices) != bool(outcome.error), outcome
        if outcome.error:
            assert outcome.error.startswith(f"claim {ref}: "), outcome.error
            assert ref.uid not in recorded
            assert ref.uid not in specs
        else:
            assert recorded[ref.uid].devices == outcome.devices
            assert ref.uid in specs
    # Nothing but finished specs in the runtime's directory.
    left = sorted(p.name for p in cdi_root.iterdir()) if cdi_root.exists() else []
    assert left == sorted(cdi.spec_path(cdi_root, u).name for u in specs)
