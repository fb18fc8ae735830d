"""The kubelet's liveness and readiness probes of the plugin: an exec probe that asks
the plugin over an abstract unix socket and exits 0 when the service is SERVING.

    python3 -I -m neuron_dra.agent.kubelet.probeclient [readiness]

Why not a `grpc` probe: the kubelet dials a gRPC (or HTTP, or TCP) probe at the pod IP,
which every pod the network lets through can reach too, so a pod that holds the
port's connections keeps the probes out and gets the plugin restarted (see
docs/contributors/decisions.md). An abstract unix socket belongs to a network
namespace: only processes in the plugin's pod reach it, and the kubelet's exec probe
runs in the container. The socket's name is the container's `PROBE_SOCKET`.

The kubelet starts this every probe period, so it imports nothing beyond the standard
library's `socket` (and `consts`, which imports nothing): 48 ms of CPU where a gRPC
client spends 200 ms (docs/contributors/decisions.md). The protocol is one line
each way: the service's name ("" for liveness), then the plugin's answer, a status name
of grpc.health.v1 (`probesocket` serves it).
"""

from __future__ import annotations

import os
import socket
import sys

from consts import ENV_PROBE_SOCKET

SERVING = b"SERVING"
TIMEOUT_S = 4.0  # under the probes' timeoutSeconds (5), so the answer says why
MAX_ANSWER = 64


def address(name: str) -> str:
    """The abstract socket of `name`: a leading NUL, no file."""
    return "\0" + name


def ask(name: str, service: str, timeout_s: float = TIMEOUT_S) -> str:
    """The plugin's status of `service`, or why there is none."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(address(name))
            conn.sendall(service.encode() + b"\n")
            answer = b""
            while len(answer) < MAX_ANSWER and not answer.endswith(b"\n"):
                chunk = conn.recv(MAX_ANSWER)
                if not chunk:
                    break
                answer += chunk
        except OSError as err:
            return f"no answer from the plugin at @{name}: {err}"
    return answer.decode(errors="replace").strip() or "the plugin closed without an answer"


def main(argv: list[str]) -> int:
    name = os.environ.get(ENV_PROBE_SOCKET)
    if not name:
        print(f"${ENV_PROBE_SOCKET} is not set", file=sys.stderr)
        return 2
    service = argv[0] if argv else ""
    answer = ask(name, service)
    print(f"{service or 'liveness'}: {answer}")
    return 0 if answer == SERVING.decode() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
