"""Process plumbing for the e2e harness: running binaries and finding them.

``Component`` is one started binary with its log; the helpers pick free
ports, probe HTTP health endpoints and look through ``/proc`` for processes
that should be gone. Nothing here knows about Kubernetes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> None:
    # If the test process is killed, its components must not outlive it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Component:
    """One running binary with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def report(self, lines: int = 40) -> str:
        """Its state and the last lines of its log, for failure reports."""
        state = "running" if self.alive() else f"exited {self.process.returncode}"
        return f"----- {self.name} ({state}) {self.log_path} -----\n{self.tail(lines)}"

    def stop(self, timeout: float = 10.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send `sig` to its process group (SIGKILL: no chance to clean up, as when a
        node's OOM killer or a crash ends it), then SIGKILL what is left after `timeout`."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout)
        # Children a component may have spawned share its process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def http_ok(url: str | urllib.request.Request, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes: it runs nothing.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def processes_running(paths: Iterable[Path]) -> list[tuple[int, str]]:
    """Live processes whose executable is one of ``paths``."""
    wanted = {str(p.resolve()) for p in paths}
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = str((entry / "exe").readlink())
        except OSError:
            continue
        if exe.removesuffix(" (deleted)") in wanted and pid_alive(int(entry.name)):
            found.append((int(entry.name), cmdline(int(entry.name))))
    return found
