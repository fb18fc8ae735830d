"""Whole-file replacement: readers see the old content or the new, never a mix.

Every prepare writes a CDI spec and the checkpoint this way, so the write is
kept lean: no `tempfile.mkstemp` (a random name drawn and tried each call; its
cost is in docs/contributors/performance.md). The temp file beside the target is
named by a token the process draws once and the writing thread's id, which
differs between writes that run at once (a thread makes one at a time), even
between a rolling update's two agents, whose pid namespaces may give both pid 1
and the same thread ids. It is created
exclusively and never followed as a link, as mkstemp's is; one found there
(planted, say) is removed first, whatever it is.

A nearly full file system takes what fits and returns a short count before it
raises ENOSPC: the bytes are written until all are, and a write that takes none
fails the call (ENOSPC, naming the file), the temp file removed and the old file
kept, never a truncated one renamed over it.
"""

from __future__ import annotations

import errno
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
        _write_all(fd, data, path)
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


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """Every byte of `data`, however many writes it takes."""
    view, done = memoryview(data), 0
    while done < len(data):
        try:
            written = os.write(fd, view[done:])
        except OSError as err:
            raise OSError(err.errno, _short(err.strerror, done, data), str(path)) from None
        if written == 0:
            raise OSError(errno.ENOSPC, _short(os.strerror(errno.ENOSPC), done, data), str(path))
        done += written


def _short(strerror: str | None, done: int, data: bytes) -> str:
    said = strerror or "write failed"
    return f"{said} (wrote {done} of {len(data)} bytes)" if done else said


def _create(tmp: str, mode: int, directory: Path, dir_mode: int) -> int:
    try:
        return os.open(tmp, _CREATE, mode)
    except FileNotFoundError:
        ensure_dir(directory, dir_mode)
    except FileExistsError:
        os.unlink(tmp)  # noqa: PTH108 (see the module's docstring)
    return os.open(tmp, _CREATE, mode)
