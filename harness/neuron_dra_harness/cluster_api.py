"""API and wait helpers of the e2e cluster, on plain dicts.

``ClusterApi`` is the base of ``Cluster``: everything here needs only the
connection to a running API server (and ``kubectl`` with its kubeconfig), not
how the control plane was started, so it is kept apart from that lifecycle.
"""

from __future__ import annotations

import json
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from kubernetes.client.exceptions import ApiException

from neuron_dra.resources.limits import CounterLayout
from neuron_dra_harness.build import Binaries

T = TypeVar("T")
Obj = dict[str, Any]

DEFAULT_NAMESPACE = "default"


class ClusterError(RuntimeError):
    """A component failed or a wait ran out of time."""


class ClusterApi(ABC):
    """Requests, CRUD, ``kubectl`` and polling against one API server."""

    # Assigned by Cluster, which makes the connection when it starts the
    # control plane; declared here because every helper below reads them.
    binaries: Binaries
    kubeconfig: Path
    _api: Any
    _plurals: dict[tuple[str, str], tuple[str, bool]]

    @abstractmethod
    def check_components(self) -> None:
        """Raise if a process behind the API died; ``wait_for`` calls it on
        every poll so that a crash fails a wait at once."""

    @property
    def api_client(self) -> Any:
        """The ``kubernetes.client.ApiClient`` for typed API classes, e.g.
        ``kubernetes.client.CoreV1Api(cluster.api_client)``."""
        if self._api is None:
            raise ClusterError("cluster is not running")
        return self._api

    # ----------------------------------------------------------------- raw API

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """One API request; returns the decoded JSON body."""
        params = [
            (k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()
        ]
        method_, url, headers, payload, post = self.api_client.param_serialize(
            method,
            path,
            query_params=params,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api_client.call_api(method_, url, headers, payload, post)
        data = resp.read()
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")
        if not 200 <= resp.status < 300:
            raise ApiException.from_response(http_resp=resp, body=text, data=None)
        return json.loads(text) if text else None

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """Plural name and namespaced-ness of a kind, from API discovery."""
        key = (api_version, kind)
        if key not in self._plurals:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = cast(Obj, self.request("GET", base))
            for res in listing.get("resources", []):
                if "/" not in res["name"]:
                    self._plurals[(api_version, res["kind"])] = (res["name"], res["namespaced"])
        if key not in self._plurals:
            raise ClusterError(f"{kind} is not served in {api_version}")
        return self._plurals[key]

    def path(
        self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None
    ) -> str:
        """URL path of a collection or of one object."""
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace or DEFAULT_NAMESPACE}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, obj: Obj) -> Obj:
        meta = obj.get("metadata", {})
        path = self.path(obj["apiVersion"], obj["kind"], namespace=meta.get("namespace"))
        return cast(Obj, self.request("POST", path, obj))

    def counter_layout(self) -> CounterLayout:
        """Where this server wants shared counters, asked by a dry run: 1.34 takes
        them beside the devices that consume them, 1.35 and later refuse that."""
        beside: Obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": "layout-probe-"},
            "spec": {
                "driver": "probe.example.com",
                "nodeName": "layout-probe",
                "pool": {"name": "layout-probe", "generation": 1, "resourceSliceCount": 1},
                "sharedCounters": [{"name": "set", "counters": {"c": {"value": "1"}}}],
                "devices": [
                    {
                        "name": "d",
                        "consumesCounters": [
                            {"counterSet": "set", "counters": {"c": {"value": "1"}}}
                        ],
                    }
                ],
            },
        }
        try:
            self.request(
                "POST",
                self.path("resource.k8s.io/v1", "ResourceSlice"),
                beside,
                query={"dryRun": "All"},
            )
        except ApiException as err:
            if err.status != 422:
                raise
            return CounterLayout.OWN_SLICE
        return CounterLayout.BESIDE_DEVICES

    def apply(self, obj: Obj, field_manager: str = "e2e") -> Obj:
        """Server-side apply (create or update)."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        return cast(
            Obj,
            self.request(
                "PATCH",
                path,
                obj,
                query={"fieldManager": field_manager, "force": True},
                content_type="application/apply-patch+yaml",
            ),
        )

    def apply_yaml(self, text: str) -> list[Obj]:
        """Apply every document of a YAML manifest."""
        return [self.apply(doc) for doc in yaml.safe_load_all(text) if doc]

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return cast(Obj, self.request("GET", self.path(api_version, kind, name, namespace)))

    def get_or_none(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_objects(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        query: dict[str, str | int | bool] = {}
        if field_selector:
            query["fieldSelector"] = field_selector
        if label_selector:
            query["labelSelector"] = label_selector
        result = cast(
            Obj, self.request("GET", self.path(api_version, kind, None, namespace), query=query)
        )
        return cast(list[Obj], result.get("items") or [])

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch, optionally of a subresource such as ``status``."""
        path = self.path(api_version, kind, name, namespace)
        if subresource:
            path += f"/{subresource}"
        return cast(
            Obj, self.request("PATCH", path, patch, content_type="application/merge-patch+json")
        )

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_period: int | None = None,
    ) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            self.request("DELETE", self.path(api_version, kind, name, namespace), body)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
        )

    # ----------------------------------------------------------------- waiting

    def wait_for(
        self,
        what: str,
        check: Callable[[], T | None],
        timeout: float = 30.0,
        interval: float = 0.1,
    ) -> T:
        """Poll ``check`` until it returns something truthy or the deadline
        passes; fails early if a component died. API errors count as "not yet"."""
        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        while True:
            try:
                result = check()
                if result:
                    return result
            except (ApiException, OSError, ValueError) as exc:
                last_error = exc
            self.check_components()
            if time.monotonic() >= deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
            time.sleep(interval)

    def wait_for_service_account(self, namespace: str, timeout: float = 30.0) -> None:
        self.wait_for(
            f"ServiceAccount {namespace}/default",
            lambda: self.get_or_none("v1", "ServiceAccount", "default", namespace),
            timeout,
        )

    def create_namespace(self, name: str, timeout: float = 30.0) -> Obj:
        """Create a namespace and wait until pods can be created in it."""
        ns = self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.wait_for_service_account(name, timeout)
        return ns

    def wait_for_pod(
        self,
        name: str,
        namespace: str = DEFAULT_NAMESPACE,
        predicate: Callable[[Obj], bool] = lambda _pod: True,
        what: str = "condition",
        timeout: float = 30.0,
    ) -> Obj:
        def check() -> Obj | None:
            pod = self.get_or_none("v1", "Pod", name, namespace)
            return pod if pod is not None and predicate(pod) else None

        return self.wait_for(f"pod {namespace}/{name}: {what}", check, timeout)

    def wait_for_pod_scheduled(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        return self.wait_for_pod(
            name, namespace, lambda p: bool(p["spec"].get("nodeName")), "bound to a node", timeout
        )

    def wait_for_pod_running(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        return self.wait_for_pod(
            name,
            namespace,
            lambda p: p.get("status", {}).get("phase") == "Running",
            "phase Running",
            timeout,
        )

    def wait_for_pod_gone(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> None:
        self.wait_for(
            f"pod {namespace}/{name} deleted",
            lambda: self.get_or_none("v1", "Pod", name, namespace) is None,
            timeout,
        )

    def wait_for_claim_allocated(
        self, name: str, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
    ) -> Obj:
        def check() -> Obj | None:
            claim = self.get_or_none("resource.k8s.io/v1", "ResourceClaim", name, namespace)
            if claim is None:
                return None
            results = (
                claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results")
            )
            return claim if results else None

        return self.wait_for(f"ResourceClaim {namespace}/{name} allocated", check, timeout)

    def events_for(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> list[Obj]:
        """core/v1 Events about the object called ``name``."""
        return self.list_objects(
            "v1", "Event", namespace, field_selector=f"involvedObject.name={name}"
        )

    # ----------------------------------------------------------------- nodes
