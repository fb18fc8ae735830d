"""What an OCI image archive (scripts/build-image.sh's) holds: the files of its one
image's layers, read without unpacking it."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path


def layer_files(archive: Path) -> Iterator[tuple[str, bytes | None]]:
    """Each entry of each layer, in order: its name without "./", and its content if it is
    a regular file."""
    with tarfile.open(archive) as oci:

        def read(name: str) -> bytes:
            member = oci.extractfile(name)
            assert member is not None, name
            return member.read()

        def blob(digest: str) -> bytes:
            return read("blobs/sha256/" + digest.removeprefix("sha256:"))

        (manifest_entry,) = json.loads(read("index.json"))["manifests"]
        manifest = json.loads(blob(manifest_entry["digest"]))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(layer["digest"])))) as t:
                for member in t:
                    content = t.extractfile(member) if member.isfile() else None
                    yield member.name.removeprefix("./"), content.read() if content else None


def python_distributions(archive: Path) -> dict[str, str]:
    """The Python distributions installed in the image: name -> version, from the
    dist-info directories of its layers."""
    found: dict[str, str] = {}
    for name, _ in layer_files(archive):
        if m := re.fullmatch(
            r"usr/local/lib/python3[.\d]*/dist-packages/([^/]+)-([^/-]+)\.dist-info", name
        ):
            found[m[1].lower().replace("_", "-")] = m[2]
    return found


def debian_packages(archive: Path) -> set[tuple[str, str, str]]:
    """The Debian packages installed in the image, (name, version, architecture), from the
    last layer's dpkg status file that has one."""
    status = None
    for name, content in layer_files(archive):
        if name == "var/lib/dpkg/status" and content is not None:
            status = content.decode()
    assert status is not None, f"{archive}: no var/lib/dpkg/status"
    found = set()
    for stanza in status.strip().split("\n\n"):
        fields = {
            name: value.strip()
            for line in stanza.splitlines()
            if not line.startswith(" ")
            for name, _, value in [line.partition(":")]
        }
        if fields.get("Status") == "install ok installed":
            found.add((fields["Package"], fields["Version"], fields["Architecture"]))
    return found
