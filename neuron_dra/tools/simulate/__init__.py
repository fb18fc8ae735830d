"""Allocate ResourceClaims the way the kube-scheduler's DRA allocator would, offline.

Inputs are the manifests users apply (`inputs`: claims as `claims`, the scheduler's
claims for extended resources from `extended`); the cluster is either
simulated or read from a live API server (`nodes`); claims are allocated with
the scheduler's rules (`allocator`, `search`, with DeviceTaintRules' taints from
`taintrules`, PodGroups from `podgroups` placed whole by `gangs`, and why a claim
does not fit from `explain`; `run` from documents to outcomes) and
printed (`output`).

Owns: `neuron-dra simulate`'s model and allocator. May use: `tools.cel`, the
agent's claim planner and API client, `resources` and `hardware`.
"""

from neuron_dra.tools.simulate.allocator import Cluster, Outcome, Prepared
from neuron_dra.tools.simulate.claims import (
    CORE_CLASS,
    CORE_RESOURCE,
    MAX_CLAIM_DEVICES,
    Alternative,
    Claim,
    ClaimSpec,
    Constraint,
    DeviceClass,
    InputError,
    Request,
    default_classes,
    parse_claim_spec,
    parse_device_class,
)
from neuron_dra.tools.simulate.inputs import Inputs, load_documents, pod_specs, read_inputs
from neuron_dra.tools.simulate.nodes import (
    LiveCluster,
    SimDevice,
    SimNode,
    live_cluster,
    node_from_slices,
    parse_node_counts,
    parse_taken,
    simulated_nodes,
)
from neuron_dra.tools.simulate.output import describe, outcome_json
from neuron_dra.tools.simulate.run import (
    check_documents,
    simulate,
    simulate_documents,
    take_allocated,
)
from neuron_dra.tools.simulate.search import Placement
from neuron_dra.tools.simulate.taintrules import (
    Applied,
    TaintRule,
    applied_json,
    describe_applied,
    parse_taint_rule,
)

__all__ = [
    "CORE_CLASS",
    "CORE_RESOURCE",
    "MAX_CLAIM_DEVICES",
    "Alternative",
    "Applied",
    "Claim",
    "ClaimSpec",
    "Cluster",
    "Constraint",
    "DeviceClass",
    "InputError",
    "Inputs",
    "LiveCluster",
    "Outcome",
    "Placement",
    "Prepared",
    "Request",
    "SimDevice",
    "SimNode",
    "TaintRule",
    "applied_json",
    "check_documents",
    "default_classes",
    "describe",
    "describe_applied",
    "live_cluster",
    "load_documents",
    "node_from_slices",
    "outcome_json",
    "parse_claim_spec",
    "parse_device_class",
    "parse_node_counts",
    "parse_taint_rule",
    "parse_taken",
    "pod_specs",
    "read_inputs",
    "simulate",
    "simulate_documents",
    "simulated_nodes",
    "take_allocated",
]
