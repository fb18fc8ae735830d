"""The slice watch's framing and read timeout, and keep-alive reuse, against a local HTTP peer.

The peer is a real HTTP server on a loopback port that writes the watch
protocol (chunked transfer, one JSON event per line) with the chunk boundaries
each test chooses, and can fall silent without closing: what a dropped
connection looks like to the client. Nothing in the client is replaced.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from consts import DRIVER_NAME
from neuron_dra.agent.apiclient.kube import ApiConfig, ApiError, Json, Kube
from neuron_dra.agent.slices.publisher import SlicePublisher

BOUND_S = 10.0  # far above every timeout configured here: reaching it means a hang


def _event(kind: str, rv: str) -> bytes:
    obj = {"kind": "ResourceSlice", "metadata": {"name": f"s-{rv}", "resourceVersion": rv}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


@dataclass
class Peer:
    """What the server answers: the watch's chunks, then silence or the end."""

    chunks: list[bytes] = field(default_factory=list)
    silent: bool = False  # after the chunks, keep the connection open and write nothing
    release: threading.Event = field(default_factory=threading.Event)
    lists: int = 0
    connections: int = 0
    authorizations: list[str | None] = field(default_factory=list)
    drop_idle: bool = False  # close each connection after its answer, without saying so
    listed: list[tuple[asyncio.AbstractEventLoop, asyncio.Event, int]] = field(default_factory=list)

    def note_list(self) -> None:
        self.lists += 1
        for loop, reached, count in self.listed:
            if self.lists >= count:
                loop.call_soon_threadsafe(reached.set)


def _handler(peer: Peer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            peer.connections += 1

        def do_GET(self) -> None:
            peer.authorizations.append(self.headers.get("Authorization"))
            if self.path.startswith("/api/v1/nodes/"):
                self._json({"metadata": {"name": "n1", "uid": "uid-1"}})
            elif "watch=true" in self.path:
                self._watch()
            else:
                peer.note_list()
                self._json({"items": [], "metadata": {"resourceVersion": "1"}})

        def _json(self, obj: Json) -> None:
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            # As a server (or a load balancer) closing an idle keep-alive connection.
            self.close_connection = peer.drop_idle

        def _watch(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in peer.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            if peer.silent:
                peer.release.wait()
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

    return Handler


@pytest.fixture
def peer() -> Iterator[tuple[Peer, str]]:
    state = Peer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


def _kube(host: str, read_timeout_s: float | None = None) -> Kube:
    return Kube(ApiConfig(server=host), watch_read_timeout_s=read_timeout_s)


async def _all_events(kube: Kube) -> list[Json]:
    return [e async for e in kube.watch_resource_slices("n1", DRIVER_NAME, "1")]


def test_events_are_framed_by_line_not_by_chunk(peer: tuple[Peer, str]) -> None:
    state, host = peer
    one, two, three = _event("ADDED", "2"), _event("MODIFIED", "3"), _event("BOOKMARK", "4")
    # Two events in one chunk, then one event split across two chunks (mid-JSON).
    state.chunks = [one + two, three[:17], three[17:]]
    kube = _kube(host)
    try:
        events = asyncio.run(asyncio.wait_for(_all_events(kube), BOUND_S))
    finally:
        kube.close()
    assert events == [json.loads(one), json.loads(two), json.loads(three)]


def test_a_silent_watch_ends_within_the_read_timeout(peer: tuple[Peer, str]) -> None:
    state, host = peer
    state.chunks = [_event("BOOKMARK", "2")]
    state.silent = True
    kube = _kube(host, read_timeout_s=0.5)

    async def main() -> tuple[list[Json], float]:
        seen: list[Json] = []
        start = time.monotonic()
        with pytest.raises(ApiError) as raised:
            async for event in kube.watch_resource_slices("n1", DRIVER_NAME, "1"):
                seen.append(event)
        assert raised.value.no_answer, raised.value
        return seen, time.monotonic() - start

    try:
        # wait_for turns a hang (no read timeout) into a TimeoutError failure.
        seen, took = asyncio.run(asyncio.wait_for(main(), BOUND_S))
    finally:
        kube.close()
    assert [e["type"] for e in seen] == ["BOOKMARK"]
    assert 0.5 <= took < BOUND_S


def _lists_again(host: str, state: Peer, publisher_of: Any, kube: Kube) -> None:
    async def main() -> None:
        reached = asyncio.Event()
        state.listed.append((asyncio.get_running_loop(), reached, 2))
        publisher: SlicePublisher = publisher_of(kube)
        task = asyncio.create_task(publisher.run())
        try:
            # wait_for turns a hang on the silent watch into a TimeoutError failure.
            await asyncio.wait_for(reached.wait(), BOUND_S)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        kube.close()
    assert state.lists >= 2


def test_the_publisher_lists_again_after_a_silent_watch_times_out(
    peer: tuple[Peer, str],
) -> None:
    state, host = peer
    state.silent = True
    _lists_again(
        host,
        state,
        lambda kube: SlicePublisher(kube, "n1", lambda generation, uid: []),
        _kube(host, read_timeout_s=0.5),
    )


def test_the_publisher_resyncs_while_the_watch_is_open_and_quiet(
    peer: tuple[Peer, str],
) -> None:
    state, host = peer
    state.silent = True
    _lists_again(
        host,
        state,
        lambda kube: SlicePublisher(kube, "n1", lambda generation, uid: [], resync_s=0.5),
        _kube(host),  # the default read timeout, far above the bound
    )


def test_calls_share_one_keep_alive_connection_and_send_the_token(
    peer: tuple[Peer, str],
) -> None:
    state, host = peer
    kube = Kube(ApiConfig(server=host, authorization=lambda: "Bearer t0k"))

    async def main() -> None:
        for _ in range(5):
            await kube.get_node("n1")
        await kube.list_resource_slices("n1", DRIVER_NAME)

    try:
        asyncio.run(asyncio.wait_for(main(), BOUND_S))
    finally:
        kube.close()
    assert state.connections == 1
    assert state.authorizations == ["Bearer t0k"] * 6


def test_a_connection_the_server_closed_while_idle_is_not_an_error(
    peer: tuple[Peer, str],
) -> None:
    state, host = peer
    state.drop_idle = True
    kube = _kube(host)

    async def main() -> list[Json]:
        return [await kube.get_node("n1") for _ in range(3)]

    try:
        nodes = asyncio.run(asyncio.wait_for(main(), BOUND_S))
    finally:
        kube.close()
    assert [n["metadata"]["uid"] for n in nodes] == ["uid-1"] * 3
    assert state.connections == 3
