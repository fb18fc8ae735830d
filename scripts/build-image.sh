#!/usr/bin/env bash
# Build the neuron-dra driver's OCI image without a container engine or a registry:
#
#   sudo scripts/build-image.sh OUTPUT.tar [IMAGE_NAME]
#
# The same image idea as the Dockerfile (which needs `docker build`), made from
# Debian's packages instead of the python:3.11-slim image; the release's image:
#   - the Dockerfile's builder stage runs on the host, every file it fetches
#     checked against a sha256 in requirements/ (scripts/lock.py writes them): a
#     scratch venv gets pip and setuptools from requirements/build.txt
#     (`--require-hashes`), builds the project's wheel with them
#     (`--no-build-isolation`: no build tool fetched unpinned), then downloads
#     the binary wheels of requirements/image.txt, the pinned runtime dependencies
#     (with the `cli` extra; not `tools`' kubernetes nor `dev`), for the image's
#     Python and architecture;
#   - the base is a Debian bookworm root file system from mmdebstrap (Essential
#     packages, python3 and libstdc++6 for grpcio; no docs, man pages or locales),
#     from the live mirrors or from snapshot.debian.org as it was at DEBIAN_SNAPSHOT;
#     scripts/debian-packages.sh lists its packages, each with its .deb's sha256;
#   - the rootfs's own python3 installs the wheels inside a chroot, offline, to
#     /usr/local, `--require-hashes` again, with the scratch venv's pip run from
#     outside: pip, setuptools and wheel are never installed in the image;
#   - umoci writes the OCI layout: entrypoint ["neuron-dra", "run"], user 0:0
#     (the Dockerfile says why root), and the archive at OUTPUT.tar is a tar of
#     that layout, for `ctr -n k8s.io images import` (the index names the image
#     with io.containerd.image.name) or `skopeo copy oci-archive:...`.
#
# IMAGE_NAME defaults to localhost/neuron-dra:<version> (scripts/version.py).
# Environment: PYTHON (host interpreter, default python3: 3.11 or later, with pip
# 22.3 or later; the wheels are the image's Python 3.11's whatever it is),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security), or instead DEBIAN_SNAPSHOT (a snapshot.debian.org
# time, YYYYMMDDTHHMMSSZ: both archives as they were then), TMPDIR (scratch space,
# ~400 MiB), WHEEL_OUT (a directory to copy the driver's wheel to, the one the image
# installs), PACKAGES_OUT (a file to write the image's Debian package list to: the
# archives it came from, then "name version architecture sha256" a package).
#
# Exit codes: 0 built; 2 bad usage; 3 the host is not ready (not root, a tool
# missing, not x86_64); any other: a step failed (its own exit code).
set -euo pipefail

readonly SUITE=bookworm
readonly IMAGE_PYTHON=3.11 # python3 of $SUITE: the wheels downloaded are cp311 ones

usage() {
    echo "usage: $0 OUTPUT.tar [IMAGE_NAME]" >&2
    echo "  builds the neuron-dra OCI image (default name localhost/neuron-dra:<version>)" >&2
    exit 2
}

die() {
    local code=$1
    shift
    echo "build-image: $*" >&2
    exit "$code"
}

