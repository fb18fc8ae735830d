"""`lint` findings at the field's line, and a "did you mean" for the common CEL slips."""

from __future__ import annotations

from pathlib import Path

from neuron_dra.tools.celhints import equals_for_assignment, guarded
from neuron_dra.tools.lint import lint_files

TEMPLATE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: t
spec:
  spec:
    devices:
      requests:
      - name: a
        exactly:
          deviceClassName: neuron.aws.com
          count: 1
          selectors:
          - cel:
              expression: device.attributes['neuron.aws.com'].instanceType = 'trn2.48xlarge'
      - name: b
        exactly:
          deviceClassName: neuron.aws.com
          count: 17
          selectors:
          - cel:
              expression: device.attributes['neuron.aws.com'].topology_x == 1
      constraints:
      - requests: [a, b]
        matchAttribute: resource.aws.com/devicegroup5_id
"""


def test_findings_point_at_the_fields_line(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TEMPLATE)
    lines = {f.message.split(":")[0]: f.line for f in lint_files([path])}
    assert lines == {
        "CEL 1": 15,  # the expression with `=`
        "neuron.aws.com/topology_x is not published on every device the class and the "
        "earlier selectors accept": 22,
        "count 17": 19,
        "matchAttribute resource.aws.com/devicegroup5_id is never published by the driver, "
        "so no device satisfies the constraint; did you mean resource.aws.com/devicegroup8_id?": 24,
    }


def test_equals_for_comparison_gets_a_did_you_mean(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TEMPLATE)
    [cel] = [f for f in lint_files([path]) if f.message.startswith("CEL")]
    assert cel.error
    assert cel.message.endswith(
        "; did you mean \"device.attributes['neuron.aws.com'].instanceType == 'trn2.48xlarge'\" "
        "(== compares, = is not CEL)?"
    )
    # Only the lone `=` outside strings; nothing offered where that does not compile.
    assert equals_for_assignment("device.attributes['d'].x = 'a=b'") == (
        "device.attributes['d'].x == 'a=b'"
    )
    assert equals_for_assignment("device.attributes['d'].x >= 1 && =") is None
    assert equals_for_assignment("device.attributes['d'].x == 1") is None


def test_an_attribute_some_devices_lack_gets_a_has_guard(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TEMPLATE)
    [bare] = [f for f in lint_files([path]) if "topology_x is not published" in f.message]
    assert not bare.error
    assert bare.message.endswith(
        "did you mean \"has(device.attributes['neuron.aws.com'].topology_x) && "
        "(device.attributes['neuron.aws.com'].topology_x == 1)\"?"
    )
    # Behind a selector that keeps out the devices without it: nothing to say.
    selector = "          - cel:\n              expression: device.attributes['neuron.aws.com']"
    bare_x = f"{selector}.topology_x"
    guarded_template = TEMPLATE.replace(
        bare_x, f"{selector}.instanceType == 'trn2.48xlarge'\n{bare_x}"
    )
    path.write_text(guarded_template)
    assert not [f for f in lint_files([path]) if "is not published on every" in f.message]
    assert (
        guarded("has(device.attributes['d'].x) && device.attributes['d'].x", [("d", "x")]) is None
    )
