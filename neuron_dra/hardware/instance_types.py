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
    # All-to-all through a NeuronSwitch (Trainium3): every set of devices is connected.
    SWITCHED = "switched"


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
    # UltraServer identity from the reservation (`reservation_id`, `node_id`, `node_cnt`),
    # not from an election between neighbours (`server_id_2/4`, `node_id_2/4`).
    reservation: bool = False

    @property
    def family(self) -> str:
        return family_of(self.name)


_INF1, _INF2, _TRN1, _TRN2 = 0x7064, 0x7264, 0x7164, 0x7364
_TRN3 = 0x7564  # Trainium3 also enumerates as 0x7565; both are the same silicon


def _trn3_48xlarge(name: str, *, reservation: bool) -> InstanceType:
    """A Trainium3 .48xlarge: 16 devices of 8 NeuronCore-v4 and 144 GiB, switched, LNC.

    Every one is an UltraServer node; the Neuron driver's platform table says which
    learn their place by election (as trn2u) and which from their reservation.
    """
    return InstanceType(
        name,
        16,
        8,
        144,
        Shape.SWITCHED,
        _TRN3,
        has_lnc=True,
        ultraserver=True,
        reservation=reservation,
    )


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
    _trn3_48xlarge("trn3p.48xlarge", reservation=False),
    _trn3_48xlarge("trn3.48xlarge", reservation=True),
    _trn3_48xlarge("trn3-dev0.48xlarge", reservation=True),
    _trn3_48xlarge("trn3-dev1.48xlarge", reservation=True),
)

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _CATALOGUE}

# Families whose silicon fuses physical cores into logical ones; lets an
# instance type missing from the catalogue still get the right LNC default.
LNC_FAMILIES = frozenset(
    {"trn2", "trn2u", "trn2e", "trn3", "trn3p", "trn3pd98", "trn3s", "trn3-dev0", "trn3-dev1"}
)
DEFAULT_LNC = 2


def family_of(instance_type: str) -> str:
    return instance_type.split(".", 1)[0]


def lookup(instance_type: str) -> InstanceType | None:
    return INSTANCE_TYPES.get(instance_type)
