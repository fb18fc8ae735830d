"""The fleet benchmark's API client over a connection that drops after a write landed.

A loaded API server can take a write and lose the connection before its answer
arrives. The client retries; the retry then meets the object its first attempt wrote
(AlreadyExists for a POST, a moved resourceVersion for a PUT). It must take that
object as written, not fail the run tens of minutes in.
"""

from __future__ import annotations

import http.client
from typing import Any

import pytest

from neuron_dra_harness.cluster import Cluster
from tests.bench_modules import load

pytestmark = pytest.mark.e2e

fleet = load("fleet")


class DropsAfterFirstAnswer(http.client.HTTPSConnection):
    """Resets after the server answered the first request: the write landed, its
    answer was lost."""

    dropped = False

    def getresponse(self) -> http.client.HTTPResponse:
        answer = super().getresponse()
        if not self.dropped:
            self.dropped = True
            answer.read()
            self.close()
            raise ConnectionResetError("reset after the server answered")
        return answer


def dropping(api: Any) -> DropsAfterFirstAnswer:
    """Makes `api`'s next call go over a connection that drops after its answer."""
    connection = DropsAfterFirstAnswer(api._host, api._port, context=api._context, timeout=30)
    api._local.connection = connection
    return connection


def a_slice(name: str) -> dict[str, Any]:
    return {
        "apiVersion": fleet.RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "bench-client.example.com",
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": [{"name": "dev0"}],
        },
    }


def test_a_post_whose_answer_was_lost_returns_the_object_it_wrote(cluster: Cluster) -> None:
    api = fleet.Api(cluster)
    connection = dropping(api)
    written = api.call("POST", fleet.slice_path(), a_slice("bench-client-post"))
    assert connection.dropped
    assert written["metadata"]["name"] == "bench-client-post"
    assert written["spec"]["devices"] == [{"name": "dev0"}]
    api.call("DELETE", fleet.slice_path("bench-client-post"))


def test_a_put_whose_answer_was_lost_returns_the_object_it_wrote(cluster: Cluster) -> None:
    api = fleet.Api(cluster)
    stored = api.call("POST", fleet.slice_path(), a_slice("bench-client-put"))
    stored["spec"]["pool"]["generation"] = 2
    connection = dropping(api)
    written = api.call("PUT", fleet.slice_path("bench-client-put"), stored)
    assert connection.dropped
    assert written["spec"]["pool"]["generation"] == 2
    assert written["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
    api.call("DELETE", fleet.slice_path("bench-client-put"))


def test_a_conflict_on_the_first_attempt_is_still_an_error(cluster: Cluster) -> None:
    api = fleet.Api(cluster)
    api.call("POST", fleet.slice_path(), a_slice("bench-client-taken"))
    with pytest.raises(RuntimeError, match="409"):
        api.call("POST", fleet.slice_path(), a_slice("bench-client-taken"))
    api.call("DELETE", fleet.slice_path("bench-client-taken"))
