"""A claim as the kubelet names it: namespace, name and UID.

Apart from `claims`, so the kubelet's gRPC side can name claims before the rest
of the agent (the opaque config schema among it) is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"
