"""The driver's Kubernetes API client: a few typed async calls, nothing more.

Built on the `kubernetes` package's ApiClient (kubeconfig, in-cluster config,
auth, TLS), with its blocking calls run in worker threads so the node agent
keeps one event loop. Objects stay plain JSON dicts: the driver reads a handful
of fields, and skipping the generated models keeps a prepare's API read to the
HTTP round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.watch.watch import iter_resp_lines

from neuron_dra.agent.apierror import ApiError

__all__ = ["ApiError", "Json", "Kube", "SliceList"]

Json = dict[str, Any]

RESOURCE_API = "/apis/resource.k8s.io/v1"
REQUEST_TIMEOUT_S = 30.0
WATCH_TIMEOUT_S = 300  # the server ends a watch after this; the client then lists again
# A watch's read timeout is the server's timeout plus this: a healthy server has closed
# the watch (or sent a bookmark) by then, so silence past it means a dead connection.
WATCH_READ_MARGIN_S = 30.0


@dataclass(frozen=True)
class SliceList:
    items: list[Json]
    resource_version: str


class Kube:
    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        watch_read_timeout_s: float | None = None,
    ) -> None:
        self._api = api
        self._watch_timeout_s = watch_timeout_s
        self._watch_read_timeout_s = watch_read_timeout_s

    @classmethod
    def connect(cls, kubeconfig: Path | None) -> Kube:
        """Client from a kubeconfig file, or the pod's service account when None."""
        configuration = k8s.Configuration()
        if kubeconfig is None:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        return cls(k8s.ApiClient(configuration))

    def close(self) -> None:
        self._api.close()

    # --- typed calls ---------------------------------------------------------

    async def get_resource_claim(self, namespace: str, name: str) -> Json:
        path = f"{RESOURCE_API}/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"
        return await self._call("GET", path)

    async def list_resource_slices(self, node: str, driver: str) -> SliceList:
        result = await self._call(
            "GET", f"{RESOURCE_API}/resourceslices", query=_slice_selector(node, driver)
        )
        return SliceList(result.get("items") or [], result["metadata"]["resourceVersion"])

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
        return str((await self._call("GET", "/version")).get("gitVersion") or "")

    async def create_event(self, namespace: str, body: Json) -> Json:
        return await self._call("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)

    async def watch_resource_slices(
        self, node: str, driver: str, resource_version: str
    ) -> AsyncGenerator[Json, None]:
        """Watch events ({type, object}) for one node's slices, until the server ends it.

        Raises ApiError (status 0) when the connection stays silent past the read
        timeout: a dropped connection ends the watch instead of stopping it forever.
        """
        query = [
            *_slice_selector(node, driver),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(self._watch_timeout_s)),
        ]
        read_timeout = self._watch_read_timeout_s
        if read_timeout is None:
            read_timeout = self._watch_timeout_s + WATCH_READ_MARGIN_S
        async for event in self._stream(f"{RESOURCE_API}/resourceslices", query, read_timeout):
            yield event

    def list_sync(self, path: str) -> list[Json]:
        """The items of a collection, blocking: for one-shot tools, not the node agent."""
        return list(self._call_sync("GET", path, None, None, "application/json").get("items") or [])

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
        response = self._send(method, path, query, body, content_type, timeout=REQUEST_TIMEOUT_S)
        try:
            data = response.read()
        finally:
            response.response.release_conn()
        obj = _json(data)
        if not 200 <= response.status < 300:
            raise ApiError(response.status, str(obj.get("message") or response.reason))
        return obj

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Json | None,
        content_type: str,
        *,
        timeout: float | tuple[float, float],
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, payload, _ = self._api.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )  # fmt: skip
        try:
            return self._api.call_api(method, url, headers, payload, _request_timeout=timeout)
        except k8s.ApiException as err:
            raise ApiError(err.status or 0, str(err.reason)) from None
        except Exception as err:  # urllib3 and socket errors: the server is unreachable
            raise ApiError(0, f"API server unreachable: {err}") from None

    async def _stream(
        self, path: str, query: list[tuple[str, str]], read_timeout: float
    ) -> AsyncGenerator[Json, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Json | BaseException | None] = asyncio.Queue()
        stop = threading.Event()
        # (connect, read): urllib3 applies the read timeout to every socket read of the body.
        timeout = (REQUEST_TIMEOUT_S, read_timeout)
        response: Any = await asyncio.to_thread(
            lambda: self._send("GET", path, query, None, "application/json", timeout=timeout)
        )
        if not 200 <= response.status < 300:
            raise ApiError(response.status, str(_json(response.read()).get("message")))

        def pump() -> None:
            try:
                # One event per line, whatever the HTTP chunks: a chunk may hold several
                # events or part of one. The client library's watch frames it this way.
                for line in iter_resp_lines(response.response):
                    if stop.is_set():
                        return
                    if line.strip():
                        loop.call_soon_threadsafe(queue.put_nowait, json.loads(line))
                loop.call_soon_threadsafe(queue.put_nowait, None)
            except BaseException as err:  # handed to the consumer, not lost in the thread
                if not stop.is_set():
                    loop.call_soon_threadsafe(queue.put_nowait, err)

        thread = threading.Thread(target=pump, name="kube-watch", daemon=True)
        thread.start()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise ApiError(0, f"watch broken: {item}")
                if item.get("type") == "ERROR":
                    obj = item.get("object") or {}
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("message")))
                yield item
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                response.response.shutdown()
            with contextlib.suppress(Exception):
                response.response.release_conn()


def _slice_selector(node: str, driver: str) -> list[tuple[str, str]]:
    return [("fieldSelector", f"spec.nodeName={node},spec.driver={driver}")]


def _json(data: bytes) -> Json:
    try:
        obj = json.loads(data) if data else {}
    except ValueError:
        return {"message": data[:200].decode(errors="replace")}
    return obj if isinstance(obj, dict) else {"items": obj}
