"""Helpers to break a fake node's sysfs tree on purpose."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from neuron_dra.hardware.fakenode import DEFAULT_DRIVER_VERSION, Counters, FakeUltraServer

T = TypeVar("T")
NOBODY = 65534


class FakeNode(Protocol):
    def __call__(
        self,
        instance_type: str,
        *,
        name: str = "node",
        driver_version: str = DEFAULT_DRIVER_VERSION,
        lnc: int | None = None,
        ultraserver: FakeUltraServer | None = None,
        pci_parents: bool = False,
        counters: Counters = Counters.NONE,
    ) -> Path: ...


def write(root: Path, rel: str, text: str | bytes) -> None:
    """Overwrite (or create) one file of a fake node."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o600)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def run_unprivileged(work: Callable[[], T]) -> T:
    """Run `work` in a forked child that has dropped root, as the driver would without it.

    Forking keeps the already-imported interpreter, so the child needs no access
    to the virtualenv; it only needs the tree to be world-traversable.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 0
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            with os.fdopen(write_end, "wb") as out:
                pickle.dump(work(), out)
        except BaseException:
            status = 1
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as source:
        data = source.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise RuntimeError("unprivileged child failed")
    result: T = pickle.loads(data)
    return result
