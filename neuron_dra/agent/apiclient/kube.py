"""The driver's Kubernetes API client: a few typed calls, nothing more.

HTTP/1.1 keep-alive connections from the standard library (`http.client`).
The calls the event loop makes run each in a worker thread; the claim read of
a prepare, already in a worker thread of the DRA server, blocks there. The
`kubernetes` package is not imported: it costs the agent ~24 MiB of memory and
~0.2 s of start-up, and aiohttp ~12 MiB, while `http.client` adds ~1 MiB and
its GET measured within noise of a bare blocking GET. Calls answer the JSON as
the server sent it; where an object enters the agent it is decoded once into the
typed fields the driver reads (`neuron_dra.agent.objects`). Where the server is and how to
authenticate comes from `config`, the connections from `connections`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import socket
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from neuron_dra.agent.apiclient import config as apiconfig
from neuron_dra.agent.apiclient.config import ApiConfig
from neuron_dra.agent.apiclient.connections import REQUEST_TIMEOUT_S, Pool
from neuron_dra.agent.apiclient.deadline import Watchdog
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.objects import envelope, watch

log = logging.getLogger(__name__)

__all__ = ["ApiConfig", "ApiError", "Json", "Kube", "Listed"]

Json = dict[str, Any]

RESOURCE_API = "/apis/resource.k8s.io/v1"
# The largest answer read: a node's slices or one claim are well under 1 MiB; a bigger
# answer (a proxy's error page, a hostile server) would take the agent past its memory
# limit before it failed to parse. A watch event is held to the same.
MAX_RESPONSE_BYTES = 8 << 20
_DEADLINES = Watchdog()
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; the client then lists again
# A watch's read timeout is the server's timeout plus this: a healthy server has closed
# the watch (or sent a bookmark) by then, so silence past it means a dead connection.
WATCH_READ_MARGIN_S = 30.0
# Open connections for calls at once (a watch has its own): the agent's calls are a
# claim GET per prepare plus the publisher's few, and each one takes milliseconds.
MAX_CONNECTIONS = 4
USER_AGENT = "neuron-dra"
# A request that failed on a reused keep-alive connection before any answer is sent
# again on a new one: the server may have closed the idle connection meanwhile.
# Only methods whose repeat changes nothing; a create is left to the caller's retry.
_RETRIED_ON_STALE = frozenset({"GET", "PUT", "DELETE", "PATCH"})


@dataclass(frozen=True)
class Listed:
    """A LIST's items and the resource version to watch from."""

    items: list[Json]
    resource_version: str