[[ $# -ge 1 && $# -le 2 ]] || usage
[[ $1 != -* ]] || usage
output=$1
[[ $output == *.tar ]] || die 2 "OUTPUT must end in .tar: $output"
[[ -d $(dirname -- "$output") ]] || die 2 "no such directory: $(dirname -- "$output")"

repo=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
aptopts=()
snapshot=${DEBIAN_SNAPSHOT:-}
if [[ -n $snapshot ]]; then
    [[ $snapshot =~ ^[0-9]{8}T[0-9]{6}Z$ ]] ||
        die 2 "DEBIAN_SNAPSHOT is no snapshot.debian.org time (YYYYMMDDTHHMMSSZ): $snapshot"
    [[ -z ${DEBIAN_MIRROR:-}${DEBIAN_SECURITY_MIRROR:-} ]] ||
        die 2 "DEBIAN_SNAPSHOT names the mirrors: unset DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR"
    mirror=https://snapshot.debian.org/archive/debian/$snapshot
    security_mirror=https://snapshot.debian.org/archive/debian-security/$snapshot
    # A snapshot's Release files are signed as they were, and the security archive's
    # say they expire a week later: their signatures are checked, their age is not.
    aptopts=(--aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Retries "3"')
fi
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main"
    "deb $security_mirror $SUITE-security main")

# requirements/image.txt holds the hashes of the x86_64 wheels only (scripts/lock.py's
# PLATFORM): Neuron instances are x86_64.
arch=$(uname -m)
[[ $arch == x86_64 ]] ||
    die 3 "the host is $arch: the locked wheels are x86_64 ones, so build on an x86_64 host"
[[ $(id -u) -eq 0 ]] || die 3 "must run as root (mmdebstrap builds the rootfs in root mode, umoci keeps file owners)"
missing=()
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
[[ ${#missing[@]} -eq 0 ]] || die 3 "missing ${missing[*]}: apt-get install mmdebstrap umoci"
command -v "$python" >/dev/null || die 3 "no host Python '$python' (set PYTHON)"
# Python 3.11 as the package needs; pip's --python (22.3) fills the scratch venv.
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die 3 "host $python is older than Python 3.11 (set PYTHON)"
"$python" -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))' 2>/dev/null ||
    die 3 "$python has no pip, or one older than 22.3 (no --python)"

version=$("$python" "$repo/scripts/version.py")
image=${2:-localhost/neuron-dra:$version}
# umoci's tag is the part after the last colon; the full name goes in the annotation.
tag=${image##*:}
[[ $image == *:* && $image != *:*/* && $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
    die 2 "IMAGE_NAME needs a tag: NAME:TAG, got $image"

work=$(mktemp -d "${TMPDIR:-/tmp}/neuron-dra-image.XXXXXX")
partial=
cleanup() {
    # mmdebstrap unmounts what it mounted, even on failure; nothing is mounted here.
    rm -rf -- "$work"
    [[ -z $partial ]] || rm -f -- "$partial"
}
trap cleanup EXIT

start=$SECONDS
echo "build-image: wheels (the Dockerfile's builder stage)" >&2
# The build tools from the lock, by hash, in a venv of their own: the host's pip
# only installs them there.
tools=$work/tools
"$python" -m venv --without-pip "$tools"
"$python" -m pip --python "$tools/bin/python" install --quiet --disable-pip-version-check \
    --require-hashes --only-binary=:all: -r "$repo/requirements/build.txt"
pip=("$tools/bin/python" -m pip --quiet --disable-pip-version-check)
# A copy of the packaged files: the build writes scratch files beside its sources.
mkdir -p "$work/src" "$work/wheels" "$work/pip"
cp -a "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" \
    "$repo/api" "$repo/consts" "$repo/neuron_dra" "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"${pip[@]}" wheel --no-deps --no-build-isolation --wheel-dir "$work/wheels" "$work/src"
wheel=$(find "$work/wheels" -name 'neuron_dra-*.whl' -print -quit)
[[ -n $wheel ]] || die 1 "pip wheel made no neuron_dra wheel"
[[ -z ${WHEEL_OUT:-} ]] || cp "$wheel" "$WHEEL_OUT/"
# Wheels for the image's interpreter, not the host's: CPython 3.11 on glibc 2.36
# (bookworm's), any manylinux tag up to that.
target=(--only-binary=:all: --implementation cp --python-version "$IMAGE_PYTHON"
    --abi "cp${IMAGE_PYTHON/./}" --platform "manylinux2014_$arch")
for glibc_minor in $(seq 17 36); do
    target+=(--platform "manylinux_2_${glibc_minor}_$arch")
done
"${pip[@]}" download --require-hashes "${target[@]}" --dest "$work/wheels" \
    -r "$repo/requirements/image.txt"
cp "$repo/requirements/image.txt" "$work/wheels/"
# The pip that installs them in the image is the venv's, run from a copy outside the
# image's site-packages.
site=$("$tools/bin/python" -c 'import pip, pathlib; print(pathlib.Path(pip.__file__).parent.parent)')
cp -a "$site"/pip "$site"/pip-*.dist-info "$work/pip/"

echo "build-image: rootfs (mmdebstrap $SUITE)" >&2
rootfs=$work/rootfs
# env -i: none of the host's PIP_* or PYTHON* settings reach the image's pip. The locked
# dependencies first, each checked against its hash; then the project's wheel, built
# here, whose requirements they must already satisfy (no index to find others in).
install=(env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PYTHONPATH=/tmp/pip
    python3 -m pip install --no-cache-dir --disable-pip-version-check --no-index
    --find-links /tmp/wheels --break-system-packages)
# --skip=essential/unlink: the Essential set's .deb files stay in the apt cache, where
# scripts/debian-packages.sh hashes them, until mmdebstrap's cleanup empties it.
# The hooks' "$1" is the rootfs, expanded by the shell mmdebstrap runs them in.
# shellcheck disable=SC2016
mmdebstrap --variant=essential --include=python3,libstdc++6 "${aptopts[@]}" \
    --skip=essential/unlink \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook='mkdir -p "$1/tmp/wheels" "$1/tmp/pip"' \
    --customize-hook="sync-in $work/wheels /tmp/wheels" \
    --customize-hook="sync-in $work/pip /tmp/pip" \
    --customize-hook="chroot \"\$1\" ${install[*]} --require-hashes -r /tmp/wheels/image.txt" \
    --customize-hook="chroot \"\$1\" ${install[*]} /tmp/wheels/$(basename -- "$wheel")" \
    --customize-hook='rm -rf "$1/tmp/wheels" "$1/tmp/pip" "$1/root/.cache"' \
    --customize-hook="\"$repo/scripts/debian-packages.sh\" \"\$1\" >\"$work/packages\"" \
    --customize-hook='rm -f "$1"/var/log/*.log "$1"/var/log/apt/*.log "$1"/var/lib/dpkg/*-old "$1"/var/cache/debconf/*-old' \
    "$SUITE" "$rootfs" "${sources[@]}" </dev/null
if [[ -n ${PACKAGES_OUT:-} ]]; then
    {
        echo "# $image: Debian packages, name version architecture sha256 (of the .deb)"
        printf '# %s\n' "${sources[@]}"
        cat "$work/packages"
    } >"$PACKAGES_OUT"
fi
# Device nodes are the runtime's business; leave /dev empty.
find "$rootfs/dev" -mindepth 1 -delete
# The leftovers of the Dockerfile's `pip uninstall setuptools wheel`: none of them, and pip
# neither; the command is on PATH with a shebang naming the image's python3.
chroot "$rootfs" python3 -c '
import importlib.util, sys
left = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m)]
sys.exit(f"left in the image: {left}" if left else None)'
shebang=$(head -n 1 "$rootfs/usr/local/bin/neuron-dra")
[[ $shebang == '#!/usr/bin/python3' ]] || die 1 "neuron-dra's shebang is $shebang"
rootfs_mib=$(du -sm "$rootfs" | cut -f1)

echo "build-image: OCI image (umoci)" >&2
layout=$work/oci
bundle=$work/bundle
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
rm -rf -- "$bundle/rootfs"
mv -- "$rootfs" "$bundle/rootfs"
umoci repack --image "$layout:$tag" "$bundle"
umoci config --image "$layout:$tag" \
    --config.entrypoint neuron-dra --config.entrypoint run \
    --config.user 0:0 --config.workingdir / \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env LANG=C.UTF-8 \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label org.opencontainers.image.title=neuron-dra
umoci gc --layout "$layout"
"$python" - "$layout/index.json" "$tag" "$image" <<'EOF'
import json, sys
path, tag, image = sys.argv[1:]
with open(path) as f:
    index = json.load(f)
named = [m for m in index["manifests"]
         if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
if len(named) != 1:
    sys.exit(f"index.json has {len(named)} manifests tagged {tag}")
named[0]["annotations"]["io.containerd.image.name"] = image
with open(path, "w") as f:
    json.dump(index, f)
EOF

partial=$(mktemp "$(dirname -- "$output")/.$(basename -- "$output").XXXXXX")
tar --sort=name --numeric-owner --owner=0 --group=0 -C "$layout" \
    -cf "$partial" oci-layout index.json blobs
chmod 0644 "$partial"
mv -f -- "$partial" "$output"
partial=

archive_bytes=$(stat -c %s "$output")
echo "image:   $image"
echo "archive: $(cd -- "$(dirname -- "$output")" && pwd)/$(basename -- "$output")"
echo "size:    $archive_bytes bytes archive, $rootfs_mib MiB unpacked rootfs, built in $((SECONDS - start)) s"
