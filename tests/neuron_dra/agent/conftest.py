"""Fixtures of the agent's unit tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from neuron_dra.agent.apiclient.kube import ApiConfig, Kube
from tests.neuron_dra.agent.stressed_api import Server, handler


@pytest.fixture
def api() -> Iterator[tuple[Server, Kube]]:
    state = Server()
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{http.server_address[1]}"
    kube = Kube(ApiConfig(server=state.url))
    try:
        yield state, kube
    finally:
        kube.close()
        http.shutdown()
        http.server_close()
