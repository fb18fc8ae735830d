"""An API server under stress, on a loopback port, for the agent's watch loops: LISTs
(of Nodes or ResourceSlices) and GETs of the Node served, every watch refused (429 with
Retry-After, or a 410 Gone ERROR event) or delivering one event and ending; label
patches applied. It records every request, so a test can count what a node sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from neuron_dra.agent.apiclient.kube import Json

NAME = "n1"


@dataclass
class Server:
    """What the peer answers, and what it was asked."""

    watch: str = "429"  # 429 (Retry-After), 410 (an ERROR event), or "event" then the end
    url: str = ""  # where it listens
    node_answer: str = "whole"  # the Node GET: whole, "trickle" (a byte at a time), "huge"
    retry_after: str | None = "2"
    # Status codes for the next LISTs, in order (503: the server is away); then 200.
    list_codes: list[int] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=lambda: {"team": "vision"})
    requests: list[str] = field(default_factory=list)
    # (loop, event, n): the event is set once n LISTs were served.
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event, int]] = field(
        default_factory=list
    )
    patches: list[Json] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def node(self) -> Json:
        return {"metadata": {"name": NAME, "uid": "u1", "labels": dict(self.labels)}}


def handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            watching = query.get("watch") == ["true"]
            if url.path == f"/api/v1/nodes/{NAME}":
                with server.lock:
                    server.requests.append("GET")
                if server.node_answer == "trickle":
                    self._trickle(json.dumps(server.node()).encode())
                elif server.node_answer == "huge":
                    self._send(200, {**server.node(), "padding": "x" * (1 << 20)})
                else:
                    self._send(200, server.node())
                return
            with server.lock:
                server.requests.append("WATCH" if watching else "LIST")
                lists = server.requests.count("LIST")
            for loop, reached, count in server.waiters:
                if lists >= count:
                    loop.call_soon_threadsafe(reached.set)
            nodes = url.path == "/api/v1/nodes"
            if nodes:
                assert query["fieldSelector"] == [f"metadata.name={NAME}"]
            code = server.list_codes.pop(0) if not watching and server.list_codes else 200
            if code != 200:
                self._send(code, {"kind": "Status", "code": code, "message": "unavailable"})
            elif not watching:
                items = [server.node()] if nodes else []
                self._send(200, {"items": items, "metadata": {"resourceVersion": "7"}})
            elif server.watch == "429":
                headers = {"Retry-After": server.retry_after} if server.retry_after else {}
                self._send(429, {"kind": "Status", "message": "too many requests"}, headers)
            else:
                status = {"kind": "Status", "code": 410, "message": "too old resource version"}
                event = {"type": "ERROR", "object": status}
                if server.watch == "event":
                    event = {"type": "MODIFIED", "object": server.node()}
                self._stream(json.dumps(event).encode() + b"\n")

        def do_PATCH(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with server.lock:
                server.requests.append("PATCH")
                server.patches.append(body)
                for key, value in body["metadata"]["labels"].items():
                    if value is None:
                        server.labels.pop(key, None)
                    else:
                        server.labels[key] = value
            self._send(200, server.node())

        def _trickle(self, body: bytes) -> None:
            """A whole answer, one byte at a time: each read succeeds, the call never ends."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.02)

        def _send(self, code: int, obj: Json, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _stream(self, line: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line))
            self.close_connection = True

    return Handler


BOUND_S = 10.0
Sleep = Callable[[float], Awaitable[None]]


def waits_of(
    server: Server, loop: Callable[[Sleep], Awaitable[None]], passes: int, *, lists: int = 0
) -> list[float]:
    """Run `loop(sleep)` until it has asked to wait `passes` times, or the server has
    served `lists` LISTs; the waits it asked for, recorded, never slept."""
    waits: list[float] = []

    async def main() -> None:
        done = asyncio.Event()
        if lists:
            server.waiters.append((asyncio.get_running_loop(), done, lists))

        async def sleep(seconds: float) -> None:
            waits.append(seconds)
            if len(waits) >= passes:
                done.set()
                await asyncio.Event().wait()

        task = asyncio.ensure_future(loop(sleep))
        try:
            await asyncio.wait_for(done.wait(), BOUND_S)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return waits


def first_minute(waits: list[float]) -> int:
    """Requests (a LIST and a watch each pass) sent in the first 60 s of waiting."""
    spent, passes = 0.0, 1
    for wait in waits:
        spent += wait
        if spent > 60:
            break
        passes += 1
    return 2 * passes
