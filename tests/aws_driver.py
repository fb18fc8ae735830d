"""What the AWS Neuron DRA driver documents, for the tests of claims written for it.

From its attribute reference and examples (Neuron SDK docs, `deploy/eks/dra.rst`,
"Neuron DRA Driver Attributes Reference" and "Rich interface for resource requests"):
each attribute it publishes with its type and where, and claims that select by them
as its users write them. Each claim must run here unchanged, on the simulator and on
the real scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

# name -> (CEL value type, the instance types AWS publishes it on). Short names are in
# the driver's domain `neuron.aws.com`; `capacityBlockId` (UltraServers) is the one
# not published here: its only source is the EC2 API (docs/claim-authors/devices.md).
ATTRIBUTES: dict[str, tuple[str, str]] = {
    "deviceId": ("int", "all"),
    "instanceType": ("string", "all"),
    "neuronDriverVersion": ("string", "all"),
    "draDriverVersion": ("version", "all"),
    "resourceType": ("string", "all"),
    "networkNodeLayer1": ("string", "all"),
    "networkNodeLayer2": ("string", "all"),
    "networkNodeLayer3": ("string", "all"),
    "topology_x": ("int", "trn, not UltraServer, more than one device"),
    "topology_y": ("int", "trn, not UltraServer, more than one device"),
    "topology4_id": ("int", "trn, not UltraServer, more than one device"),
    "topology8_id": ("int", "trn, not UltraServer, 8 devices or more"),
    "resource.aws.com/devicegroup1_id": ("string", "EFA instance types"),
    "resource.aws.com/devicegroup4_id": ("string", "EFA instance types"),
    "resource.aws.com/devicegroup8_id": ("string", "EFA instance types"),
    "resource.aws.com/devicegroup16_id": ("string", "EFA instance types"),
}
NOT_PUBLISHED = ("capacityBlockId",)


@dataclass(frozen=True)
class AwsClaim:
    name: str
    count: int
    cel: str
    match: str | None  # a matchAttribute, or None
    devices: frozenset[frozenset[int]]  # the device sets a trn2.48xlarge may give

    def template(self) -> str:
        """The ResourceClaimTemplate, as AWS's examples write one."""
        constraints = (
            "      constraints:\n      - requests: [neurons]\n"
            f"        matchAttribute: {self.match}\n"
            if self.match
            else ""
        )
        return (
            "apiVersion: resource.k8s.io/v1\n"
            "kind: ResourceClaimTemplate\n"
            f"metadata:\n  name: {self.name}\n"
            "spec:\n  spec:\n    devices:\n"
            "      requests:\n      - name: neurons\n        exactly:\n"
            "          deviceClassName: neuron.aws.com\n"
            "          allocationMode: ExactCount\n"
            f"          count: {self.count}\n"
            f'          selectors:\n          - cel:\n              expression: "{self.cel}"\n'
            + constraints
        )


def _sets(*sets: range) -> frozenset[frozenset[int]]:
    return frozenset(frozenset(s) for s in sets)


ROWS = _sets(*(range(r, r + 4) for r in range(0, 16, 4)))
HALVES = _sets(range(8), range(8, 16))
ATTR = "device.attributes['neuron.aws.com']"
TRN2 = f"{ATTR}.instanceType == 'trn2.48xlarge'"
CLAIMS = (
    # "I want the pod to use devices in row 1 of the topology."
    AwsClaim("row-1-trn2", 4, f"{TRN2} && {ATTR}.topology_x == 1", None, _sets(range(4, 8))),
    AwsClaim("column-2-trn2", 4, f"{TRN2} && {ATTR}.topology_y == 2", None, _sets(range(2, 16, 4))),
    AwsClaim("row-by-topology4-trn2", 4, TRN2, "neuron.aws.com/topology4_id", ROWS),
    AwsClaim("half-by-topology8-trn2", 8, TRN2, "neuron.aws.com/topology8_id", HALVES),
    # "Connected neuron devices from trn2 ... running the specified Neuron driver version."
    AwsClaim(
        "2.25-driver-trn2",
        8,
        f"{TRN2} && {ATTR}.neuronDriverVersion == '2.25.4.0'",
        "resource.aws.com/devicegroup8_id",
        HALVES,
    ),
    AwsClaim(
        "first-two-devices",
        2,
        f"{ATTR}.resourceType == 'neuron_device' && {ATTR}.deviceId in [0, 1] && "
        f"{ATTR}.draDriverVersion.isGreaterThan(semver('0.0.1'))",
        None,
        _sets(range(2)),
    ),
)
DRIVER_VERSION = "2.25.4.0"  # the nodes the claims run on
