"""What each Neuron driver release writes in sysfs, as its source shows it.

Read from the aws-neuronx-dkms sources (`neuron_cdev.c`, `neuron_sysfs_metrics.c`,
`neuron_power.c`, the `vN/neuron_dhal_vN.c` hardware layers) of 2.24.7.0, 2.25.4.0,
2.26.5.0 and 2.30.2.0, the staging snapshots between them, and the release notes:

- 2.24 - 2.27: `core_count` and `connected_devices` mode 0400; `stats/hardware/`
  holds the uncorrected ECC counters (`sram_ecc_uncorrected`, `mem_ecc_uncorrected`,
  `mem_ecc_repairable_uncorrected`), on Trainium and Inferentia2 only.
- 2.28: both files 0444; `stats/hardware/health_status/` (Trainium2 and 3) with cached
  counts `hbm_ecc_err_count`, `repairable_hbm_ecc_err_count`, `sram_ecc_err_count`
  and the event counter `hw_error_event`.
- 2.29: `stats/power/utilization_raw`, per-die power in basis points;
  `fw_api_version` and `fw_build` beside `core_count`.
- 2.30: `health_status/` becomes `unhealthy_components` (the firmware's failing
  subsystems), `healthcheck_heartbeat` and `hw_error_event`; `stats/hardware/` gains
  `sram_ecc_corrected` and `mem_ecc_corrected`; execution counters are live.
- 2.31 (Neuron SDK 2.33) moved several nodes to new paths, not backwards compatibly;
  which ones its published sources do not show. The driver reads the 2.30 layout and
  says which of its sources it cannot find (see `health`).
"""

from __future__ import annotations

from dataclasses import dataclass

from neuron_dra.hardware.sysfsfile import ascii_int

HEALTH_STATUS_DIR = "stats/hardware/health_status"
UNCORRECTED_ECC = ("sram_ecc_uncorrected", "mem_ecc_uncorrected", "mem_ecc_repairable_uncorrected")
CORRECTED_ECC = ("sram_ecc_corrected", "mem_ecc_corrected")
HEALTH_COUNTS_228 = (
    "hbm_ecc_err_count",
    "repairable_hbm_ecc_err_count",
    "sram_ecc_err_count",
    "hw_error_event",
)
HEALTH_STATE_230 = ("unhealthy_components", "healthcheck_heartbeat", "hw_error_event")
# `unhealthy_components` names, in the firmware health register's bit order.
COMPONENTS = (
    "hbm",
    "firmware_service_api",
    "firmware_service_processor",
    "sram",
    "link_intraserver",
    "link_host",
    "link_efa",
    "link_interserver",
    "link_switch",
    "axi_fabric",
)
UNREACHABLE = "device_unreachable"  # what health_status files hold when a read failed


@dataclass(frozen=True)
class DriverFormat:
    """The sysfs files one release writes, where they differ between releases."""

    version: str  # the release this format was read from
    private_topology: bool  # core_count and connected_devices 0400 (root only)
    ecc: tuple[str, ...]  # stats/hardware/ counters, on Trainium and Inferentia2
    health_status: tuple[str, ...]  # stats/hardware/health_status/, Trainium2 and 3
    power_raw: bool  # stats/power/utilization_raw
    firmware_files: bool  # fw_api_version, fw_build

    @property
    def topology_mode(self) -> int:
        return 0o400 if self.private_topology else 0o444


FORMATS = (
    DriverFormat("2.24.7.0", True, UNCORRECTED_ECC, (), False, False),
    DriverFormat("2.28.0.0", False, UNCORRECTED_ECC, HEALTH_COUNTS_228, False, False),
    DriverFormat("2.29.0.0", False, UNCORRECTED_ECC, HEALTH_COUNTS_228, True, True),
    DriverFormat("2.30.2.0", False, CORRECTED_ECC + UNCORRECTED_ECC, HEALTH_STATE_230, True, True),
)
# The releases fake trees are written for; 2.31's layout is not known from its sources.
FAKE_VERSIONS = ("2.24.7.0", "2.25.4.0", "2.26.5.0", "2.27.4.0", "2.28.0.0", "2.29.0.0", "2.30.2.0")
NEWEST_KNOWN = FORMATS[-1].version


def release(version: str) -> tuple[int, ...] | None:
    """`2.30.2.0` -> (2, 30, 2, 0); None for anything else."""
    try:
        return tuple(ascii_int(part) for part in version.split("."))
    except ValueError:
        return None


def format_for(version: str) -> DriverFormat:
    """The format of the newest release at or before `version` (2.24's before it).

    Raises ValueError for a version that is not dotted numbers."""
    wanted = release(version)
    if wanted is None:
        raise ValueError(f"{version!r} is not a driver version such as {NEWEST_KNOWN}")
    chosen = FORMATS[0]
    for candidate in FORMATS:
        if (release(candidate.version) or ()) <= wanted:
            chosen = candidate
    return chosen


def beyond_known(version: str | None) -> bool:
    """Whether `version` is newer than the newest release whose layout is known (2.31
    moved nodes)."""
    wanted = release(version) if version else None
    return wanted is not None and wanted[:2] > (release(NEWEST_KNOWN) or ())[:2]
