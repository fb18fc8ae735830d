"""OCI archives of the images the end-to-end tests run under a real kubelet and containerd.

No container engine and no registry: each image is an OCI layout written by
``umoci`` and archived as a tar that ``ctr -n k8s.io images import`` loads under
the name in its index's ``io.containerd.image.name`` annotation.

- :func:`driver_image`: the driver, built by ``scripts/build-image.sh`` (the
  Dockerfile's equivalent, from Debian's packages with mmdebstrap; needs root).
- :func:`busybox_image`: the host's static busybox and a few applet links, for
  workload pods.
- :func:`pause_image`: one static binary as ``/pause``, the pod sandbox.

Archives are cached in ``cache_root() / "images"`` under a file name holding a
hash of every input, so a changed input builds a new archive and an unchanged
one costs a hash; parallel sessions share the cache under a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from neuron_dra_harness.build import cache_root

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-image.sh"
# What the driver's image is made of: the script, the locks, and everything the wheel packs.
DRIVER_INPUTS = (
    "scripts/build-image.sh",
    "requirements",
    "pyproject.toml",
    "README.md",
    "neuron_dra",
    "api",
    "consts",
)
DRIVER_REPOSITORY = "localhost/neuron-dra"
BUSYBOX_NAME = "localhost/e2e-busybox:1"
PAUSE_NAME = "localhost/e2e-pause:1"
BUSYBOX = Path("/bin/busybox")
BUSYBOX_APPLETS = (
    "sh",
    "ls",
    "cat",
    "env",
    "sleep",
    "echo",
    "test",
    "grep",
    "stat",
    "wc",
    "head",
    "sort",
)
# The examples' pods run `bash -c "export; ..."`, as written for an Ubuntu image; in
# this one bash is busybox's sh (whose `export` prints NAME='value' lines).
BASH = '#!/bin/sh\nexec /bin/sh "$@"\n'
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Bump when the way archives are assembled changes, so stale caches are rebuilt.
_FORMAT = "1"
_PT_INTERP = 3  # ELF program header type of a dynamic executable's loader


@dataclass(frozen=True)
class Image:
    name: str  # the reference a pod spec uses, e.g. "localhost/neuron-dra:e2e-<12 hex>"
    archive: Path  # OCI archive for `ctr -n k8s.io images import`


def cache_dir() -> Path:
    return cache_root() / "images"


def is_static(path: Path) -> bool:
    """Whether `path` is an ELF executable without a program interpreter (no libc needed)."""
    try:
        with path.open("rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2:
                return False  # not a 64-bit ELF file
            order = "<" if header[5] == 1 else ">"
            (phoff,) = struct.unpack_from(order + "Q", header, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", header, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    types = (struct.unpack_from(order + "I", table, i * phentsize)[0] for i in range(phnum))
    return _PT_INTERP not in types


def missing_tools() -> list[str]:
    """The host tools the images need that are absent, by Debian package name: umoci and
    mmdebstrap, and busybox-static for the busybox image (empty when all are there)."""
    missing = [tool for tool in ("umoci", "mmdebstrap") if shutil.which(tool) is None]
    if not is_static(BUSYBOX):
        missing.append("busybox-static")
    return missing


def _require(*tools: str) -> None:
    absent = [tool for tool in missing_tools() if tool in tools]
    if absent:
        raise RuntimeError(
            f"building the end-to-end images needs {', '.join(absent)}: "
            f"apt-get install {' '.join(absent)}"
        )


@contextmanager
def _locked(name: str) -> Iterator[Path]:
    # Parallel test sessions share the cache; one builds an archive, the others wait.
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        else:
            yield path


def _digest(*parts: bytes | Path) -> str:
    """sha256 over byte strings and files (by name relative to the checkout and content)."""
    digest = hashlib.sha256(_FORMAT.encode())
    for part in parts:
        if isinstance(part, Path):
            label = part.relative_to(REPO) if part.is_relative_to(REPO) else part
            digest.update(f"\0{label}\0{part.stat().st_size}\0".encode())
            digest.update(part.read_bytes())
        else:
            digest.update(b"\0" + part)
    return digest.hexdigest()


def driver_hash() -> str:
    """The driver image's input hash: changes with any file the image is built from."""
    return _digest(*_files(REPO / name for name in DRIVER_INPUTS))