class Kube:
    """The API calls the agent makes, over a few keep-alive connections.

    The blocking calls (`get_resource_claim`, `list_sync`, `get_sync`) may be made from
    any thread and block it, within the request's deadline; the `async` ones are made on
    the event loop and run the request in a worker thread. Every call raises `ApiError`
    for an error answer, a timeout or a broken connection; a GET, PUT, DELETE or PATCH
    that failed on a stale connection before any answer is sent once more, which
    changes nothing on the server. It keeps no state a crash could lose.
    """

    def __init__(
        self,
        config: ApiConfig,
        *,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        watch_read_timeout_s: float | None = None,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self._config = config
        self._pool = Pool(config, max_connections)
        self._request_timeout_s = request_timeout_s
        self._max_response_bytes = max_response_bytes
        self._watch_timeout_s = watch_timeout_s
        self._watch_read_timeout_s = watch_read_timeout_s

    @classmethod
    def connect(cls, kubeconfig: Path | None) -> Kube:
        """Client from a kubeconfig file, or the pod's service account when None."""
        return cls(apiconfig.load(kubeconfig))

    def apart(self, max_connections: int) -> Kube:
        """A client of the same server and credentials with connections of its own:
        for calls that must neither wait for this one's connections nor hold them."""
        return Kube(
            self._config,
            max_connections=max_connections,
            request_timeout_s=self._request_timeout_s,
            max_response_bytes=self._max_response_bytes,
        )

    def close(self) -> None:
        self._pool.close()

    # --- typed calls ---------------------------------------------------------

    def get_resource_claim(self, namespace: str, name: str) -> Json:
        """Blocking: a prepare reads its claim in the thread the kubelet's call came on."""
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        return self._call_sync("GET", path, None, None, "application/json")

    async def apply_claim_status(self, namespace: str, name: str, body: Json, manager: str) -> Json:
        """Server-side apply to a claim's status as field manager `manager`, forced: the
        fields `manager` owns become exactly those in `body`."""
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}/status"
        query = [("fieldManager", manager), ("force", "true")]
        return await self._call(
            "PATCH", path, query=query, body=body, content_type="application/apply-patch+yaml"
        )

    async def list_resource_slices(self, node: str, driver: str) -> Listed:
        result = await self._call(
            "GET", f"{RESOURCE_API}/resourceslices", query=_slice_selector(node, driver)
        )
        found = envelope.page(result)
        if not found.resource_version:
            raise ApiError(0, "the API server listed slices without a resource version")
        return Listed(found.items, found.resource_version)

    async def create_resource_slice(self, body: Json, *, dry_run: bool = False) -> Json:
        query = [("dryRun", "All")] if dry_run else []
        return await self._call("POST", f"{RESOURCE_API}/resourceslices", body=body, query=query)

    async def replace_resource_slice(self, name: str, body: Json) -> Json:
        return await self._call("PUT", f"{RESOURCE_API}/resourceslices/{quote(name)}", body=body)

    async def delete_resource_slice(self, name: str) -> None:
        try:
            await self._call("DELETE", f"{RESOURCE_API}/resourceslices/{quote(name)}")
        except ApiError as err:
            if err.status != 404:
                raise

    async def get_node(self, name: str) -> Json:
        return await self._call("GET", f"/api/v1/nodes/{quote(name)}")

    async def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> Json:
        """Merge-patch labels; None removes one."""
        return await self._call(
            "PATCH",
            f"/api/v1/nodes/{quote(name)}",
            body={"metadata": {"labels": labels}},
            content_type="application/merge-patch+json",
        )

    async def server_version(self) -> str:
        """The API server's gitVersion (GET /version), e.g. v1.37.2; '' if it names none."""
        return envelope.git_version(await self._call("GET", "/version"))

    async def create_event(self, namespace: str, body: Json) -> Json:
        return await self._call("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)

    async def create(self, path: str, body: Json) -> Json:
        """POST `body` to `path` and return the answer: a review (TokenReview,
        SubjectAccessReview), which the server answers without storing it."""
        return await self._call("POST", path, body=body)

    async def watch_resource_slices(
        self, node: str, driver: str, resource_version: str
    ) -> AsyncGenerator[Json, None]:
        """Watch events ({type, object}) for one node's slices, until the server ends it.

        Raises ApiError (status 0) when the connection stays silent past the read
        timeout: a dropped connection ends the watch instead of stopping it forever.
        """
        path, selector = f"{RESOURCE_API}/resourceslices", _slice_selector(node, driver)
        async for event in self._watch(path, selector, resource_version):
            yield event

    async def list_node(self, name: str) -> Listed:
        """The Node called `name` as a list of none or one, and its resource version."""
        found = envelope.page(await self._call("GET", "/api/v1/nodes", query=_name_selector(name)))
        return Listed(found.items, found.resource_version)

    async def watch_node(self, name: str, resource_version: str) -> AsyncGenerator[Json, None]:
        """Watch events for the Node called `name` (created again included), as
        `watch_resource_slices`."""
        async for event in self._watch("/api/v1/nodes", _name_selector(name), resource_version):
            yield event

    async def _watch(
        self, path: str, selector: list[tuple[str, str]], resource_version: str
    ) -> AsyncGenerator[Json, None]:
        query = [
            *selector,
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self._watch_timeout_s)),
        ]
        read_timeout = self._watch_read_timeout_s
        if read_timeout is None:
            read_timeout = self._watch_timeout_s + WATCH_READ_MARGIN_S
        async for event in self._stream(path, query, read_timeout):
            yield event

    def list_sync(self, path: str) -> list[Json]:
        """The items of a collection, blocking: for one-shot tools, not the node agent."""
        return envelope.page(self._call_sync("GET", path, None, None, "application/json")).items

    def get_sync(self, path: str) -> Json:
        """One object, blocking: for one-shot tools, not the node agent."""
        return self._call_sync("GET", path, None, None, "application/json")

    # --- transport -------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Json | None = None,
        content_type: str = "application/json",
    ) -> Json:
        return await asyncio.to_thread(self._call_sync, method, path, query, body, content_type)

    def _call_sync(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Json | None,
        content_type: str,
    ) -> Json:
        target, headers, payload = self._request(path, query, body, content_type)
        while True:
            conn, reused = self._pool.take()
            token = None
            try:
                if conn.sock is None:
                    conn.connect()
                if conn.sock is not None:  # http.client keeps one once connected
                    token = _DEADLINES.watch(conn.sock, self._request_timeout_s)
                conn.request(method, target, payload, headers)
                response = conn.getresponse()
                data = _read_capped(response, self._max_response_bytes)
                if token is not None and _DEADLINES.done(token):
                    raise _LateError()
            except BaseException as err:
                # A connection in an unknown state is not reused; its slot is freed.
                conn.close()
                self._pool.give_back(None)
                late = isinstance(err, _LateError) or (token is not None and _DEADLINES.done(token))
                if late:
                    raise ApiError(
                        0, f"API server gave no whole answer within {self._request_timeout_s:g}s"
                    ) from None
                if isinstance(err, ApiError) or not isinstance(
                    err, OSError | http.client.HTTPException
                ):
                    raise
                if reused and method in _RETRIED_ON_STALE and _before_answer(err):
                    continue
                raise ApiError(0, f"API server unreachable: {err}") from None
            self._pool.give_back(conn)
            break
        obj = _json(data)
        if not 200 <= response.status < 300:
            raise _error(response, obj)
        return obj

    def _request(
        self,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Json | None,
        content_type: str,
    ) -> tuple[str, dict[str, str], bytes | None]:
        target = f"{path}?{urlencode(query, quote_via=quote)}" if query else path
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": USER_AGENT,
            **self._config.headers,
        }
        authorization = self._config.authorization()
        if authorization:
            headers["Authorization"] = authorization
        payload = json.dumps(body).encode() if body is not None else None
        return target, headers, payload

    async def _stream(
        self, path: str, query: list[tuple[str, str]], read_timeout: float
    ) -> AsyncGenerator[Json, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Json | BaseException | None] = asyncio.Queue()
        stop = threading.Event()
        # A connection of its own, not the pool's: a watch holds it for minutes.
        conn = self._pool.new_connection()
        response = await asyncio.to_thread(self._open_stream, conn, path, query, read_timeout)

        def pump() -> None:
            try:
                # One event per line, whatever the HTTP chunks: a chunk may hold several
                # events or part of one. readline() joins and splits the decoded chunks.
                while line := response.readline(self._max_response_bytes + 1):
                    if stop.is_set():
                        return
                    if len(line) > self._max_response_bytes:
                        raise ValueError(f"a watch event over {self._max_response_bytes} bytes")
                    if line.strip():
                        loop.call_soon_threadsafe(queue.put_nowait, json.loads(line))
                loop.call_soon_threadsafe(queue.put_nowait, None)
            except BaseException as err:  # handed to the consumer, not lost in the thread
                if not stop.is_set():
                    loop.call_soon_threadsafe(queue.put_nowait, err)
            finally:
                conn.close()  # here, by the thread reading it, never under its feet

        thread = threading.Thread(target=pump, name="kube-watch", daemon=True)
        thread.start()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise ApiError(0, f"watch broken: {item}")
                event = watch.decode(item)
                if event.type == "ERROR":
                    said = envelope.status(event.object)
                    message = said.message or "the watch ended with an error"
                    raise ApiError(said.code, message, said.retry_after_s)
                yield item
        finally:
            stop.set()
            # Wakes the thread from a blocked read: it sees the end and closes the connection.
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _open_stream(
        self,
        conn: http.client.HTTPConnection,
        path: str,
        query: list[tuple[str, str]],
        read_timeout: float,
    ) -> http.client.HTTPResponse:
        target, headers, _ = self._request(path, query, None, "application/json")
        try:
            conn.request("GET", target, None, headers)
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                obj = _json(response.read(4096))  # an error Status; the rest is not needed
                conn.close()
                raise _error(response, obj)
            # From here on the timeout bounds each read of the body, i.e. the silence
            # between events, not the whole watch.
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise ApiError(0, f"API server unreachable: {err}") from None
        return response


