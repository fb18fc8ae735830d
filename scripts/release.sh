#!/usr/bin/env bash
# Build one version's release artifacts into a directory:
#
#   sudo scripts/release.sh DIR [REPOSITORY]
#
#   DIR/neuron-dra-<version>.oci.tar   the image, an OCI archive named
#                                      REPOSITORY:<version> (default
#                                      localhost/neuron-dra): `ctr -n k8s.io images
#                                      import` or `skopeo copy oci-archive:...`
#   DIR/neuron-dra-<version>.tgz       the Helm chart, packaged
#   DIR/neuron_dra-<version>-py3-none-any.whl
#                                      the Python package the image installs:
#                                      `pip install 'neuron_dra-...whl[tools]'`
#                                      for the CLI's tools on a laptop or in CI
#   DIR/neuron-dra-<version>-karpenter.json
#                                      what a node of each instance type publishes,
#                                      as Karpenter's DynamicResources (`neuron-dra
#                                      templates`, Kubernetes 1.36 and later)
#   DIR/neuron-dra-<version>-packages.txt
#                                      the image's Debian packages, each with the
#                                      sha256 of its .deb, and the archives they
#                                      came from (DEBIAN_SNAPSHOT pins them)
#   DIR/SHA256SUMS                     all five, for `sha256sum -c`
#
# The version is consts.DRA_DRIVER_VERSION (scripts/version.py); the chart's
# version and appVersion must be the same (the script refuses otherwise), so the
# package, the chart and the image tag never disagree. Environment: HELM (default:
# helm on PATH), and what scripts/build-image.sh reads (PYTHON, default python3,
# 3.11 or later, reads the version here too).
#
# Exit codes: 0 built; 2 bad usage or versions that disagree; 3 a tool missing; any
# other: a step failed.
set -euo pipefail

die() {
    local code=$1
    shift
    echo "release: $*" >&2
    exit "$code"
}

[[ $# -ge 1 && $# -le 2 && $1 != -* ]] || die 2 "usage: $0 DIR [REPOSITORY]"
out=$1
repository=${2:-localhost/neuron-dra}
repo=$(cd "$(dirname "$0")/.." && pwd)
helm=${HELM:-helm}
command -v "$helm" >/dev/null || die 3 "no helm ($helm): set HELM"

version=$("${PYTHON:-python3}" "$repo/scripts/version.py")
chart="$repo/deploy/helm/neuron-dra"
for field in version appVersion; do
    found=$(sed -n "s/^$field: *\"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\}$/\\1/p" "$chart/Chart.yaml")
    [[ $found == "$version" ]] || die 2 "Chart.yaml $field is ${found:-missing}, consts.DRA_DRIVER_VERSION says $version"
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
image="$out/neuron-dra-$version.oci.tar"
wheel="neuron_dra-$version-py3-none-any.whl"
packages="neuron-dra-$version-packages.txt"
WHEEL_OUT="$out" PACKAGES_OUT="$out/$packages" \
    "$repo/scripts/build-image.sh" "$image" "$repository:$version"
[[ -f "$out/$wheel" ]] || die 1 "build-image.sh left no $wheel"
"$helm" package "$chart" --destination "$out" >/dev/null
# The catalog needs nothing beyond the standard library: run from the tree.
catalog="neuron-dra-$version-karpenter.json"
PYTHONPATH="$repo" "${PYTHON:-python3}" -m neuron_dra templates >"$out/$catalog"
(cd "$out" && sha256sum "neuron-dra-$version.oci.tar" "neuron-dra-$version.tgz" "$wheel" "$catalog" \
    "$packages" >SHA256SUMS)
echo "release $version in $out:"
sed 's/^/  /' "$out/SHA256SUMS"
