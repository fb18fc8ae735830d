"""Device selector evaluation: the conformance table, error messages, fast == general path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_dra.tools.cel import (
    MAX_EXPRESSION_BYTES,
    CelCompileError,
    CelEvalError,
    CompileErrorKind,
    DeviceView,
    EvalErrorKind,
    Quantity,
    Semver,
    compile_selector,
    referenced_attributes,
)

TABLE = yaml.safe_load((Path(__file__).parent / "cel_conformance.yaml").read_text())
CASES: list[dict[str, Any]] = TABLE["cases"]
EXAMPLES = Path(__file__).parents[3] / "examples" / "specs"


def slice_device(short: dict[str, Any], name: str = "dev") -> dict[str, Any]:
    """The table's short form -> a ResourceSlice spec.devices[] entry."""
    attributes: dict[str, Any] = {}
    for key, value in (short.get("attributes") or {}).items():
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        attributes[key] = {kind: value}
    for key, value in (short.get("versions") or {}).items():
        attributes[key] = {"version": str(value)}
    capacity = {k: {"value": str(v)} for k, v in (short.get("capacity") or {}).items()}
    return {"name": name, "attributes": attributes, "capacity": capacity}


DEVICES = {
    name: DeviceView.from_slice_device(short["driver"], slice_device(short, name))
    for name, short in TABLE["devices"].items()
}


def outcome(evaluate: Any, device: DeviceView) -> Any:
    try:
        return bool(evaluate(device))
    except CelEvalError as error:
        return error.kind


def case_id(case: dict[str, Any]) -> str:
    return f"{case['device']}:{' '.join(case['expression'].split())[:70]}"


def test_the_table_covers_what_it_must() -> None:
    assert len(CASES) >= 40
    for case in CASES:
        assert len({"result", "error", "compile_error"} & case.keys()) == 1, case
    kinds = {c.get("compile_error") for c in CASES} | {c.get("error") for c in CASES}
    assert {"syntax", "type", "not_bool", "no_such_key", "no_such_overload"} <= kinds


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_conformance(case: dict[str, Any]) -> None:
    if "compile_error" in case:
        with pytest.raises(CelCompileError) as caught:
            compile_selector(case["expression"])
        assert caught.value.kind == CompileErrorKind(case["compile_error"])
        return
    selector = compile_selector(case["expression"])
    device = DEVICES[case["device"]]
    expected = case["result"] if "result" in case else EvalErrorKind(case["error"])
    assert outcome(selector.matches, device) == expected
    # The general path is the reference: it must give the same answer on every case.
    assert outcome(selector.matches_general, device) == expected


@pytest.mark.parametrize("case", [c for c in CASES if "compile_error" not in c], ids=case_id)
def test_fast_path_equals_general_path_on_every_device(case: dict[str, Any]) -> None:
    selector = compile_selector(case["expression"])
    for device in DEVICES.values():
        assert outcome(selector.matches, device) == outcome(selector.matches_general, device)


def example_selectors() -> set[str]:
    found: set[str] = set()
    for path in EXAMPLES.rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            found |= set(_expressions(document))
    return found


def _expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        if isinstance(node.get("cel"), dict) and "expression" in node["cel"]:
            return [node["cel"]["expression"]]
        return [e for v in node.values() for e in _expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in _expressions(v)]
    return []


SEED_SELECTORS = [
    "device.attributes['neuron.aws.com'].instanceType == \"trn2.48xlarge\"",
    "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'",
    "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge' &&\n"
    "           device.attributes['neuron.aws.com'].neuronDriverVersion == '2.24.7.0'",
    "device.attributes['neuron.aws.com'].resourceType == 'neuron_node'",
]


def test_the_documented_selectors_are_in_the_table() -> None:
    table = {c["expression"] for c in CASES}
    for expression in SEED_SELECTORS:
        assert expression in table, expression


def test_every_example_selector_takes_the_fast_path_and_agrees() -> None:
    selectors = example_selectors()
    assert selectors
    for expression in selectors:
        selector = compile_selector(expression)
        assert selector.fast is not None, expression
        for device in DEVICES.values():
            assert outcome(selector.matches, device) == outcome(selector.matches_general, device)


def test_compile_errors_carry_line_and_column() -> None:
    with pytest.raises(CelCompileError, match=r"^2:10: syntax error") as caught:
        compile_selector("device.driver == 'neuron.aws.com' &&\n  device.[1]")
    assert (caught.value.line, caught.value.column) == (2, 10)
    with pytest.raises(CelCompileError, match=r"^1:8: undefined field 'name'"):
        compile_selector("device.name == 'x'")
    with pytest.raises(CelCompileError, match=r"undeclared reference to 'node'"):
        compile_selector("node.x == 1")
    with pytest.raises(CelCompileError, match=r"'_==_' applied to '\(string, int\)'"):
        compile_selector("device.driver == 1")
    with pytest.raises(
        CelCompileError, match="must evaluate to bool or the unknown type, not string"
    ):
        compile_selector("device.driver")


