"""scripts/debian-packages.sh, which lists an image's Debian packages with the sha256 of
the .deb each came from, on a root file system made here: a dpkg status file and the .deb
files of an apt cache, built with dpkg-deb."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.release_workflow import REPO

SCRIPT = REPO / "scripts/debian-packages.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-deb") is None or shutil.which("dpkg-query") is None,
    reason="needs dpkg-deb and dpkg-query",
)


def deb(rootfs: Path, package: str, version: str, architecture: str) -> str:
    """A .deb of `package` in `rootfs`'s apt cache; its sha256."""
    tree = rootfs.parent / "trees" / package
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: {architecture}\n"
        "Maintainer: nobody <nobody@example.com>\nDescription: a test package\n"
    )
    archives = rootfs / "var/cache/apt/archives"
    archives.mkdir(parents=True, exist_ok=True)
    path = archives / f"{package}_{version.replace(':', '%3a')}_{architecture}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(tree), str(path)],
        check=True,
        capture_output=True,
    )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def installed(rootfs: Path, *packages: tuple[str, str, str, str]) -> None:
    """A dpkg status file of `packages`: (name, version, architecture, status)."""
    admin = rootfs / "var/lib/dpkg"
    admin.mkdir(parents=True, exist_ok=True)
    (admin / "status").write_text(
        "".join(
            f"Package: {name}\nStatus: {status}\nPriority: optional\nVersion: {version}\n"
            f"Architecture: {arch}\nMaintainer: nobody <nobody@example.com>\n"
            "Description: a test package\n\n"
            for name, version, arch, status in packages
        )
    )


def run(rootfs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(rootfs)], capture_output=True, text=True, check=False
    )


def test_each_installed_package_is_listed_with_its_debs_hash(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    python = deb(rootfs, "python3.11", "3.11.2-6+deb12u6", "amd64")
    tzdata = deb(rootfs, "tzdata", "2025b-0+deb12u2", "all")
    epoch = deb(rootfs, "libc6", "1:2.36-9+deb12u13", "amd64")
    installed(
        rootfs,
        ("tzdata", "2025b-0+deb12u2", "all", "install ok installed"),
        ("python3.11", "3.11.2-6+deb12u6", "amd64", "install ok installed"),
        ("libc6", "1:2.36-9+deb12u13", "amd64", "install ok installed"),
        ("gone", "1.0", "amd64", "deinstall ok config-files"),
    )
    done = run(rootfs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"libc6 1:2.36-9+deb12u13 amd64 {epoch}",
        f"python3.11 3.11.2-6+deb12u6 amd64 {python}",
        f"tzdata 2025b-0+deb12u2 all {tzdata}",
    ]


@pytest.mark.parametrize("fault", ["no deb", "another version", "a deb not installed"])
def test_a_package_without_its_deb_is_refused(tmp_path: Path, fault: str) -> None:
    """Every line must be a hash of what was installed: a package installed from elsewhere,
    or a .deb that was not installed, fails the list."""
    rootfs = tmp_path / "rootfs"
    deb(rootfs, "tzdata", "2025b-0+deb12u2", "all")
    packages = [("tzdata", "2025b-0+deb12u2", "all", "install ok installed")]
    if fault == "no deb":
        packages.append(("bash", "5.2.15-2+b8", "amd64", "install ok installed"))
    elif fault == "another version":
        packages = [("tzdata", "2025b-0+deb12u1", "all", "install ok installed")]
    else:
        deb(rootfs, "bash", "5.2.15-2+b8", "amd64")
    installed(rootfs, *packages)
    done = run(rootfs)
    assert done.returncode == 1, done.stdout
    assert "debian-packages: the installed packages are not the apt cache's .deb files" in (
        done.stderr
    )
    assert done.stdout == ""


def test_no_root_file_system_is_refused(tmp_path: Path) -> None:
    done = run(tmp_path / "none")
    assert done.returncode == 2
    assert "usage:" in done.stderr
