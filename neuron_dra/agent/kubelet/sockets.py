"""The plugin's socket names, and the sockets a killed plugin left behind.

A SIGKILLed plugin pod cannot remove its sockets, and with per-pod names its
successor never reuses them: at start, this driver's sockets that refuse
connections are removed (a live one belongs to the other pod of a rolling
update and stays).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import stat
from pathlib import Path

from consts import DRIVER_NAME

log = logging.getLogger(__name__)

# Long enough for a live server under load to accept; a dead one refuses at once.
STALE_PROBE_TIMEOUT_S = 1.0
# The registry directory is shared with every driver on the node, so only names this
# driver makes are touched there, with the pod UID in the API server's UUID shape: a
# driver named `neuron.aws.com-x` would register `neuron.aws.com-x-reg.sock`.
_POD_UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_REGISTRATION_NAME = re.compile(rf"{re.escape(DRIVER_NAME)}(-{_POD_UID})?-reg\.sock")
# The plugin directory is this driver's own: any pod UID --pod-uid was given.
_DRA_NAME = re.compile(r"dra(-.+)?\.sock")


def socket_paths(registrar_dir: Path, plugins_dir: Path, pod_uid: str | None) -> tuple[Path, Path]:
    """(registration socket, DRA socket); per-pod names let two pods overlap in an update."""
    if pod_uid:
        return (
            registrar_dir / f"{DRIVER_NAME}-{pod_uid}-reg.sock",
            plugins_dir / DRIVER_NAME / f"dra-{pod_uid}.sock",
        )
    return registrar_dir / f"{DRIVER_NAME}-reg.sock", plugins_dir / DRIVER_NAME / "dra.sock"


def driver_sockets(registrar_dir: Path, plugin_dir: Path) -> tuple[list[Path], list[Path]]:
    """This driver's (registration, DRA) sockets, of every pod that made them."""
    return _matching(registrar_dir, _REGISTRATION_NAME), _matching(plugin_dir, _DRA_NAME)


def serving(path: Path) -> bool:
    """Whether something accepts connections on the socket at `path`."""
    if not is_socket(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(STALE_PROBE_TIMEOUT_S)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def is_socket(path: Path) -> bool:
    """Whether the file at `path` itself (not a link's target) is a socket: one lstat."""
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def remove_stale_sockets(registrar_dir: Path, plugin_dir: Path) -> list[Path]:
    """Remove this driver's sockets that nothing listens on any more; return them."""
    candidates = [
        *_matching(registrar_dir, _REGISTRATION_NAME),
        *_matching(plugin_dir, _DRA_NAME),
    ]
    removed = []
    for path in candidates:
        if _remove_if_stale(path):
            log.info("removed the stale socket of a stopped plugin", extra={"socket": str(path)})
            removed.append(path)
    return removed


def _matching(directory: Path, name: re.Pattern[str]) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if name.fullmatch(p.name))
    except FileNotFoundError:
        return []  # the first start on this node
    except OSError as err:
        # Best effort: serving the sockets, not this, decides whether the plugin starts.
        log.warning("stale sockets not looked for: %s", err, extra={"path": str(directory)})
        return []


def _remove_if_stale(path: Path) -> bool:
    try:
        before = path.lstat()
        # connect() is refused on a plain file too: only sockets are judged by it.
        if not stat.S_ISSOCK(before.st_mode) or not _refuses(path):
            return False
        # Same inode: not bound again by a restarting plugin since it refused.
        if not os.path.samestat(before, path.lstat()):
            return False
        path.unlink()
    except FileNotFoundError:
        return False  # removed meanwhile
    except OSError as err:
        log.warning("stale socket not removed: %s", err, extra={"socket": str(path)})
        return False
    return True


def _refuses(path: Path) -> bool:
    """Whether connecting to the socket is refused: nothing listens on it any more."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(STALE_PROBE_TIMEOUT_S)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError as err:
            # Slow to accept, a full backlog, no permission: someone may still be there.
            log.debug("socket kept: %s", err, extra={"socket": str(path)})
        return False
