"""The test side's handle on a running ``kubeletside`` (the kubelet
stand-in built from ``go/k8s/cmd/kubeletside``): its directories, its
JSON-lines report, its status server, and the annotations it writes on pods.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from neuron_dra_harness.cluster_api import ClusterApi, Obj
from neuron_dra_harness.processes import Component

KUBELETSIDE_CDI_ANNOTATION = "kubeletside.neuron.test/cdi-devices"
KUBELETSIDE_ERROR_ANNOTATION = "kubeletside.neuron.test/prepare-error"


@dataclass
class KubeletSide:
    """A running ``kubeletside`` for one simulated node."""

    node_name: str
    root_dir: Path
    cdi_dir: Path
    report_file: Path
    status_url: str
    component: Component
    cluster: ClusterApi = field(repr=False)

    @property
    def registry_dir(self) -> Path:
        """Where DRA plugins put their registration sockets."""
        return self.root_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Parent dir of the plugins' DRA sockets (``plugins/<driver>/dra.sock``)."""
        return self.root_dir / "plugins"

    @property
    def pod_resources_socket(self) -> Path:
        """The kubelet's PodResources API (v1 and v1alpha1), where the kubelet serves it."""
        return self.root_dir / "pod-resources" / "kubelet.sock"

    def report(self) -> list[Obj]:
        """All JSON-lines report entries so far."""
        if not self.report_file.exists():
            return []
        entries: list[Obj] = []
        for line in self.report_file.read_text().splitlines():
            if line.strip():
                entries.append(cast(Obj, json.loads(line)))
        return entries

    def report_events(self, event: str) -> list[Obj]:
        return [e for e in self.report() if e.get("event") == event]

    def registered_plugins(self) -> dict[str, str]:
        """Driver name -> DRA endpoint of the plugins currently registered."""
        with urllib.request.urlopen(self.status_url + "/plugins", timeout=5) as resp:
            return cast(dict[str, str], json.loads(resp.read()))

    def wait_for_plugin(self, driver: str, timeout: float = 30.0) -> str:
        """Wait until ``driver`` is registered; return its endpoint."""
        return self.cluster.wait_for(
            f"DRA driver {driver} registered on {self.node_name}",
            lambda: self.registered_plugins().get(driver),
            timeout,
        )

    def stop(self) -> None:
        self.component.stop()
