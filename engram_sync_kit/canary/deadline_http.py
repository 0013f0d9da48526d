"""An httpx transport whose every socket operation ends at one absolute deadline.

httpx's timeouts are per operation: a server that sends its status line one byte a second answers
every read in time and holds the client forever. Here each connect, TLS handshake, read and write
gets at most the time left until the deadline (CPython bounds a whole TLS handshake by the socket's
timeout), and none starts after it, so one deadline bounds connect, TLS, headers, body and every
request made through the transport.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


def _left(deadline: float, timeout: float | None, expired: type[Exception]) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise expired("the deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        self._inner = httpcore.SyncBackend()
        self.deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(self.deadline, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, left, local_address, socket_options)
        return _DeadlineStream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own HTTP/1.1 transport over a connection pool whose sockets obey `deadline` (monotonic)."""

    def __init__(self, ssl_context: ssl.SSLContext, deadline: float) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        # The pool httpx builds has no way to take a network backend; this one is the same but for it.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_DeadlineBackend(deadline),
        )
