"""What other local users can do to the plugin's files, and what claim identities can reach.

A prepare hands out devices, the checkpoint decides what is cleaned up and the
CDI specs decide what containers get: only root may change them, whatever
umask the plugin inherits. Claim identities come over the socket and from the
API; none of them may name a file outside the plugin's directories.
"""

from __future__ import annotations

import asyncio
import copy
import fcntl
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import CheckpointStore, decode
from neuron_dra.agent.claims.claimref import ClaimRef
from neuron_dra.agent.claims.preparer import Preparer
from neuron_dra.agent.kubelet.plugin import KubeletPlugin
from neuron_dra.hardware.discovery import discover
from neuron_dra.hardware.fakenode import build_fake_node
from neuron_dra.hardware.inventory import NodeInventory
from tests.claim_objects import allocated_claim
from tests.sysfs_tree import run_unprivileged

POOL = "node-a"
BOOT = "5f0e9c1a-0000-4000-8000-00000000d001"
UID = "0c7d2a1e-0000-4000-8000-00000000d0d0"
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> NodeInventory:
    root = tmp_path_factory.mktemp("node")
    return discover(build_fake_node(root / "sysfs", "trn2.48xlarge")).inventory


class Api:
    """ResourceClaims by (namespace, name); anything else is the API server's 404."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], Obj] = {}
        self.calls: list[tuple[str, str]] = []

    def add(self, ref: ClaimRef, devices: list[str]) -> None:
        claim = allocated_claim(ref.uid, devices, pool=POOL, name=ref.name)
        claim["metadata"]["namespace"] = ref.namespace
        self.claims[ref.namespace, ref.name] = claim

    def get_claim(self, namespace: str, name: str) -> Obj:
        self.calls.append((namespace, name))
        if (namespace, name) not in self.claims:
            raise ApiError(404, f'resourceclaims "{name}" not found')
        found: Obj = copy.deepcopy(self.claims[namespace, name])
        return found


def make_preparer(inventory: NodeInventory, root: Path, api: Api) -> Preparer:
    preparer = Preparer(
        inventory=lambda: inventory,
        pool=POOL,
        cdi_root=root / "cdi",
        store=CheckpointStore(root / "plugins" / "neuron.aws.com" / "checkpoint.json"),
        boot_id=BOOT,
        get_claim=api.get_claim,
    )
    preparer.start()
    return preparer


def with_umask(mask: int, work: Callable[[], None]) -> None:
    """Run `work` with the process umask set to `mask` (a DaemonSet may inherit any)."""
    previous = os.umask(mask)
    try:
        work()
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# ---------------------------------------------------------------------- file modes


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A short (unix socket paths are limited to 107 bytes), world-traversable directory."""
    root = Path(tempfile.mkdtemp(prefix="ndra-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(root)


PERMISSIVE_UMASK = pytest.param(0o000, id="umask-000")


@pytest.mark.parametrize("umask", [pytest.param(0o022, id="umask-022"), PERMISSIVE_UMASK])
def test_files_sockets_and_directories_only_root_can_change(
    inventory: NodeInventory, short_root: Path, umask: int
) -> None:
    api = Api()
    ref = ClaimRef("default", "claim", UID)
    api.add(ref, ["neurondevice0", "neurondevice1"])
    root = short_root / "node"
    root.mkdir()
    seen: dict[str, int] = {}

    async def scenario() -> None:
        preparer = make_preparer(inventory, root, api)
        plugin = KubeletPlugin(
            preparer,
            pool=POOL,
            registrar_dir=root / "plugins_registry",
            plugins_dir=root / "plugins",
        )
        await plugin.start()
        try:
            outcome = preparer.prepare([ref])[UID]
            assert outcome.devices, outcome
            for path in [plugin.registration_socket, plugin.dra_socket, *root.rglob("*")]:
                seen[str(path.relative_to(root))] = path.lstat().st_mode
        finally:
            await plugin.stop()

    with_umask(umask, lambda: asyncio.run(scenario()))

    def perms(rel: str) -> int:
        return stat.S_IMODE(seen[rel])

    plugin_dir = "plugins/neuron.aws.com"
    spec = f"cdi/neuron.aws.com-{UID}.json"
    assert stat.S_ISSOCK(seen["plugins_registry/neuron.aws.com-reg.sock"])
    assert perms("plugins_registry/neuron.aws.com-reg.sock") == 0o600
    assert stat.S_ISSOCK(seen[f"{plugin_dir}/dra.sock"])
    assert perms(f"{plugin_dir}/dra.sock") == 0o600
    assert perms(f"{plugin_dir}/checkpoint.json") == 0o600
    # The container runtime reads specs (it may not run as root), nobody else writes them.
    assert perms(spec) == 0o644
    for rel, st_mode in seen.items():
        assert not stat.S_IMODE(st_mode) & stat.S_IWOTH, f"{rel} is world-writable"
        if rel.startswith(plugin_dir):
            assert not stat.S_IMODE(st_mode) & stat.S_IWGRP, f"{rel} is group-writable"


def test_other_users_cannot_reach_the_sockets(inventory: NodeInventory, short_root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    root = short_root
    refused: list[str] = []

    def connect(path: Path) -> Callable[[], str]:
        def attempt() -> str:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                try:
                    client.connect(str(path))
                except PermissionError:
                    return "refused"
                return "connected"

        return attempt

    async def scenario() -> None:
        plugin = KubeletPlugin(
            make_preparer(inventory, root, Api()),
            pool=POOL,
            registrar_dir=root / "plugins_registry",
            plugins_dir=root / "plugins",
        )
        await plugin.start()
        try:
            for path in (plugin.registration_socket, plugin.dra_socket):
                for directory in (path.parent, path.parent.parent):
                    directory.chmod(mode(directory) | 0o005)  # let others reach the socket
                # Off the event loop, which keeps serving the plugin meanwhile.
                refused.append(await asyncio.to_thread(run_unprivileged, connect(path)))
        finally:
            await plugin.stop()

    asyncio.run(scenario())
    assert refused == ["refused", "refused"]


def test_other_users_cannot_hold_the_checkpoint_lock(
    inventory: NodeInventory, short_root: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    make_preparer(inventory, short_root, Api())
    lock = short_root / "plugins" / "neuron.aws.com" / "checkpoint.json.lock"
    assert lock.exists()

    def take() -> str:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except PermissionError:
            return "refused"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return "refused"
        finally:
            os.close(fd)
        return "held"

    assert run_unprivileged(take) == "refused"


# ---------------------------------------------------------------------- claim identities

ESCAPING = [
    "../..",
    "..",
    ".",
    "/",
    "/etc/passwd",
    "a/../../b",
    "../../etc/cron.d/x",
    "\x00",
    "abc\x00def",
    "a\nb",
    "x" * 64,  # longer than a UID, and than any single path component should be
    "x" * 5000,
    "\u2215etc\u2215passwd",  # DIVISION SLASH
    "a\u2044b",  # FRACTION SLASH
    "\uff0e\uff0e\uff0f\uff0e\uff0e",  # fullwidth "../.."
    "\u202e" + UID,  # RIGHT-TO-LEFT OVERRIDE
    UID + "\u200b",  # ZERO WIDTH SPACE
    "",
    "-",
]


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every path under `root` with its mode and content."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else b"")
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("evil", ESCAPING, ids=lambda s: repr(s)[:40])
def test_a_uid_that_is_no_uid_touches_nothing(
    inventory: NodeInventory, tmp_path: Path, evil: str
) -> None:
    api = Api()
    ref = ClaimRef("default", "claim", evil)
    api.add(ref, ["neurondevice0"])  # even a claim the API would return is refused
    preparer = make_preparer(inventory, tmp_path, api)
    # A sibling the escape would reach, to show nothing there changes either.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    before = snapshot(tmp_path)

    prepared = preparer.prepare([ref])[evil]
    unprepared = preparer.unprepare([ref])[evil]
    assert not prepared.devices
    errors = prepared.error, unprepared.error

    for error in errors:
        assert error == f"claim UID {evil!r} is not a Kubernetes UID"
    assert api.calls == []  # refused before the API, too
    assert snapshot(tmp_path) == before
    assert preparer.prepared == {}


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("../..", "claim"),
        ("default", "../../etc/passwd"),
        ("/", "/"),
        ("..", ".."),
        ("\x00", "a\x00b"),
        ("default", "\u2215etc\u2215passwd"),
        ("default", "x" * 5000),
        ("kube-system\n", "claim\r\n"),
    ],
    ids=lambda s: repr(s)[:20],
)
def test_names_and_namespaces_never_become_paths(
    inventory: NodeInventory, tmp_path: Path, namespace: str, name: str
) -> None:
    api = Api()
    ref = ClaimRef(namespace, name, UID)
    preparer = make_preparer(inventory, tmp_path, api)
    before = snapshot(tmp_path)

    # No such claim (the API server's validation forbids such names): nothing is written.
    outcome = preparer.prepare([ref])[UID]
    assert outcome.error.startswith(f"claim {ref}: ApiError: 404")
    assert snapshot(tmp_path) == before

    # Even if the API returned one, only the UID names files; the name is data.
    api.add(ref, ["neurondevice3"])

    assert preparer.prepare([ref])[UID].devices
    added = set(snapshot(tmp_path)) - set(before)
    assert added == {
        "cdi",
        f"cdi/neuron.aws.com-{UID}.json",
        "plugins/neuron.aws.com/checkpoint.json",
    }
    checkpoint = tmp_path / "plugins" / "neuron.aws.com" / "checkpoint.json"
    record = decode(checkpoint.read_bytes())[1][UID]
    assert (record.namespace, record.name) == (namespace, name)
    restarted = make_preparer(inventory, tmp_path, api)
    assert restarted.prepared[UID].name == name
    assert not restarted.unprepare([ref])[UID].error
    assert not cdi.spec_path(tmp_path / "cdi", UID).exists()
    assert decode(checkpoint.read_bytes())[1] == {}
