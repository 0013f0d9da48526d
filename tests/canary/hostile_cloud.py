"""A malicious cloud for reconcile: a loopback HTTP or HTTPS server whose every answer a test writes.

Each request gets its own connection (the answers say `Connection: close`); `answer(path, query)`
returns the raw bytes to send. `drip_from` > 0 sends everything from that byte offset on one byte
per `drip_seconds`, so the status line (offset 0) or the headers can be made to crawl; an answer of
one byte dripped slowly is a server that accepts and then says nothing. Every loop is bounded: a drip
gives up after `give_up_seconds`, and `close()` stops it at once and joins the threads.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import trustme

Answer = Callable[[str, dict[str, str]], bytes]
REQUEST_HEAD_LIMIT = 64 * 1024


def http_answer(status: str, body: bytes, headers: tuple[str, ...] = ()) -> bytes:
    head = [
        f"HTTP/1.1 {status}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def json_answer(document: Any) -> bytes:
    return http_answer("200 OK", json.dumps(document).encode())


def gzip_bomb(size: int) -> bytes:
    """A 200 whose gzip body inflates to `size` bytes of spaces inside a JSON list (about 1000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    block = b" " * (1 << 20)
    pieces = [packer.compress(b"[")]
    pieces += [packer.compress(block) for _ in range(size >> 20)]
    body = b"".join([*pieces, packer.compress(b"]"), packer.flush()])
    return http_answer("200 OK", body, ("Content-Encoding: gzip",))


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    head: bytes


@dataclass
class HostileCloud:
    answer: Answer
    tls: bool = False
    drip_from: int = -1  # < 0: send at once
    drip_seconds: float = 1.0
    give_up_seconds: float = (
        15.0  # a drip ends here (the connection closes): a broken client fails, not hangs
    )
    directory: Path | None = None
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.port = int(self._socket.getsockname()[1])
        self._context: ssl.SSLContext | None = None
        self.ca_file: Path | None = None
        if self.tls:
            assert self.directory is not None, "an HTTPS cloud needs a directory for its CA file"
            authority = trustme.CA()
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            authority.issue_cert("127.0.0.1").configure_cert(self._context)
            self.ca_file = self.directory / f"hostile-ca-{self.port}.pem"
            authority.cert_pem.write_to_path(str(self.ca_file))
        self._workers: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            worker = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self._workers.append(worker)
            worker.start()

    def _serve(self, raw: socket.socket) -> None:
        with contextlib.suppress(OSError), contextlib.closing(raw):
            raw.settimeout(10)
            connection = raw
            if self._context is not None:
                connection = self._context.wrap_socket(raw, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < REQUEST_HEAD_LIMIT:
                piece = connection.recv(4096)
                if not piece:
                    return
                head += piece
            method, target = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")[:2]
            parts = urlsplit(target)
            request = Request(method, parts.path, dict(parse_qsl(parts.query)), head)
            self.requests.append(request)
            answer = self.answer(request.path, request.query)
            if self.drip_from < 0:
                connection.sendall(answer)
                return
            connection.sendall(answer[: self.drip_from])
            give_up = time.monotonic() + self.give_up_seconds
            for byte in answer[self.drip_from :]:
                if self._stop.wait(self.drip_seconds) or time.monotonic() > give_up:
                    return
                connection.sendall(bytes([byte]))

    def close(self) -> None:
        self._stop.set()
        # On Linux close() alone does not wake a thread blocked in accept(); shutdown() does.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._acceptor.join(timeout=10)
        for worker in self._workers:
            worker.join(timeout=10)


@contextlib.contextmanager
def hostile(answer: Answer, **options: Any) -> Iterator[HostileCloud]:
    cloud = HostileCloud(answer, **options)
    try:
        yield cloud
    finally:
        cloud.close()


def always(answer: bytes) -> Answer:
    return lambda _path, _query: answer