def driver_image() -> Image:
    """The driver's image, tagged e2e-<hash of its inputs>; built by
    scripts/build-image.sh (about a minute, as root) unless cached."""
    _require("umoci", "mmdebstrap")
    if os.geteuid() != 0:
        raise RuntimeError("building the driver image needs root (mmdebstrap, chroot)")
    key = driver_hash()[:12]
    name = f"{DRIVER_REPOSITORY}:e2e-{key}"
    with _locked("neuron-dra") as directory:
        archive = directory / f"neuron-dra-{key}.tar"
        if not archive.is_file():
            with tempfile.TemporaryDirectory(dir=directory, prefix=".neuron-dra-") as tmp:
                partial = Path(tmp) / "image.tar"
                done = subprocess.run(
                    ["bash", str(BUILD_SCRIPT), str(partial), name],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
                    raise RuntimeError(
                        f"{BUILD_SCRIPT.name} failed ({done.returncode}) for {name}:\n{tail}"
                    )
                partial.replace(archive)
            # One driver archive is kept: every edit of the driver makes a new one.
            for stale in directory.glob("neuron-dra-*.tar"):
                if stale != archive:
                    stale.unlink()
    return Image(name, archive)


def busybox_image() -> Image:
    """A shell image for workload pods: the host's static busybox as /bin/busybox and
    links to it for the applets the tests use; entrypoint ["sh"]."""
    _require("umoci", "busybox-static")
    key = _digest(BUSYBOX, " ".join(BUSYBOX_APPLETS).encode(), BASH.encode())[:12]
    with _locked("e2e-busybox") as directory:
        archive = directory / f"e2e-busybox-{key}.tar"
        if not archive.is_file():
            with tempfile.TemporaryDirectory(dir=directory, prefix=".e2e-busybox-") as tmp:
                rootfs = _skeleton(Path(tmp) / "rootfs")
                shutil.copyfile(BUSYBOX, rootfs / "bin" / "busybox")
                (rootfs / "bin" / "busybox").chmod(0o755)
                for applet in BUSYBOX_APPLETS:
                    (rootfs / "bin" / applet).symlink_to("busybox")
                (rootfs / "bin" / "bash").write_text(BASH)
                (rootfs / "bin" / "bash").chmod(0o755)
                partial = Path(tmp) / "image.tar"
                oci_archive(rootfs, BUSYBOX_NAME, partial, entrypoint=["sh"])
                partial.replace(archive)
    return Image(BUSYBOX_NAME, archive)


def pause_image(pause: Path) -> Image:
    """The pod sandbox image: `pause`, a static executable that waits for a signal,
    as /pause; entrypoint ["/pause"], user 65535:65535."""
    _require("umoci")
    if not is_static(pause):
        raise ValueError(f"{pause} is not a static ELF executable; the image has no libc")
    key = _digest(pause)[:12]
    with _locked("e2e-pause") as directory:
        archive = directory / f"e2e-pause-{key}.tar"
        if not archive.is_file():
            with tempfile.TemporaryDirectory(dir=directory, prefix=".e2e-pause-") as tmp:
                rootfs = _skeleton(Path(tmp) / "rootfs")
                shutil.copyfile(pause, rootfs / "pause")
                (rootfs / "pause").chmod(0o755)
                partial = Path(tmp) / "image.tar"
                oci_archive(rootfs, PAUSE_NAME, partial, entrypoint=["/pause"], user="65535:65535")
                partial.replace(archive)
    return Image(PAUSE_NAME, archive)


def _skeleton(rootfs: Path) -> Path:
    """An empty root with the directories a runtime mounts over or a shell expects."""
    for name in ("bin", "dev", "etc", "proc", "sys", "tmp"):
        (rootfs / name).mkdir(parents=True)
    (rootfs / "tmp").chmod(0o1777)
    return rootfs


def oci_archive(
    rootfs: Path,
    name: str,
    out: Path,
    *,
    entrypoint: Sequence[str],
    user: str = "0:0",
    env: Sequence[str] = (PATH_ENV,),
) -> None:
    """Write an OCI archive at `out` of one layer holding `rootfs` (moved, not copied)
    and a config with `entrypoint`, `user` and `env`, named `name` for containerd."""
    tag = name.rsplit(":", 1)[1]
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=".oci-"))
    try:
        layout, bundle = work / "layout", work / "bundle"
        image = f"{layout}:{tag}"
        rootless = [] if os.geteuid() == 0 else ["--rootless"]
        _umoci("init", "--layout", str(layout))
        _umoci("new", "--image", image)
        _umoci("unpack", *rootless, "--image", image, str(bundle))
        shutil.rmtree(bundle / "rootfs")
        shutil.move(rootfs, bundle / "rootfs")
        _umoci("repack", *rootless, "--image", image, str(bundle))
        config = [f"--config.entrypoint={arg}" for arg in entrypoint]
        config += [f"--config.env={var}" for var in env]
        _umoci(
            "config", "--image", image, *config, f"--config.user={user}", "--config.workingdir=/"
        )
        _umoci("gc", "--layout", str(layout))
        _annotate(layout / "index.json", tag, name)
        with tarfile.open(out, "w") as tar:
            for entry in ("oci-layout", "index.json", "blobs"):
                tar.add(layout / entry, arcname=entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _umoci(*args: str) -> None:
    done = subprocess.run(["umoci", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"umoci {' '.join(args)} failed: {done.stderr.strip()}")


def _annotate(index_json: Path, tag: str, name: str) -> None:
    """Name the manifest tagged `tag` for `ctr images import` (io.containerd.image.name)."""
    index = json.loads(index_json.read_text())
    tagged = [
        manifest
        for manifest in index["manifests"]
        if manifest.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    ]
    if len(tagged) != 1:
        raise RuntimeError(f"{index_json} has {len(tagged)} manifests tagged {tag!r}")
    tagged[0]["annotations"]["io.containerd.image.name"] = name
    index_json.write_text(json.dumps(index))