def _before_answer(err: BaseException) -> bool:
    """Whether a request failed before the server answered a byte: safe to send again."""
    return isinstance(err, http.client.RemoteDisconnected | BrokenPipeError | ConnectionResetError)


def _slice_selector(node: str, driver: str) -> list[tuple[str, str]]:
    return [("fieldSelector", f"spec.nodeName={node},spec.driver={driver}")]


class _LateError(Exception):
    """The answer came whole, but only after the call's deadline cut the socket."""


def _read_capped(response: http.client.HTTPResponse, limit: int) -> bytes:
    chunks, size = [], 0
    while chunk := response.read(min(1 << 16, limit + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ApiError(0, f"API server answered more than {limit} bytes; not read")
    return b"".join(chunks)


def _error(response: http.client.HTTPResponse, body: Json) -> ApiError:
    """The error an answer stands for. The seconds the server asked for: its
    Retry-After header (seconds; the HTTP-date form is not sent by kube-apiserver),
    else the Status's details.retryAfterSeconds."""
    said = envelope.status(body)
    retry = envelope.seconds(response.getheader("Retry-After"))
    return ApiError(
        response.status,
        said.message or response.reason,
        said.retry_after_s if retry is None else retry,
    )


def _name_selector(name: str) -> list[tuple[str, str]]:
    return [("fieldSelector", f"metadata.name={name}")]


def _json(data: bytes) -> Json:
    try:
        obj = json.loads(data) if data else {}
    except ValueError:
        return {"message": data[:200].decode(errors="replace")}
    return obj if isinstance(obj, dict) else {"items": obj}
