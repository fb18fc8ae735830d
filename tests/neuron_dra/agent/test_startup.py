"""What `neuron-dra run` imports before its sockets are served, and what it defers.

Start-up is mostly imports, and so is the agent's memory: each heavy library is
loaded where it is first needed. Checked in a fresh interpreter, since the test
session has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Imported in a worker thread once the kubelet's sockets are served.
DEFERRED = ("neuron_dra.agent.node", "neuron_dra.agent.claims.preparer", "prometheus_client")
# Never by the agent on its own: a kubeconfig needing exec plugins loads `kubernetes`.
NEVER = ("kubernetes", "urllib3", "aiohttp", "celpy")


def loaded(code: str, *modules: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    )
    return list(json.loads(result.stdout))


def test_the_sockets_need_only_grpc_and_the_kubelets_protocols() -> None:
    code = "import neuron_dra.cli, neuron_dra.agent.run"
    assert loaded(code, *DEFERRED, *NEVER, "pydantic", "yaml") == []


def test_the_agent_loads_no_client_library_and_no_config_schema() -> None:
    code = "import neuron_dra.cli, neuron_dra.agent.run, neuron_dra.agent.node"
    assert loaded(code, *NEVER, "pydantic", "yaml") == []


def test_the_config_schema_loads_with_the_first_claim_that_has_a_config() -> None:
    code = """
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.plan import plan
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from tests.claim_objects import allocated_claim, neuron_config, opaque
import sys, tempfile, pathlib
inventory = discover(build_fake_node(pathlib.Path(tempfile.mkdtemp()), "trn2.48xlarge")).inventory
uid = "7f0e6b2c-0000-4000-8000-000000000001"
plan(ClaimRef("ns", "c", uid), allocated_claim(uid, ["neurondevice0"]), inventory, "node-a")
assert "pydantic" not in sys.modules
config = [opaque(neuron_config(1))]
claim = allocated_claim(uid, ["neurondevice0"], config=config)
plan(ClaimRef("ns", "c", uid), claim, inventory, "node-a")
"""
    assert loaded(code, "pydantic") == ["pydantic"]


def test_package_metadata_is_read_at_the_first_scrape_not_at_start() -> None:
    """neuron_dra_build_info's library versions scan the installed packages (15 to 25 ms)."""
    start = "from neuron_dra.agent.telemetry.metrics import Metrics\nmetrics = Metrics()"
    assert loaded(start, "importlib.metadata") == []
    assert loaded(f"{start}\nmetrics.render()", "importlib.metadata") == ["importlib.metadata"]
