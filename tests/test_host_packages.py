"""scripts/test-packages.sh, which `make test` runs first: it installs what the
real-node tests need where it may, and otherwise says what will skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/test-packages.sh"


def run(path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{path}:/nonexistent"}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )


def stub(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
    (bin_dir / name).chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="installs as root")
def test_root_installs_what_is_missing(bin_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    stub(bin_dir, "apt-get", f'echo "$*" >> {calls}')
    for present in ("shellcheck", "runc", "umoci", "mmdebstrap", "iptables"):
        stub(bin_dir, present, "true")
    done = run(bin_dir)
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "update -qq"
    assert lines[1].startswith("install -y -qq ")
    assert "conntrack" in lines[1].split()
    assert "shellcheck" not in lines[1].split()


def test_nothing_is_installed_when_nothing_is_missing(bin_dir: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    stub(bin_dir, "apt-get", f'echo "$*" >> {calls}')
    for present in ("shellcheck", "runc", "umoci", "mmdebstrap", "iptables", "conntrack"):
        stub(bin_dir, present, "true")
    if not (Path("/usr/lib/cni/bridge").exists() and Path("/bin/busybox").exists()):
        pytest.skip("this machine lacks the CNI plugins or busybox, found by path")
    done = run(bin_dir)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert not calls.exists()


def test_without_apt_it_says_what_skips(bin_dir: Path) -> None:
    done = run(bin_dir)
    assert done.returncode == 0
    assert "not a Debian system; without shellcheck runc" in done.stderr


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV, reason="drops to nobody with setpriv")
def test_a_user_who_may_not_install_is_told_the_command() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # under /tmp: nobody may reach it
        bin_dir = Path(tmp)
        bin_dir.chmod(0o755)
        stub(bin_dir, "apt-get", "exit 99")
        script = shutil.copy(SCRIPT, bin_dir / SCRIPT.name)  # the checkout may be private
        done = subprocess.run(
            [
                str(SETPRIV),
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/bin/bash",
                str(script),
            ],
            env={"PATH": f"{bin_dir}:/nonexistent"},
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "  sudo apt-get install shellcheck runc" in done.stderr
