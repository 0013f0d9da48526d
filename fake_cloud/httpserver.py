"""A small HTTP/1.1 server on asyncio and h11.

Why not aiohttp: the fake must go from process start to ready in under 150 ms, and importing aiohttp
alone costs about that whole budget, while asyncio plus h11 (already installed as httpx's parser) costs a
fifth of it. The server keeps connections alive, caps how much of a body it keeps, and can reset a
connection on purpose. What h11 cannot parse (a bad request line or Content-Length, headers past Go's
1 MiB, a body cut short) gets Go's plain "400 Bad Request" or "431 ..." and a closed connection; the
handler only ever sees complete requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

import h11

READ_SIZE = 65536
MAX_HEADER_BYTES = (1 << 20) + 4096  # Go's http.DefaultMaxHeaderBytes plus the slack its reader allows
LINGER_SECONDS = 0.5  # Go's rstAvoidanceDelay
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    body_too_large: bool


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


class Drop:
    """Answer nothing and reset the connection (the client sees a transport error)."""


DROP = Drop()
Handler = Callable[[Request], Awaitable[Response | Drop]]


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # Linger 0 turns close into a TCP RST: the "connection reset by peer" the client must survive.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Like Go's closeWriteAndWait: send FIN, then read what the client is still sending for a moment,
    so that closing with unread data does not reset the connection before the client reads the answer."""
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(TimeoutError, ConnectionError, ssl.SSLError):
        async with asyncio.timeout(LINGER_SECONDS):
            while await reader.read(READ_SIZE):
                pass


class HttpServer:
    def __init__(self, handler: Handler, *, max_body: int) -> None:
        self.handler = handler
        self.max_body = max_body
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        self.server = await asyncio.start_server(
            self._on_connection, host, port, ssl=ssl_context, backlog=512
        )
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels these tasks; asyncio's stream callback must not see the cancellation.
            writer.transport.abort()
        finally:
            self.connections.discard(task)
            if not writer.transport.is_closing():
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)

        async def next_event() -> h11.Event | type[h11.PAUSED]:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(READ_SIZE))
                    continue
                return event  # type: ignore[return-value]

        while True:
            try:
                event = await next_event()
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
                if not isinstance(event, h11.Request):
                    return
                chunks: list[bytes] = []
                size = 0
                too_large = False
                while True:
                    part = await next_event()
                    if isinstance(part, h11.Data):
                        size += len(part.data)
                        if size > self.max_body:
                            too_large = True
                        elif not too_large:
                            chunks.append(part.data)  # joined into bytes once, below
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
            except h11.RemoteProtocolError as error:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    # Go's wording for a request it cannot parse, e.g. "431 Request Header Fields Too Large".
                    status = error.error_status_hint
                    text = f"{status} {HTTPStatus(status).phrase}".encode()
                    await self._send(conn, writer, Response(status, text, "text/plain; charset=utf-8"))
                    await _linger(reader, writer)
                return
            request = _request(event, b"".join(chunks), too_large)
            result = await self.handler(request)
            if isinstance(result, Drop):
                _reset(writer)
                return
            await self._send(conn, writer, result, head=request.method == "HEAD")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, *, head: bool = False
    ) -> None:
        headers = [
            ("content-type", response.content_type),
            ("content-length", str(len(response.body))),
            ("date", time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())),
            *response.headers,
        ]
        reason = REASONS.get(response.status, b"")
        data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
        if not head and response.body:
            data += conn.send(h11.Data(data=response.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()


def _request(event: h11.Request, body: bytes, too_large: bool) -> Request:
    target = event.target.decode("latin-1")
    parts = urlsplit(target)
    query = {key: values[0] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
    headers: dict[str, str] = {}
    for name, value in event.headers:
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return Request(
        method=event.method.decode("ascii", "replace"),
        target=target,
        path=unquote(parts.path),
        query=query,
        headers=headers,
        body=body,
        body_too_large=too_large,
    )


def warn(message: str) -> None:
    print(f"engram-fake-cloud: {message}", file=sys.stderr, flush=True)
