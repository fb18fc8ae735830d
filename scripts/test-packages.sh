#!/usr/bin/env bash
# The Debian packages `make test` needs beyond Python and Go: shellcheck lints the
# scripts; the real-node tests run runc, the CNI plugins, iptables and conntrack
# (kube-proxy), and build images with mmdebstrap, umoci and busybox-static.
# Installs the missing ones with apt-get when this user may (root, or sudo without
# a password); otherwise names them and the command, and the tests that need them
# skip, each naming what is missing. Exit 0 either way; 1 if apt-get failed.
set -euo pipefail

missing=()
for need in shellcheck:shellcheck runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
    umoci:umoci mmdebstrap:mmdebstrap /bin/busybox:busybox-static iptables:iptables \
    conntrack:conntrack; do
    what=${need%%:*}
    if [[ $what == /* ]]; then [[ -e $what ]] && continue; else command -v "$what" >/dev/null && continue; fi
    missing+=("${need#*:}")
done
((${#missing[@]})) || exit 0

if ! command -v apt-get >/dev/null; then
    echo "test-packages: not a Debian system; without ${missing[*]} the real-node tests skip" >&2
    exit 0
fi
if ((EUID == 0)); then
    as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "test-packages: the real-node tests and shellcheck need ${missing[*]}; they skip" >&2
    echo "test-packages: without them. To run everything CI runs first:" >&2
    echo "  sudo apt-get install ${missing[*]}" >&2
    exit 0
fi
echo "test-packages: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
