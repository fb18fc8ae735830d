"""The metrics endpoint's HTTP side: GET /metrics and /healthz, one request per connection.

A small asyncio server of its own, bounded in time, size and connections:
prometheus_client's server runs a thread per connection with no time bound, and
its aiohttp handler would bring aiohttp's server into the agent (about 300 ms
of imports and 9 MiB).

Connections are bounded, but an idle one (its request head not read yet) never
turns a newcomer away: when the bound is reached, the oldest idle connection of
the address holding the most idle ones is dropped for the newcomer. A client
that opens idle connections to fill the bound drops its own; only connections
inside a request (the head read, the answer being made) fill it for good, and
each lasts at most `timeout_s` a step.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

log = logging.getLogger(__name__)

# The HTTP status of a request with this Authorization header (or none), from this
# client address: `metricsauth.Authorizer.status`.
Authorize = Callable[[str | None, str], Awaitable[int]]
Scrape = Callable[[float], Awaitable[bytes]]
_REFUSED = {
    HTTPStatus.UNAUTHORIZED: (b"a bearer token is needed\n", b"WWW-Authenticate: Bearer\r\n"),
    HTTPStatus.FORBIDDEN: (b"not allowed to get /metrics\n", b""),
    # New tokens come faster than the API server is asked to review them.
    HTTPStatus.TOO_MANY_REQUESTS: (b"too many new tokens\n", b"Retry-After: 1\r\n"),
    HTTPStatus.SERVICE_UNAVAILABLE: (b"authorization unavailable\n", b""),
}

# Request bounds of the HTTP endpoint. A scrape is one short GET: its head fits
# in a few hundred bytes, and Prometheus gives up after its own timeout (10 s).
MAX_HEAD_BYTES = 8192
TIMEOUT_S = 5.0
MAX_CONNECTIONS = 16


class _Idle:
    """Connections whose request head is not read yet, oldest first, with their
    client addresses: what is dropped when the server is full."""

    def __init__(self) -> None:
        self._writers: dict[asyncio.StreamWriter, str] = {}  # insertion order: oldest first

    def add(self, writer: asyncio.StreamWriter, address: str) -> None:
        self._writers[writer] = address

    def discard(self, writer: asyncio.StreamWriter) -> None:
        self._writers.pop(writer, None)

    def drop_one(self) -> bool:
        """Abort the oldest idle connection of the address with the most; False if none."""
        if not self._writers:
            return False
        [(busiest, _)] = Counter(self._writers.values()).most_common(1)
        victim = next(w for w, address in self._writers.items() if address == busiest)
        del self._writers[victim]
        victim.transport.abort()
        return True


async def serve(
    scrape: Scrape,
    port: int,
    host: str = "0.0.0.0",
    *,
    timeout_s: float = TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    authorize: Authorize | None = None,
) -> asyncio.Server:
    """GET /metrics (the body `scrape` makes) and /healthz over plain HTTP/1.1.

    Every step of a connection (reading the head, the scrape, writing the
    answer) is bounded by `timeout_s`, the head by MAX_HEAD_BYTES, and the
    connections served at once by `max_connections`, idle ones dropped first
    (module docstring). With `authorize`, /metrics is answered only when it says
    200 of the request's Authorization header and client address.
    """
    open_connections = 0
    idle = _Idle()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_connections
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        # Past the bound an idle connection makes room; inside-request ones do not.
        admitted = open_connections < max_connections or idle.drop_one()
        open_connections += 1
        try:
            if not admitted:
                answer = _response(b"503 Service Unavailable", b"busy\n")
            else:
                idle.add(writer, address)
                answer = await _answer(
                    reader,
                    address,
                    scrape=scrape,
                    timeout_s=timeout_s,
                    authorize=authorize,
                    on_head=lambda: idle.discard(writer),
                )
            if answer:
                writer.write(answer)
                await asyncio.wait_for(writer.drain(), timeout_s)
        except (TimeoutError, ConnectionError):
            pass  # a client that stalls or goes away: drop it
        except Exception:
            log.exception("metrics request failed")
        finally:
            idle.discard(writer)
            open_connections -= 1
            writer.close()

    server = await asyncio.start_server(handle, host, port, limit=MAX_HEAD_BYTES)
    log.info("metrics served", extra={"port": server.sockets[0].getsockname()[1]})
    return server


async def _answer(
    reader: asyncio.StreamReader,
    address: str,
    *,
    scrape: Scrape,
    timeout_s: float,
    authorize: Authorize | None,
    on_head: Callable[[], None],
) -> bytes:
    """The response to one request; empty when the client is to be dropped unanswered.
    `on_head` is called once the request head is read: the connection is not idle."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
    except asyncio.LimitOverrunError:
        return _response(b"431 Request Header Fields Too Large", b"request head too large\n")
    except (TimeoutError, asyncio.IncompleteReadError):
        return b""
    on_head()
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        return _response(b"400 Bad Request", b"bad request\n")
    method, path = parts[0], parts[1].split(b"?", 1)[0]
    if path not in (b"/metrics", b"/healthz"):
        return _response(b"404 Not Found", b"not found\n")
    if method != b"GET":
        return _response(b"405 Method Not Allowed", b"GET only\n", b"Allow: GET\r\n")
    if path == b"/healthz":
        return _response(b"200 OK", b"ok\n")
    if authorize is not None:
        try:
            verdict = await asyncio.wait_for(
                authorize(_header(head, b"authorization"), address), timeout_s
            )
        except TimeoutError:
            verdict = HTTPStatus.SERVICE_UNAVAILABLE  # the API server is slow to review
        if verdict != HTTPStatus.OK:
            if verdict not in _REFUSED:
                verdict = HTTPStatus.SERVICE_UNAVAILABLE
            refused = HTTPStatus(verdict)
            line = f"{refused.value} {refused.phrase}".encode()
            return _response(line, *_REFUSED[refused])
    try:
        body = await scrape(timeout_s)
    except TimeoutError:
        log.warning("metrics scrape timed out: a device file read is slow or hung")
        return _response(b"503 Service Unavailable", b"scrape timed out\n")
    except Exception:
        log.exception("metrics scrape failed")
        return _response(b"500 Internal Server Error", b"scrape failed\n")
    return _response(b"200 OK", body, kind=CONTENT_TYPE_PLAIN_0_0_4.encode())


def _header(head: bytes, name: bytes) -> str | None:
    """The first value of header `name` (lower case) in a request head."""
    for line in head.split(b"\r\n")[1:]:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return None


def _response(status: bytes, body: bytes, extra: bytes = b"", kind: bytes = b"text/plain") -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + kind
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n"
        + extra
        + b"\r\n"
        + body
    )
