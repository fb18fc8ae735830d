"""Fast checks of the image builders: scripts/build-image.sh's arguments and lint, and
the pieces of harness/neuron_dra_harness/images.py that need no umoci, mmdebstrap or root.

Building the images themselves takes a minute and root; the end-to-end tests do it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_dra_harness import images

SCRIPT = images.BUILD_SCRIPT


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=60
    )


@pytest.mark.parametrize(
    "args",
    [(), ("a.tar", "localhost/x:1", "extra"), ("--help",), ("image.txt",), ("/nonexistent/a.tar",)],
)
def test_script_rejects_bad_arguments(args: tuple[str, ...]) -> None:
    done = run_script(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr


def test_script_refuses_another_architecture(tmp_path: Path) -> None:
    """The locks hold the x86_64 wheels' hashes only: another host is refused before
    anything is fetched (and before the root check, so this runs as any user)."""
    (tmp_path / "uname").write_text("#!/bin/sh\necho aarch64\n")
    (tmp_path / "uname").chmod(0o755)
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "a.tar")],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        check=False,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "the host is aarch64: the locked wheels are x86_64 ones" in done.stderr
    assert not (tmp_path / "a.tar").exists()


def test_driver_hash_covers_every_input() -> None:
    assert images.driver_hash() == images.driver_hash()
    inputs = {
        str(path.relative_to(images.REPO))
        for path in images._files(images.REPO / name for name in images.DRIVER_INPUTS)
    }
    assert {
        "scripts/build-image.sh",
        "requirements/image.txt",
        "requirements/build.txt",
        "pyproject.toml",
    } <= inputs
    assert {"neuron_dra/__init__.py", "api/__init__.py", "consts/__init__.py"} <= inputs
    assert not any("__pycache__" in p for p in inputs)


def test_digest_follows_content(tmp_path: Path) -> None:
    path = tmp_path / "pause"
    path.write_bytes(b"one")
    first = images._digest(path)
    path.write_bytes(b"two")
    assert images._digest(path) != first


def test_is_static() -> None:
    assert not images.is_static(Path(sys.executable).resolve())
    assert not images.is_static(SCRIPT)
    busybox = images.BUSYBOX
    if busybox.exists() and "busybox-static" not in images.missing_tools():
        assert images.is_static(busybox)


def test_annotate_names_the_tagged_manifest(tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    manifest = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": "sha256:" + "0" * 64,
        "size": 1,
        "annotations": {"org.opencontainers.image.ref.name": "1"},
    }
    index.write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
    images._annotate(index, "1", "localhost/e2e-busybox:1")
    (written,) = json.loads(index.read_text())["manifests"]
    assert written["annotations"] == {
        "org.opencontainers.image.ref.name": "1",
        "io.containerd.image.name": "localhost/e2e-busybox:1",
    }
    with pytest.raises(RuntimeError, match="0 manifests tagged"):
        images._annotate(index, "2", "localhost/x:2")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBIAN_SNAPSHOT": "2026-11-25"}, "DEBIAN_SNAPSHOT is no snapshot.debian.org time"),
        (
            {"DEBIAN_SNAPSHOT": "20261125T000000Z;x"},
            "DEBIAN_SNAPSHOT is no snapshot.debian.org time",
        ),
        (
            {"DEBIAN_SNAPSHOT": "20261125T000000Z", "DEBIAN_MIRROR": "http://m/debian"},
            "DEBIAN_SNAPSHOT names the mirrors",
        ),
        (
            {"DEBIAN_SNAPSHOT": "20261125T000000Z", "DEBIAN_SECURITY_MIRROR": "http://m/s"},
            "DEBIAN_SNAPSHOT names the mirrors",
        ),
    ],
)
def test_a_snapshot_pin_is_a_time_and_alone(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    """A snapshot that is not snapshot.debian.org's time, or one beside a mirror that would
    go unused, is refused before anything is fetched (as any user)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEBIAN_")}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "a.tar")],
        capture_output=True,
        text=True,
        env=clean | env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "a.tar").exists()
