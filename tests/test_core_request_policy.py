"""The core-request policy's table of instance types is the driver's catalogue: what
each type serves to `aws.amazon.com/neuroncore` on a DRA node (its logical NeuronCores
at the default LNC, at most a claim's 32 devices). The policy's behaviour is checked on
a real API server in tests/e2e/test_core_request_policy.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from neuron_dra.hardware.instance_types import DEFAULT_LNC, INSTANCE_TYPES
from neuron_dra.tools.simulate import MAX_CLAIM_DEVICES

POLICY = Path(__file__).resolve().parent.parent / "deploy" / "core-request-policy.yaml"


def test_the_policy_serves_each_type_its_logical_cores() -> None:
    policy, _binding = (d for d in yaml.safe_load_all(POLICY.read_text()) if d)
    [cores] = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "cores"]
    expected = {
        name: min(
            MAX_CLAIM_DEVICES,
            t.devices * t.cores_per_device // (DEFAULT_LNC if t.has_lnc else 1),
        )
        for name, t in INSTANCE_TYPES.items()
    }
    assert json.loads(cores) == expected
    assert expected["trn2.3xlarge"] == 4 and expected["inf2.xlarge"] == 2
