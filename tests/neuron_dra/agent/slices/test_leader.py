from __future__ import annotations

import asyncio
import errno
import fcntl
import os
from pathlib import Path

import pytest

from neuron_dra.agent.claims.checkpoint import CheckpointStore
from neuron_dra.agent.slices import leader


def is_locked(path: Path) -> bool:
    """Whether another open file description holds the lock."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_only_one_holder_at_a_time_and_the_next_takes_over(tmp_path: Path) -> None:
    lock = tmp_path / "plugins/neuron.aws.com/publisher.lock"

    async def main() -> list[str]:
        order: list[str] = []
        first_in = asyncio.Event()
        release_first = asyncio.Event()

        async def first() -> None:
            async with leader.held(lock):
                order.append("first in")
                first_in.set()
                await release_first.wait()
                order.append("first out")

        async def second() -> None:
            await first_in.wait()
            async with leader.held(lock):
                order.append("second in")

        tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
        await first_in.wait()
        assert is_locked(lock) and order == ["first in"]
        release_first.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == ["first in", "first out", "second in"]


def test_the_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    lock = tmp_path / "publisher.lock"
    pid = os.fork()
    if pid == 0:  # a holder that is killed without cleaning up

        async def hold() -> None:
            async with leader.held(lock):
                os._exit(0)

        asyncio.run(hold())
    os.waitpid(pid, 0)

    async def take() -> bool:
        async with leader.held(lock):
            return True

    assert asyncio.run(asyncio.wait_for(take(), 5))


@pytest.mark.parametrize("lock", ["leader", "checkpoint"])
def test_a_symlink_where_a_lock_file_should_be_is_refused_not_followed(
    tmp_path: Path, lock: str
) -> None:
    """A link planted in the plugin directory would have the agent create (and chmod
    0600) a file of the link's choosing."""
    target = tmp_path / "elsewhere"
    target.write_text("not the agent's")
    target.chmod(0o644)
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    if lock == "leader":
        (plugin_dir / "publisher.lock").symlink_to(target)

        async def take() -> None:
            async with leader.held(plugin_dir / "publisher.lock"):
                pass

        with pytest.raises(OSError) as raised:
            asyncio.run(take())
    else:
        store = CheckpointStore(plugin_dir / "checkpoint.json")
        store.lock_path.symlink_to(target)
        with pytest.raises(OSError) as raised:
            store.apply("boot", {})
    assert raised.value.errno == errno.ELOOP
    assert target.read_text() == "not the agent's" and target.stat().st_mode & 0o777 == 0o644
