"""Whole-file replacement: readers see the old content or the new, never a mix.

Every prepare writes a CDI spec and the checkpoint this way, so the write is
kept lean: 33 us on tmpfs, where `tempfile.mkstemp` and pathlib made it 70 us
(drawing and trying a random name, then converting paths at each call). The
temp file beside the target is named by a token the process draws once and the
writing thread's id, which differs between writes that run at once (a thread
makes one at a time), even between a rolling update's two agents, whose pid
namespaces may give both pid 1 and the same thread ids. It is created
exclusively and never followed as a link, as mkstemp's is; one found there
(planted, say) is removed first, whatever it is.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from neuron_dra.agent.files.dirs import ensure_dir

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PROCESS = os.urandom(4).hex()


def temp_path(path: Path) -> str:
    """The temp file this thread writes `path` through."""
    directory, name = os.path.split(path)
    # The suffix keeps runtimes (which load *.json and *.yaml) off the temp file.
    return f"{directory}/.{name}.{_PROCESS}-{threading.get_native_id()}.tmp"


def atomic_write(
    path: Path, data: bytes, *, mode: int, dir_mode: int, durable: bool = True
) -> None:
    """temp file + rename, the file `mode` exact whatever the umask.

    `durable` adds an fsync of the file before the rename and of the directory after
    it, so the new content also survives a power loss; without it, it survives any
    crash of this process (the kernel keeps the page cache), not one of the kernel.
    """
    tmp = temp_path(path)
    fd = _create(tmp, mode, path.parent, dir_mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)  # noqa: PTH105
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _create(tmp: str, mode: int, directory: Path, dir_mode: int) -> int:
    try:
        return os.open(tmp, _CREATE, mode)
    except FileNotFoundError:
        ensure_dir(directory, dir_mode)
    except FileExistsError:
        os.unlink(tmp)  # noqa: PTH108 (see the module's docstring)
    return os.open(tmp, _CREATE, mode)
