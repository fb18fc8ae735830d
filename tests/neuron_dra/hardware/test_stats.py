from __future__ import annotations

from pathlib import Path

import pytest

from neuron_dra.agent.telemetry.devicemetrics import device_samples
from neuron_dra.hardware.driverformats import FAKE_VERSIONS, beyond_known, format_for
from neuron_dra.hardware.fakenode import Counters
from neuron_dra.hardware.stats import DeviceStats, Power, parse_power, read_device_stats
from tests.sysfs_tree import FakeNode, write

DEVICES = Path("sys/devices/virtual/neuron_device")
DEV3 = DEVICES / "neuron3"


def stats_of(root: Path, index: int = 3, cores: int | None = 8) -> DeviceStats:
    return read_device_stats(root, index, cores)


def test_power_is_the_drivers_five_fields_in_percent() -> None:
    assert parse_power("POWER_STATUS_VALID,1764115260,12.34,56.78,30.05\n") == Power(
        "POWER_STATUS_VALID", 1764115260, 0.1234, 0.5678, 0.3005
    )
    no_data = parse_power("POWER_STATUS_NO_DATA,1764115260,0.00,0.00,0.00")
    assert not no_data.valid


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0\n", "1 comma-separated fields, not 5"),
        ("VALID,1,2.00,3.00,4.00", "unknown status 'VALID'"),
        ("POWER_STATUS_VALID,1,2.0,3.00,4.00", "'2.0' is not a percentage with two decimals"),
        ("POWER_STATUS_VALID,x,2.00,3.00,4.00", "not a decimal number of ASCII digits"),
    ],
)
def test_anything_else_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_power(text)


@pytest.mark.parametrize("version", FAKE_VERSIONS)
def test_every_release_reads_back_idle(fake_node: FakeNode, version: str) -> None:
    root = fake_node("trn2.48xlarge", driver_version=version, counters=Counters.ALL)
    stats = stats_of(root)
    assert stats.problems == ()
    assert stats.power is not None and stats.power.valid and stats.power.avg_ratio == 0
    assert stats.memory_used_bytes == 0
    assert stats.executions == dict.fromkeys(
        ("success", "failure", "timeout", "exec_bad_input", "hw_error"), 0
    )
    driver = format_for(version)
    assert set(stats.ecc) == set(driver.ecc)
    assert (stats.heartbeat is not None) == ("healthcheck_heartbeat" in driver.health_status)


def test_a_busy_device_sums_its_cores(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge")
    write(
        root, f"{DEV3}/stats/power/utilization", "POWER_STATUS_VALID,1764115260,20.00,95.50,61.25\n"
    )
    for core, used in ((0, 1 << 30), (5, 3 << 30)):
        memory = f"{DEV3}/neuron_core{core}/stats/memory_usage/device_mem"
        write(root, f"{memory}/total", f"{used}\n")
        write(root, f"{memory}/present", "4096\n")  # the last change, not a level
        write(root, f"{DEV3}/neuron_core{core}/stats/status/success/total", "10\n")
    write(root, f"{DEV3}/neuron_core1/stats/status/timeout/total", "2\n")
    write(root, f"{DEV3}/stats/hardware/mem_ecc_repairable_uncorrected", "1\n")
    samples = {
        (s.name, dict(s.labels).get("status") or dict(s.labels).get("kind")): s.value
        for s in device_samples(stats_of(root), "node-a")
    }
    assert samples[("neuron_dra_device_power_draw_ratio", None)] == pytest.approx(0.6125)
    assert samples[("neuron_dra_device_memory_used_bytes", None)] == 4 << 30
    assert samples[("neuron_dra_device_executions_total", "success")] == 20
    assert samples[("neuron_dra_device_executions_total", "timeout")] == 2
    assert samples[("neuron_dra_device_ecc_errors_total", "repairable_uncorrected")] == 1


def test_no_valid_power_minute_is_no_reading(fake_node: FakeNode) -> None:
    root = fake_node("trn1.32xlarge")
    write(
        root, f"{DEV3}/stats/power/utilization", "POWER_STATUS_NO_DATA,1764115260,0.00,0.00,0.00\n"
    )
    names = {s.name for s in device_samples(stats_of(root), "n")}
    assert "neuron_dra_device_power_draw_ratio" not in names


def test_a_garbled_file_is_named_and_the_rest_read(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", counters=Counters.READ)
    write(root, f"{DEV3}/stats/power/utilization", "0\n")  # what the old fake wrote
    write(root, f"{DEV3}/neuron_core2/stats/status/failure/total", "-1\n")
    stats = stats_of(root)
    assert stats.problems == (
        f"/{DEV3}/stats/power/utilization: 1 comma-separated fields, not 5",
        f"/{DEV3}/neuron_core2/stats/status/failure/total: not a decimal number of ASCII digits",
    )
    assert stats.power is None and stats.memory_used_bytes == 0


def test_inferentia_reports_no_ecc(fake_node: FakeNode) -> None:
    root = fake_node("inf1.xlarge")
    stats = stats_of(root, 0, 4)
    assert stats.ecc == {} and stats.problems == ()


@pytest.mark.parametrize(
    ("version", "mode"), [("2.24.7.0", 0o400), ("2.27.4.0", 0o400), ("2.28.0.0", 0o444)]
)
def test_core_count_is_world_readable_from_2_28(
    fake_node: FakeNode, version: str, mode: int
) -> None:
    root = fake_node("trn1.2xlarge", driver_version=version)
    for name in ("core_count", "connected_devices"):
        assert (root / DEVICES / "neuron0" / name).stat().st_mode & 0o777 == mode
    assert (root / DEVICES / "neuron0/core_count").read_text() == "2"  # no newline


def test_the_full_tree_has_every_counter_of_the_drivers_tables(fake_node: FakeNode) -> None:
    root = fake_node("trn2.48xlarge", driver_version="2.30.2.0", counters=Counters.ALL)
    core = root / DEV3 / "neuron_core7/stats"
    assert len(list((core / "status").iterdir())) == 24
    assert len([p for p in (core / "memory_usage/device_mem").iterdir() if p.is_dir()]) == 11
    assert (core / "other_info/nc_time_in_use/present").read_text() == "0\n"
    assert (root / DEV3 / "stats/hardware/health_status/unhealthy_components").read_text() == "\n"
    assert (
        root / DEV3 / "stats/hardware/health_status/hw_error_event"
    ).stat().st_mode & 0o777 == 0o444
    assert (root / DEV3 / "stats/power/utilization_raw").read_text() == (
        "die,util_bips,counter\n0,0,1\n1,0,1\n"
    )


def test_versions_map_to_the_layout_of_their_release() -> None:
    assert format_for("2.27.4.0").version == "2.24.7.0"
    assert format_for("2.29.1.0").version == "2.29.0.0"
    assert format_for("2.31.7.0").version == "2.30.2.0"
    assert beyond_known("2.31.7.0") and not beyond_known("2.30.9.0")
    with pytest.raises(ValueError, match="not a driver version"):
        format_for("latest")
