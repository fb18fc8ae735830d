"""A file's stamp: what changes when another process rewrites or replaces it.

Files this agent watches are replaced whole by a rename (the checkpoint by the
other plugin pod of a rolling update, a projected token by the kubelet), which
gives a new inode; a write in place changes the mtime or the size. One stat.
"""

from __future__ import annotations

from pathlib import Path

Stamp = tuple[int, int, int]  # inode, mtime in ns, size


def stamp(path: Path) -> Stamp | None:
    """The file's stamp; None when it cannot be stat'ed (absent, say)."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size
