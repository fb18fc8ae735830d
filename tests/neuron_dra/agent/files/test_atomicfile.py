from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from neuron_dra.agent.files.atomicfile import atomic_write, temp_path


def temp_name(path: Path) -> Path:
    """The temp file this thread's write of `path` uses, beside it."""
    tmp = Path(temp_path(path))
    assert tmp.parent == path.parent
    assert tmp.name.startswith(f".{path.name}.")
    assert tmp.suffix == ".tmp"
    return tmp


def test_missing_directories_are_made_with_their_mode_and_the_file_with_its(
    tmp_path: Path,
) -> None:
    old = os.umask(0o077)
    try:
        path = tmp_path / "a" / "b" / "spec.json"
        atomic_write(path, b"{}", mode=0o644, dir_mode=0o755, durable=False)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"{}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o755
    assert sorted(p.name for p in path.parent.iterdir()) == ["spec.json"]


@pytest.mark.parametrize("durable", [True, False])
def test_a_file_a_crash_left_under_the_temp_name_is_replaced_not_written_through(
    tmp_path: Path, durable: bool
) -> None:
    """A link at the temp name (planted, say) is removed, never followed: its target
    keeps its bytes; so is a file there."""
    path = tmp_path / "checkpoint.json"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    temp_name(path).symlink_to(target)
    atomic_write(path, b"new", mode=0o600, dir_mode=0o750, durable=durable)
    assert target.read_bytes() == b"keep"
    assert path.read_bytes() == b"new"
    assert not path.is_symlink()
    temp_name(path).write_bytes(b"torn")
    atomic_write(path, b"newer", mode=0o600, dir_mode=0o750, durable=durable)
    assert path.read_bytes() == b"newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json", "elsewhere"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.json"
    atomic_write(path, b"old", mode=0o600, dir_mode=0o750)

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        atomic_write(path, b"new", mode=0o600, dir_mode=0o750)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]


def test_writers_at_once_each_leave_the_file_whole(tmp_path: Path) -> None:
    """Each thread writes through its own temp file: the file is always one writer's
    whole content, never a mix of two (they would mix in a shared temp file)."""
    path = tmp_path / "spec.json"
    contents = [bytes([ord("a") + i]) * 65536 for i in range(8)]
    start = threading.Barrier(len(contents))
    seen: set[bytes] = set()
    errors: list[OSError] = []

    def writer(data: bytes) -> None:
        start.wait()
        for _ in range(50):
            try:
                atomic_write(path, data, mode=0o644, dir_mode=0o755, durable=False)
            except OSError as err:  # a temp file another writer removed or renamed
                errors.append(err)
            seen.add(path.read_bytes())

    threads = [threading.Thread(target=writer, args=(c,)) for c in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert seen <= set(contents)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
