from __future__ import annotations

import logging
from pathlib import Path

import pytest

from neuron_dra.agent.telemetry.mounts import (
    Check,
    Mount,
    check,
    check_root,
    parse,
    read_only_samples,
)

# The plugin container's /proc/self/mountinfo under containerd, trimmed: the host's
# /sys, /dev and /opt/aws/neuron bound read-only under /host. Each mount's own
# options (sixth field) say ro or rw; the filesystem's (after " - ") do not matter.
TOP = """\
1180 1090 0:393 / / ro,relatime master:412 - overlay overlay rw,lowerdir=/l1,upperdir=/u
1181 1180 0:396 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1182 1180 0:397 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
1183 1182 0:398 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
1184 1180 259:1 /var/lib/kubelet/pods/0f3c/tmp /tmp rw,relatime - xfs /dev/nvme0n1p1 rw
1190 1180 0:21 / /host/sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs rw
1197 1180 0:5 / /host/dev ro,nosuid,relatime - devtmpfs devtmpfs rw,size=393216k,mode=755
1202 1180 259:1 /opt/aws/neuron /host/opt/aws/neuron ro,relatime - xfs /dev/nvme0n1p1 rw,noatime
"""
SUBMOUNTS = """\
1191 1190 0:6 / /host/sys/kernel/security {o},nosuid,nodev,noexec - securityfs securityfs rw
1192 1190 0:25 / /host/sys/fs/cgroup {o},nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate
1194 1190 0:27 / /host/sys/fs/bpf {o},nosuid,nodev,noexec,relatime - bpf bpf rw,mode=700
1195 1190 0:7 / /host/sys/kernel/debug {o},nosuid,nodev,noexec,relatime - debugfs debugfs rw
1198 1197 0:22 / /host/dev/shm {o},nosuid,nodev - tmpfs tmpfs rw,inode64
1199 1197 0:23 / /host/dev/pts {o},nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620
1200 1197 0:20 / /host/dev/mqueue {o},nosuid,nodev,noexec,relatime - mqueue mqueue rw
1201 1197 0:29 / /host/dev/huge\\040pages {o},relatime - hugetlbfs hugetlbfs rw,pagesize=2M
"""
EFFECTIVE = TOP + SUBMOUNTS.format(o="ro")  # mount_setattr(AT_RECURSIVE) reached every one
FALLEN_BACK = TOP + SUBMOUNTS.format(o="rw")  # only the top made read-only
POINTS = ("/host/sys", "/host/dev", "/host/opt/aws/neuron")


def test_mountinfo_lines_give_each_mount_and_its_own_read_only_option() -> None:
    mounts = parse(FALLEN_BACK)
    assert mounts[5] == Mount("/host/sys", True)
    assert Mount("/host/sys/fs/cgroup", False) in mounts  # the filesystem's rw is not its own
    assert Mount("/host/dev/huge pages", False) in mounts  # \040 is a space
    with pytest.raises(ValueError, match="mountinfo line 2"):
        parse("22 27 0:21 / /proc rw - proc proc rw\nnot a mount\n")


def test_recursive_read_only_that_took_effect() -> None:
    checks = check(parse(EFFECTIVE), POINTS)
    assert checks == tuple(Check(p, ()) for p in POINTS)
    assert all(c.effective for c in checks)


def test_recursive_read_only_that_fell_back_names_what_stays_writable() -> None:
    checks = check(parse(FALLEN_BACK), (*POINTS, "/host/run"))  # /host/run: no mount
    assert checks == (
        Check(
            "/host/sys",
            (
                "/host/sys/fs/bpf",
                "/host/sys/fs/cgroup",
                "/host/sys/kernel/debug",
                "/host/sys/kernel/security",
            ),
        ),
        Check(
            "/host/dev",
            ("/host/dev/huge pages", "/host/dev/mqueue", "/host/dev/pts", "/host/dev/shm"),
        ),
        Check("/host/opt/aws/neuron", ()),
    )
    assert {s.labels: s.value for s in read_only_samples(checks)} == {
        (("state", "effective"),): 1,
        (("state", "not_effective"),): 2,
    }


def test_a_top_left_read_write_is_named_too() -> None:
    """A runtime that ignored `readOnly` altogether: the top is writable as well."""
    text = EFFECTIVE.replace("/host/opt/aws/neuron ro,", "/host/opt/aws/neuron rw,")
    assert check(parse(text), POINTS)[2] == Check("/host/opt/aws/neuron", ("/host/opt/aws/neuron",))


def test_a_fallback_is_a_warning_naming_mounts_and_runtimes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(FALLEN_BACK)
    with caplog.at_level(logging.WARNING):
        checks = check_root(Path("/host"), mountinfo)
        assert [c.point for c in checks] == list(POINTS)
        mountinfo.write_text(EFFECTIVE)
        assert all(c.effective for c in check_root(Path("/host"), mountinfo))
    [warning] = [r.getMessage() for r in caplog.records]
    assert "host mounts /host/sys, /host/dev are not read-only all the way down" in warning
    assert "/host/dev/shm" in warning and "containerd 2.0 or CRI-O 1.30" in warning
    assert "runc 1.1" in warning and "Linux 5.12" in warning


def test_a_root_without_mounts_or_mountinfo_checks_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(FALLEN_BACK)
    assert check_root(tmp_path, mountinfo) == ()  # a simulated node: plain directories
    with caplog.at_level(logging.WARNING):
        assert check_root(Path("/host"), tmp_path / "absent") == ()
    assert "recursive read-only mounts not checked" in caplog.text
