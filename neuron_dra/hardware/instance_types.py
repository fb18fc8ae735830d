"""The catalogue of Neuron instance types: what each one's hardware is.

These are facts about AWS hardware, not configuration. Discovery checks what
sysfs says against them, and topology derives connected device sets from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Shape(StrEnum):
    """How a node's Neuron devices are wired together."""

    SINGLE = "single"
    LINE = "line"
    RING = "ring"
    TORUS = "torus"  # 4x4 2D torus


@dataclass(frozen=True)
class InstanceType:
    name: str
    devices: int
    cores_per_device: int  # physical NeuronCores
    memory_gib_per_device: int
    shape: Shape
    pci_device_id: int
    has_lnc: bool = False
    ultraserver: bool = False

    @property
    def family(self) -> str:
        return family_of(self.name)


PCI_VENDOR_ID = 0x1D0F
_INF1, _INF2, _TRN1, _TRN2 = 0x7064, 0x7264, 0x7164, 0x7364

_CATALOGUE = (
    InstanceType("inf1.xlarge", 1, 4, 8, Shape.SINGLE, _INF1),
    InstanceType("inf1.2xlarge", 1, 4, 8, Shape.SINGLE, _INF1),
    InstanceType("inf1.6xlarge", 4, 4, 8, Shape.RING, _INF1),
    InstanceType("inf1.24xlarge", 16, 4, 8, Shape.RING, _INF1),
    InstanceType("inf2.xlarge", 1, 2, 32, Shape.SINGLE, _INF2),
    InstanceType("inf2.8xlarge", 1, 2, 32, Shape.SINGLE, _INF2),
    InstanceType("inf2.24xlarge", 6, 2, 32, Shape.LINE, _INF2),
    InstanceType("inf2.48xlarge", 12, 2, 32, Shape.RING, _INF2),
    InstanceType("trn1.2xlarge", 1, 2, 32, Shape.SINGLE, _TRN1),
    InstanceType("trn1.32xlarge", 16, 2, 32, Shape.TORUS, _TRN1),
    InstanceType("trn1n.32xlarge", 16, 2, 32, Shape.TORUS, _TRN1),
    InstanceType("trn2.3xlarge", 1, 8, 96, Shape.SINGLE, _TRN2, has_lnc=True),
    InstanceType("trn2.48xlarge", 16, 8, 96, Shape.TORUS, _TRN2, has_lnc=True),
    InstanceType("trn2u.48xlarge", 16, 8, 96, Shape.TORUS, _TRN2, has_lnc=True, ultraserver=True),
)

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _CATALOGUE}

# Families whose silicon fuses physical cores into logical ones; lets an
# instance type missing from the catalogue still get the right LNC default.
LNC_FAMILIES = frozenset({"trn2", "trn2u", "trn2e", "trn3"})
DEFAULT_LNC = 2


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def lookup(instance_type: str) -> InstanceType | None:
    return INSTANCE_TYPES.get(instance_type)
