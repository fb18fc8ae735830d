"""Keep-alive connections to the API server, a bounded pool of them.

TLS verifies the server as the kubeconfig's `tls-server-name` where one is set, and
a certificate authority rotated in place is read again for the next connection.
"""

from __future__ import annotations

import http.client
import logging
import select
import ssl
import threading
from pathlib import Path
from urllib.parse import urlsplit

from neuron_dra.agent.apiclient import config as apiconfig
from neuron_dra.agent.apiclient.config import ApiConfig
from neuron_dra.agent.apiclient.errors import ApiError
from neuron_dra.agent.files.filestamp import stamp

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0  # a whole call, answer included (see `deadline`)


class Pool:
    """Keep-alive connections to one server, at most `size` of them open at once.

    A caller beyond the bound waits (in its worker thread) for a connection to come
    back, up to the request timeout.
    """

    def __init__(self, config: ApiConfig, size: int) -> None:
        url = urlsplit(config.server)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port
        self._config = config
        self._context = config.ssl_context()
        # A CA bundle rotated in place (a projected service-account ca.crt, a
        # kubeconfig's file) is read again for the next connection: before, every call
        # failed until the agent restarted, its liveness green meanwhile.
        self._ca_file = Path(config.ca_file) if config.ca_file else None
        self._ca_stamp = stamp(self._ca_file) if self._ca_file else None
        self._server_name = config.tls_server_name
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []
        self._closed = False

    def new_connection(self) -> http.client.HTTPConnection:
        if self._https and self._ca_file is not None:
            found = stamp(self._ca_file)
            if found is not None and found != self._ca_stamp:
                try:
                    context = self._config.ssl_context()
                except apiconfig.ConfigError as err:
                    log.warning("certificate authority changed but not usable: %s", err)
                else:
                    log.info("certificate authority %s changed: using it", self._ca_file)
                    self._context, self._ca_stamp = context, found
        if self._https:
            return TLSConnection(
                self._host,
                self._port,
                timeout=REQUEST_TIMEOUT_S,
                context=self._context,
                server_name=self._server_name,
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=REQUEST_TIMEOUT_S)

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before; give it back with give_back."""
        if not self._slots.acquire(timeout=REQUEST_TIMEOUT_S):
            raise ApiError(0, "API client: no free connection")
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if still_open(conn):
                    return conn, True
                conn.close()
        return self.new_connection(), False

    def give_back(self, conn: http.client.HTTPConnection | None) -> None:
        """Return a connection for reuse; None when it was closed after a failure."""
        if conn is not None:
            with self._lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)
        self._slots.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class TLSConnection(http.client.HTTPSConnection):
    """HTTPS that verifies the server as `server_name` when the kubeconfig sets one."""

    def __init__(
        self,
        host: str,
        port: int | None,
        *,
        timeout: float,
        context: ssl.SSLContext | None,
        server_name: str | None,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls = context or ssl.create_default_context()
        self._server_name = server_name

    def connect(self) -> None:
        if self._server_name is None:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_name)


def still_open(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection can carry a request: readable now means the server closed it."""
    sock = conn.sock
    if sock is None:
        return True  # closed by http.client after a `Connection: close`; it reconnects
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return not poll.poll(0)
