#!/usr/bin/env bash
# Build the neuron-dra driver's OCI image without a container engine or a registry:
#
#   sudo scripts/build-image.sh OUTPUT.tar [IMAGE_NAME]
#
# The same image idea as the Dockerfile (which needs `docker build`), made from
# Debian's packages instead of the python:3.11-slim image:
#   - the Dockerfile's builder stage runs on the host: the project's wheel
#     (`pip wheel --no-deps`), then binary wheels of exactly the pinned runtime
#     dependencies (constraints.txt; not the `tools` or `dev` extras);
#   - the base is a Debian bookworm root file system from mmdebstrap (Essential
#     packages, python3 and libstdc++6 for grpcio; no docs, man pages or locales);
#   - the rootfs's own python3 installs the wheels inside a chroot, offline, to
#     /usr/local, with pip run from its wheel: pip, setuptools and wheel are never
#     installed in the image;
#   - umoci writes the OCI layout: entrypoint ["neuron-dra", "run"], user 0:0
#     (the Dockerfile says why root), and the archive at OUTPUT.tar is a tar of
#     that layout, for `ctr -n k8s.io images import` (the index names the image
#     with io.containerd.image.name) or `skopeo copy oci-archive:...`.
#
# IMAGE_NAME defaults to localhost/neuron-dra:<version in pyproject.toml>.
# Environment: PYTHON (host interpreter for pip wheel, default python3; must be
# the image's Python minor version), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security), TMPDIR (scratch space, ~400 MiB).
#
# Exit codes: 0 built; 2 bad usage; 3 the host is not ready (not root, a tool
# missing); any other: a step failed (its own exit code).
set -euo pipefail

readonly SUITE=bookworm
readonly IMAGE_PYTHON=3.11 # python3 of $SUITE; the host builds cp311 wheels for it

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

[[ $(id -u) -eq 0 ]] || die 3 "must run as root (mmdebstrap builds the rootfs in root mode, umoci keeps file owners)"
missing=()
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
[[ ${#missing[@]} -eq 0 ]] || die 3 "missing ${missing[*]}: apt-get install mmdebstrap umoci"
command -v "$python" >/dev/null || die 3 "no host Python '$python' (set PYTHON)"
host_python=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $host_python == "$IMAGE_PYTHON" ]] ||
    die 3 "host $python is Python $host_python; the image's is $IMAGE_PYTHON (set PYTHON)"
"$python" -m pip --version >/dev/null 2>&1 || die 3 "$python has no pip"

version=$("$python" -c 'import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(tomllib.load(f)["project"]["version"])' "$repo/pyproject.toml")
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
# A copy of the packaged files: the build writes scratch files beside its sources.
mkdir -p "$work/src" "$work/wheels"
cp -a "$repo/constraints.txt" "$repo/pyproject.toml" "$repo/README.md" \
    "$repo/api" "$repo/consts" "$repo/neuron_dra" "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
pip=("$python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" wheel --no-deps --wheel-dir "$work/wheels" "$work/src"
wheel=$(find "$work/wheels" -name 'neuron_dra-*.whl' -print -quit)
[[ -n $wheel ]] || die 1 "pip wheel made no neuron_dra wheel"
"${pip[@]}" wheel --only-binary=:all: --constraint "$work/src/constraints.txt" \
    --wheel-dir "$work/wheels" "$wheel"
# The pip that installs them in the image runs from its wheel and stays outside.
pip_version=$("$python" -c 'import pip; print(pip.__version__)')
"${pip[@]}" download --no-deps --only-binary=:all: --dest "$work/pip" "pip==$pip_version"
pip_wheel=$(find "$work/pip" -name 'pip-*.whl' -print -quit)
cp "$work/src/constraints.txt" "$work/wheels/"

echo "build-image: rootfs (mmdebstrap $SUITE)" >&2
rootfs=$work/rootfs
# env -i: none of the host's PIP_* or PYTHON* settings reach the image's pip.
install=(env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 python3 "/tmp/pip/$(basename -- "$pip_wheel")/pip" install --no-cache-dir
    --disable-pip-version-check --no-index --find-links /tmp/wheels
    --constraint /tmp/wheels/constraints.txt --break-system-packages neuron-dra)
# The hooks' "$1" is the rootfs, expanded by the shell mmdebstrap runs them in.
# shellcheck disable=SC2016
mmdebstrap --variant=essential --include=python3,libstdc++6 \
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
    --customize-hook="chroot \"\$1\" ${install[*]}" \
    --customize-hook='rm -rf "$1/tmp/wheels" "$1/tmp/pip" "$1/root/.cache"' \
    --customize-hook='rm -f "$1"/var/log/*.log "$1"/var/log/apt/*.log "$1"/var/lib/dpkg/*-old "$1"/var/cache/debconf/*-old' \
    "$SUITE" "$rootfs" \
    "deb $mirror $SUITE main" \
    "deb $mirror $SUITE-updates main" \
    "deb $security_mirror $SUITE-security main" \
    </dev/null
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
