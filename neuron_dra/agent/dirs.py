"""Directories with exact modes, whatever umask the process inherited.

The CDI directory is read by container runtimes and the plugin directory holds
the checkpoint and the DRA socket: a loose umask must not make either
world-writable.
"""

from __future__ import annotations

from pathlib import Path

CDI_DIR_MODE = 0o755  # runtimes read specs; only root writes
PLUGIN_DIR_MODE = 0o750  # the kubelet (root) and the plugin only


def ensure_dir(path: Path, mode: int) -> None:
    """Create `path` and its missing parents with `mode`; existing ones are left alone."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode)
        except FileExistsError:
            continue  # created concurrently: whoever made it chose its mode
        directory.chmod(mode)  # mkdir's mode is filtered through the umask
