"""EFA pairing of Neuron devices, per instance family (AWS-published data).

The tables are those of github.com/aws-neuron/connected-device-maps-over-efa-for-neuron
(lookup/neuron/*.json, lookup/config/*.json), which the AWS EFA driver embeds.

On EFA instances each Neuron device has a paired EFA NIC. Group ids derived from
those NICs' PCI addresses equal the AWS EFA driver's, so one claim can ask for
Neuron devices and the NICs wired to them with a single matchAttribute.
"""

from __future__ import annotations

import hashlib

from neuron_dra.hardware.instance_types import family_of

# Neuron device index -> PCI address of its paired EFA NIC.
_ADDRESSES: dict[str, tuple[str, ...]] = {
    "trn1": (
        "0000:10:1a.0",
        "0000:10:1a.0",
        "0000:a0:1a.0",
        "0000:a0:1a.0",
        "0000:20:19.0",
        "0000:20:19.0",
        "0000:90:19.0",
        "0000:90:19.0",
        "0000:20:1a.0",
        "0000:20:1a.0",
        "0000:90:1a.0",
        "0000:90:1a.0",
        "0000:10:19.0",
        "0000:10:19.0",
        "0000:a0:19.0",
        "0000:a0:19.0",
    ),
    "trn1n": (
        "0000:10:17.0",
        "0000:10:1a.0",
        "0000:a0:17.0",
        "0000:a0:1a.0",
        "0000:20:19.0",
        "0000:20:18.0",
        "0000:90:19.0",
        "0000:90:18.0",
        "0000:20:17.0",
        "0000:20:1a.0",
        "0000:90:17.0",
        "0000:90:1a.0",
        "0000:10:19.0",
        "0000:10:18.0",
        "0000:a0:19.0",
        "0000:a0:18.0",
    ),
    "trn2": (
        "0000:c9:00.0",
        "0000:b4:00.0",
        "0000:b3:00.0",
        "0000:ca:00.0",
        "0000:6c:00.0",
        "0000:57:00.0",
        "0000:56:00.0",
        "0000:6d:00.0",
        "0000:98:00.0",
        "0000:83:00.0",
        "0000:82:00.0",
        "0000:99:00.0",
        "0000:f5:00.0",
        "0000:e0:00.0",
        "0000:df:00.0",
        "0000:f6:00.0",
    ),
    "trn3": (
        "0000:be:00.0",
        "0000:a9:00.0",
        "0000:a8:00.0",
        "0000:bf:00.0",
        "0000:61:00.0",
        "0000:4c:00.0",
        "0000:4b:00.0",
        "0000:62:00.0",
        "0000:8d:00.0",
        "0000:78:00.0",
        "0000:77:00.0",
        "0000:8e:00.0",
        "0000:ea:00.0",
        "0000:d5:00.0",
        "0000:d4:00.0",
        "0000:eb:00.0",
    ),
    "trn3pds": (
        "0000:a9:00.0",
        "0000:a8:00.0",
        "0000:bf:00.0",
        "0000:be:00.0",
        "0000:d5:00.0",
        "0000:d4:00.0",
        "0000:eb:00.0",
        "0000:ea:00.0",
        "0000:4c:00.0",
        "0000:4b:00.0",
        "0000:62:00.0",
        "0000:61:00.0",
        "0000:78:00.0",
        "0000:77:00.0",
        "0000:8e:00.0",
        "0000:8d:00.0",
    ),
}

# Instance family -> key of _ADDRESSES: UltraServer and variant families share a board.
_FAMILY_MAP: dict[str, str] = {
    "trn1": "trn1",
    "trn1n": "trn1n",
    "trn2": "trn2",
    "trn2e": "trn2",
    "trn2u": "trn2",
    "trn3": "trn3",
    "trn3p": "trn3",
    "trn3pd98": "trn3",
    "trn3s": "trn3",
    "trn3-dev0": "trn3pds",
    "trn3-dev1": "trn3pds",
}

_EFA_INSTANCE_TYPES = frozenset(
    {
        "trn1.32xlarge",
        "trn1n.32xlarge",
        "trn2.48xlarge",
        "trn2e.48xlarge",
        "trn2u.48xlarge",
        "trn3.48xlarge",
        "trn3p.48xlarge",
        "trn3pd98.48xlarge",
        "trn3s.48xlarge",
        "trn3-dev0.48xlarge",
        "trn3-dev1.48xlarge",
    }
)


def efa_addresses(instance_type: str) -> tuple[str, ...] | None:
    """PCI addresses of the EFA NICs paired with devices 0..N-1, if the instance has EFA."""
    if instance_type not in _EFA_INSTANCE_TYPES:
        return None
    return _ADDRESSES[_FAMILY_MAP[family_of(instance_type)]]


def group_id(addresses: tuple[str, ...] | list[str]) -> str:
    """The EFA driver's id for a device group: sha256 of its sorted distinct NIC addresses."""
    joined = ",".join(sorted(set(addresses)))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]
