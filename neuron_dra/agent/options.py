"""The node agent's options, as `neuron-dra run` parses them from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The kubelet's PodResources API is asked at most once per this many seconds, however
# many scrape: its server allows 100 calls a second to all its clients together (device
# monitors, node agents), and a scrape per scraper per second would take them.
POD_RESOURCES_INTERVAL_S = 15.0


@dataclass(frozen=True)
class RunOptions:
    node_name: str
    sysfs_root: Path
    cdi_root: Path
    registrar_dir: Path
    plugins_dir: Path
    kubeconfig: Path | None = None
    pod_uid: str | None = None
    health_port: int | None = None
    health_address: str = "127.0.0.1"
    # Abstract unix socket of the kubelet's exec probes (`kubelet.probeclient`); None: none.
    probe_socket: str | None = None
    ultraserver_devices: str = "auto"  # or a UltraServerDevices value
    neuron_cores: bool = True  # each logical NeuronCore a device, where counters are served
    rediscover_interval_s: float = 60.0
    # How long a claim holds a device whole before the slices leave out its cores.
    withdraw_after_s: float = 60.0
    health_interval_s: float = 5.0
    health_recovery_s: float = 0.0  # 0: a device marked unhealthy stays so until restart
    kmsg: Path | None = None  # default: <sysfs root>/dev/kmsg
    unhealthy_effect: str = "NoSchedule"  # or NoExecute: evict pods using an unhealthy device
    metrics_port: int | None = None
    # /metrics answers only bearer tokens of users allowed to get it (TokenReview, SAR).
    metrics_auth: bool = True
    # A still firmware heartbeat marks the device unhealthy after this long; 0: never.
    health_heartbeat_timeout_s: float = 0.0
    # The kubelet's PodResources API, which says which containers hold which devices.
    pod_resources_path: Path | None = None  # default: beside the plugins directory
    # Where the container's mounts are read, to see that the read-only ones are so below.
    mountinfo: Path = Path("/proc/self/mountinfo")
    # It is asked at most once per this many seconds, however many scrape /metrics.
    pod_resources_interval_s: float = POD_RESOURCES_INTERVAL_S
    # Device metadata files (KEP-5304) bind-mounted into the claim's containers.
    device_metadata: bool = True
    # Each prepared claim's status.devices (KEP-4817), written and cleared by the agent.
    claim_status: bool = True

    @property
    def pod_resources_socket(self) -> Path:
        return self.pod_resources_path or self.plugins_dir.parent / "pod-resources/kubelet.sock"
