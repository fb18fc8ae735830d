"""Reading one small sysfs (or /proc, or config) file, as hardware can be trusted to
write it and no more: a regular file, a bounded size, ASCII digits for numbers.

A FIFO or a device node where a file should be would block a plain read forever (the
first discovery runs before the agent serves anything); a huge file would take the
agent's memory; Python's int() takes a fullwidth digit four, "+3" and "1_0", which
no driver writes.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

# A sysfs attribute is at most a page; the largest file read here (an LNC config)
# is a few lines.
MAX_BYTES = 64 * 1024
_DIGITS = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """The file's text. Raises OSError for anything but a regular file of at most
    `limit` bytes (EINVAL, EFBIG), never blocking; UnicodeDecodeError if not UTF-8."""
    return read_bytes(path, limit).decode("utf-8")


def read_bytes(path: Path, limit: int = MAX_BYTES, *, nofollow: bool = False) -> bytes:
    """The file's bytes, as `read_text`; with `nofollow`, a symbolic link is not
    followed but refused (ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks, size = [], 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_if_present(path: Path, limit: int = MAX_BYTES) -> str | None:
    """The file's stripped text, or None when it does not exist: a file an older or
    newer driver does not write. Anything else wrong raises, as `read_text` does."""
    try:
        return read_text(path, limit).strip()
    except FileNotFoundError:
        return None


def reason(err: Exception) -> str:
    """What went wrong, for a log line: an OSError's own words, else the message."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err)


def ascii_int(text: str, *, signed: bool = False) -> int:
    """A decimal integer of ASCII digits only, with a leading '-' where `signed` (the
    driver writes -1 for "none")."""
    if (_SIGNED if signed else _DIGITS).fullmatch(text) is None:
        raise ValueError("not a decimal number of ASCII digits")
    return int(text)


def counts(
    base: Path,
    names: Iterable[str],
    read: Callable[[Path], str | None],
    unreadable: Callable[[Path, ValueError], None],
) -> dict[str, int]:
    """The counters among `names` below `base` that `read` gives, parsed, by name; one
    that does not parse goes to `unreadable` and is left out."""
    found = {}
    for name in names:
        text = read(base / name)
        if text is None:
            continue
        try:
            found[name] = ascii_int(text)
        except ValueError as err:
            unreadable(base / name, err)
    return found
