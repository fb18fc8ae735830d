"""Directories with exact modes, whatever umask the process inherited.

The CDI directory is read by container runtimes and the plugin directory holds
the checkpoint and the DRA socket: a loose umask must not make either
world-writable.
"""

from __future__ import annotations

import errno
import os
import stat
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


def open_lock_file(path: Path) -> int:
    """A descriptor of the lock file at `path`, created 0600 if missing. A symlink there
    is refused (ELOOP), not followed, nor anything but a regular file: a link planted in
    the plugin directory would otherwise make the agent create or chmod a file of the
    link's choosing."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        # 0600: a lock anyone could open, anyone could hold, stalling every prepare.
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd
