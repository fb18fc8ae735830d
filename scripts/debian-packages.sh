#!/usr/bin/env bash
# The Debian packages installed in a root file system, each with the sha256 of the .deb
# it was installed from:
#
#   scripts/debian-packages.sh ROOTFS > LIST
#
# One line a package, "name version architecture sha256", sorted. The .deb files are the
# ones in ROOTFS/var/cache/apt/archives, where mmdebstrap leaves them until its cleanup
# (scripts/build-image.sh runs this as a customize hook); the installed packages must be
# exactly those, so that every hash is of what was installed.
#
# Exit codes: 0 listed; 1 the installed packages and the .deb files differ (the
# difference on stderr); 2 bad usage.
set -euo pipefail
export LC_ALL=C

[[ $# -eq 1 && -d ${1:-} ]] || {
    echo "usage: $0 ROOTFS" >&2
    exit 2
}
rootfs=$1

# The ${Field}s are dpkg's formats, not the shell's.
# shellcheck disable=SC2016
installed=$(dpkg-query --admindir="$rootfs/var/lib/dpkg" --show \
    --showformat='${db:Status-Abbrev} ${Package} ${Version} ${Architecture}\n' |
    awk '$1 == "ii" { print $2, $3, $4 }' | sort)
listed=$(
    shopt -s nullglob
    for deb in "$rootfs"/var/cache/apt/archives/*.deb; do
        # shellcheck disable=SC2016
        fields=$(dpkg-deb --show --showformat='${Package} ${Version} ${Architecture}' "$deb")
        sum=$(sha256sum <"$deb")
        echo "$fields ${sum%% *}"
    done | sort
)
if [[ $installed != "$(cut -d' ' -f1-3 <<<"$listed")" ]]; then
    echo "debian-packages: the installed packages are not the apt cache's .deb files:" >&2
    diff <(echo "$installed") <(cut -d' ' -f1-3 <<<"$listed") | sed 's/^/  /' >&2 || true
    exit 1
fi
echo "$listed"
