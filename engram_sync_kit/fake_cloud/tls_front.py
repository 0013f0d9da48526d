"""TLS in front of a plain-http server: https://127.0.0.1:PORT with a throwaway CA, bytes passed through.

engram v1.20's `engram cloud serve` speaks plain http only, and its no-auth mode refuses every project
route (403 "principal is required"), while a reader that sends a token must insist on https. Tests and
benchmarks put this in front of the real server to read it with a token over https.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path

from engram_sync_kit.fake_cloud.errors import FakeCloudError

BUFFER = 65536


class TlsFront:
    """Accepts TLS on a free loopback port and relays each connection to backend_host:backend_port."""

    def __init__(self, backend_host: str, backend_port: int, ca_out: Path) -> None:
        from engram_sync_kit.fake_cloud.tls import server_context  # trustme only when a TLS front runs

        self.backend = (backend_host, backend_port)
        self.ca_file = ca_out
        self._context = server_context("127.0.0.1", ca_out)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tls-front", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            secure = self._context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            client.close()
            return
        try:
            upstream = socket.create_connection(self.backend, timeout=30)
        except OSError:
            secure.close()
            return
        upstream.settimeout(None)
        # A relay forwards what it gets at once; Nagle plus delayed ACKs would hold each answer ~40 ms.
        for side in (secure, upstream):
            side.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_pump, args=(upstream, secure), daemon=True)
        back.start()
        _pump(secure, upstream)
        back.join(timeout=30)

    def close(self) -> None:
        self._closed.set()
        # On Linux close() alone does not wake the thread blocked in accept(); shutdown() does.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)

    def __enter__(self) -> TlsFront:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(BUFFER)
            if not data:
                break
            target.sendall(data)
    except (OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            source.close()


def tls_front(base_url: str, ca_out: Path) -> TlsFront:
    """A TlsFront for an http://HOST:PORT base URL."""
    if not base_url.startswith("http://"):
        raise FakeCloudError(f"tls_front needs a plain http URL, got {base_url!r}")
    host, _, port = base_url.removeprefix("http://").rstrip("/").rpartition(":")
    return TlsFront(host, int(port), ca_out)