def test_expression_length_limit() -> None:
    clause = "device.driver == 'neuron.aws.com'"
    fits = " || ".join([clause] * 200)
    assert len(fits) <= MAX_EXPRESSION_BYTES
    compile_selector(fits)
    too_long = " || ".join([clause] * 400)
    with pytest.raises(CelCompileError, match=r"^1:1: expression is \d+ bytes") as caught:
        compile_selector(too_long)
    assert caught.value.kind is CompileErrorKind.TOO_LONG


def test_eval_error_messages() -> None:
    trn2 = DEVICES["trn2"]
    cases = {
        "device.attributes['other.example.com'].x == 1": "no such key: x",
        "device.attributes['neuron.aws.com'].instanceType < 5": (
            "no such overload: _<_(string, int)"
        ),
        "device.attributes['neuron.aws.com'].instanceType": (
            "CEL result of type string could not be converted to bool"
        ),
    }
    for expression, message in cases.items():
        selector = compile_selector(expression)
        for evaluate in (selector.matches, selector.matches_general):
            with pytest.raises(CelEvalError, match=re.escape(message)):
                evaluate(trn2)


def test_malformed_slice_values_are_rejected_when_the_view_is_built() -> None:
    with pytest.raises(ValueError, match="attribute v: parse semantic version"):
        DeviceView.from_slice_device("d", {"attributes": {"v": {"version": "1.2"}}})
    with pytest.raises(ValueError, match="unsupported attribute value"):
        DeviceView.from_slice_device("d", {"attributes": {"v": {"float": 1.5}}})


def test_short_names_take_the_drivers_domain() -> None:
    view = DeviceView.from_slice_device(
        "neuron.aws.com",
        {"attributes": {"a": {"int": 1}, "resource.aws.com/b": {"string": "x"}}},
    )
    assert view.attributes == {"neuron.aws.com": {"a": 1}, "resource.aws.com": {"b": "x"}}


def test_semver_and_quantity_values() -> None:
    assert Semver.parse("1.0.0-alpha") < Semver.parse("1.0.0-alpha.1") < Semver.parse("1.0.0")
    assert Semver.parse("1.0.0+build") == Semver.parse("1.0.0")
    assert Quantity.parse("1Ki").value == 1024
    assert Quantity.parse("1.5G") == Quantity.parse("1500M")
    assert Quantity.parse("2e3") == Quantity.parse("2k")
    with pytest.raises(ValueError):
        Quantity.parse("1KiB")


def test_referenced_attributes() -> None:
    expression = (
        "device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge' && "
        "device.attributes['resource.aws.com']['devicegroup4_id'] != '' && "
        "'deviceName' in device.attributes['neuron.aws.com'] && "
        "device.capacity['neuron.aws.com'].memory.isGreaterThan(quantity('1Gi'))"
    )
    assert referenced_attributes(expression) == {
        ("neuron.aws.com", "instanceType"),
        ("resource.aws.com", "devicegroup4_id"),
        ("neuron.aws.com", "deviceName"),
    }


# --- randomised devices: the fast path must equal the general path ------------------

_FAST_CASES = [c for c in CASES if "compile_error" not in c]
_SELECTORS = [compile_selector(c["expression"]) for c in _FAST_CASES]
_NAMES = ["instanceType", "deviceId", "neuronDriverVersion", "resourceType", "draDriverVersion"]
_NAMES += ["mig", "deviceName", "missing", "ultraserverModes", "logicalNeuronCore"]

_values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda v: {"int": v}),
    st.booleans().map(lambda v: {"bool": v}),
    st.sampled_from(
        ["trn2.48xlarge", "inf2.48xlarge", "Trainium2", "neuron_node", "1_2_4", ""]
    ).map(lambda v: {"string": v}),
    st.text(max_size=8).map(lambda v: {"string": v}),
    st.sampled_from(["0.1.0", "1.2.3-rc.1", "0.0.9", "2.0.0+b1"]).map(lambda v: {"version": v}),
)
_domains = st.sampled_from(["", "resource.aws.com/", "gpu.example.com/"])
_attributes = st.dictionaries(
    st.tuples(_domains, st.sampled_from([*_NAMES, "devicegroup4_id"])).map("".join),
    _values,
    max_size=8,
)
_capacity = st.dictionaries(
    st.sampled_from(["cores", "memory", "gpus"]),
    st.sampled_from(["8", "96Gi", "100G", "1.5", "500m", "0"]).map(lambda v: {"value": v}),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    driver=st.sampled_from(["neuron.aws.com", "gpu.example.com"]),
    attributes=_attributes,
    capacity=_capacity,
)
def test_fast_path_equals_general_path_on_random_devices(
    driver: str, attributes: dict[str, Any], capacity: dict[str, Any]
) -> None:
    device = DeviceView.from_slice_device(
        driver, {"name": "d", "attributes": attributes, "capacity": capacity}
    )
    for selector in _SELECTORS:
        fast = outcome(selector.matches, device)
        assert fast == outcome(selector.matches_general, device), selector.expression
