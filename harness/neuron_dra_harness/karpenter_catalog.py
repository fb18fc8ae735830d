"""What Karpenter's KWOK provider is told about Neuron instance types, and the
NodePool and KWOKNodeClass it provisions for: pure data, written to files and
applied by ``karpenter.py``.

The shapes are EC2's (vCPUs, GiB of memory); prices are on-demand list prices in
USD per hour, rounded, so that "the cheapest type that fits" means what it does on
EC2. The devices of each type are not here: they come from the driver's catalog
(``neuron-dra templates``), which the operator reads beside this file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

ZONE = "test-zone-a"
NODE_POOL = "neuron"
NODE_CLASS = "neuron"


@dataclass(frozen=True)
class Ec2Type:
    vcpus: int
    memory_gib: int
    price: float  # on-demand, USD per hour


EC2_TYPES: dict[str, Ec2Type] = {
    "inf1.xlarge": Ec2Type(4, 8, 0.228),
    "inf1.2xlarge": Ec2Type(8, 16, 0.362),
    "inf1.6xlarge": Ec2Type(24, 48, 1.18),
    "inf1.24xlarge": Ec2Type(96, 192, 4.721),
    "inf2.xlarge": Ec2Type(4, 16, 0.758),
    "inf2.8xlarge": Ec2Type(32, 128, 1.968),
    "inf2.24xlarge": Ec2Type(96, 384, 6.491),
    "inf2.48xlarge": Ec2Type(192, 768, 12.981),
    "trn1.2xlarge": Ec2Type(8, 32, 1.344),
    "trn1.32xlarge": Ec2Type(128, 512, 21.5),
    "trn1n.32xlarge": Ec2Type(128, 512, 24.78),
    "trn2.3xlarge": Ec2Type(12, 128, 2.235),
    "trn2.48xlarge": Ec2Type(192, 2048, 35.76),
    "trn2u.48xlarge": Ec2Type(192, 2048, 44.7),
    "trn3.48xlarge": Ec2Type(192, 2048, 53.64),
    "trn3p.48xlarge": Ec2Type(192, 2048, 53.64),
    "trn3-dev0.48xlarge": Ec2Type(192, 2048, 53.64),
    "trn3-dev1.48xlarge": Ec2Type(192, 2048, 53.64),
}


def _requirement(key: str, value: str) -> Obj:
    return {"key": key, "operator": "In", "values": [value]}


def kwok_instance_types(names: Iterable[str]) -> list[Obj]:
    """KWOK's instance types file (``--instance-types-file-path``) for `names`: one
    on-demand offering in one zone each, on linux/amd64."""
    out = []
    for name in names:
        if name not in EC2_TYPES:
            raise KeyError(f"no EC2 shape and price for {name!r}: add it to EC2_TYPES")
        shape = EC2_TYPES[name]
        offering = {
            "Price": shape.price,
            "Available": True,
            "Requirements": [
                _requirement("karpenter.sh/capacity-type", "on-demand"),
                _requirement("topology.kubernetes.io/zone", ZONE),
            ],
        }
        out.append(
            {
                "name": name,
                "offerings": [offering],
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": {
                    "cpu": str(shape.vcpus),
                    "memory": f"{shape.memory_gib}Gi",
                    "pods": "110",
                },
            }
        )
    return out


def cheapest(names: Iterable[str]) -> str:
    """The cheapest of `names` by on-demand price."""
    return min(names, key=lambda n: EC2_TYPES[n].price)


def node_class() -> Obj:
    """The KWOKNodeClass the NodePool refers to: nodes register at once."""
    return {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": NODE_CLASS},
        "spec": {"nodeRegistrationDelay": "0s"},
    }
