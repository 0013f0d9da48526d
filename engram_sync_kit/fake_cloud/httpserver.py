"""A small HTTP/1.1 server on asyncio and h11.

Why not aiohttp: the fake must go from process start to ready in under 150 ms, and importing aiohttp
alone costs about that whole budget, while asyncio plus h11 (already installed as httpx's parser) costs a
fifth of it. The server keeps connections alive, caps how much of a body it keeps, and can reset a
connection on purpose. What h11 cannot parse (a bad request line or Content-Length, headers past Go's
1 MiB, a body cut short) gets Go's plain "400 Bad Request" or "431 ..." and a closed connection; the
handler only ever sees complete requests.

Every request is answered and no connection is held forever: ``screen`` answers from the head alone
(routing, auth, a declared size over the cap) before any of the body is read; a head must arrive within
``header_timeout`` (a new connection's first request too), each piece of a body within ``body_timeout``,
and a keep-alive connection idle after a request is closed after ``idle_timeout``. An exception anywhere goes to ``on_error`` (the app records it at
/_fake/errors) and the client gets a 500, never silence or a traceback on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import hmac
import re
import socket
import ssl
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

import h11

READ_SIZE = 65536
MAX_GO_CONTENT_LENGTH = (1 << 63) - 1  # Go parses Content-Length as a signed 64-bit integer
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 30.0
# engram's client (an http.Client on Go's DefaultTransport) drops its idle connections after 90 s and v1.20's
# server never does; closing sooner would race a push sent after a 60 s backoff into a spurious failure.
IDLE_TIMEOUT = 120.0
MAX_HEADER_BYTES = (1 << 20) + 4096  # Go's http.DefaultMaxHeaderBytes plus the slack its reader allows
MAX_CHUNK_LINE = 4096  # Go's maxLineLength for a chunk's size line (its bufio buffer, too)
LINGER_SECONDS = 0.5  # Go's rstAvoidanceDelay
# Connections need no token, so their number is capped: past it a connection is refused at once (plain
# http: a 503 and close; TLS: closed before the handshake), never queued. Go's server has no cap.
MAX_CONNECTIONS = 1024
TRICKLE_PIECE = 64  # a slow answer's body goes out this many bytes at a time
# asyncio reads TLS through a 256 KiB buffer per connection (sslproto.SSLProtocol.max_size), 280 KB an
# idle connection in all. A TLS record holds at most 16 KiB of plaintext, so 16 KiB loses no read.
TLS_READ_SIZE = 16 * 1024
# After this many connections close, memory freed by them is handed back to the system (malloc_trim).
TRIM_AFTER_CLOSED = 256
TRIM_DELAY_SECONDS = 1.0
# No route of the fake reads the body of these, nor does the real server's: never wait for one.
BODILESS_METHODS = frozenset({"GET", "HEAD", "DELETE"})
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_LISTED_LENGTH = re.compile(rb"(?i)\ncontent-length[ \t]*:[^\r\n]*,")


@dataclass
class Request:
    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    body_too_large: bool
    body_error: str | None = None  # why the body could not be read whole, in Go's words
    raw_path: str = ""  # the path as sent, still escaped (Go's ServeMux routes on it)


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)
    truncate_at: int | None = None  # send this much of the body, then close: a truncated answer
    trickle_seconds: float = 0.0  # spread the body over this long: a slow answer


@dataclass
class RequestHead:
    """What is known before the body: enough to route, authenticate and size-check a request."""

    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    content_length: int | None  # None when chunked
    raw_path: str = ""  # the path as sent, still escaped (Go's ServeMux routes on it)
    raw_query: str = ""


class Drop:
    """Answer nothing and reset the connection (the client sees a transport error)."""


DROP = Drop()
Handler = Callable[[Request], Awaitable[Response | Drop]]
Screen = Callable[[RequestHead], Awaitable[Response | None]]
ErrorSink = Callable[[str, BaseException], None]


class BadTarget(ValueError):
    """A request target that is not origin-form or absolute-form: Go answers 400 Bad Request."""


class _TimedOut(Exception):
    """The peer did not send what it owed in time."""


class _BadChunkLine(Exception):
    """A chunk line Go's chunked reader refuses; the message is Go's error, which the handler reports."""


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
    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int,
        screen: Screen | None = None,
        body_limit: Callable[[RequestHead], int] | None = None,
        on_error: ErrorSink | None = None,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handler = handler
        self.screen = screen
        self.body_limit = body_limit or (lambda head: self.max_body)
        self.on_error = on_error or (lambda where, error: warn(f"{where}: {type(error).__name__}: {error}"))
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()
        self.max_connections = max_connections
        self.refused_connections = 0
        self.ssl_context: ssl.SSLContext | None = None
        self._closed_since_trim = 0
        self._trim: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> tuple[str, int]:
        """Listen on exactly one socket (one address, one port) and return the address and port bound."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        # TLS starts per connection (_start_tls), after the connection cap is checked.
        self.ssl_context = ssl_context
        _malloc_trim()  # found once at start, so that its cost is part of the idle server's memory
        self.server = await asyncio.start_server(self._on_connection, sock=sock, backlog=512)
        bound = self.server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def stop(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
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
        if len(self.connections) >= self.max_connections:
            self.refused_connections += 1
            await self._refuse(reader, writer)
            return
        self.connections.add(task)
        try:
            if self.ssl_context is not None:
                await self._start_tls(writer, self.ssl_context)
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError, _TimedOut):  # the peer went away
            pass
        except asyncio.CancelledError:
            # Only stop() cancels these tasks; asyncio's stream callback must not see the cancellation.
            writer.transport.abort()
        except Exception as error:  # a bug in the server itself: recorded, and the connection closed
            self.on_error("connection", error)
            writer.transport.abort()
        finally:
            self.connections.discard(task)
            if not writer.transport.is_closing():
                writer.close()
            self._closed_since_trim += 1
            burst_over = not self.connections and self._closed_since_trim >= TRIM_AFTER_CLOSED // 4
            if self._trim is None and (self._closed_since_trim >= TRIM_AFTER_CLOSED or burst_over):
                # once a burst of closes has passed (or its tail, when none is left), at most once a second
                self._trim = asyncio.get_running_loop().call_later(TRIM_DELAY_SECONDS, self._release)

    def _release(self) -> None:
        self._trim, self._closed_since_trim = None, 0
        gc.collect()  # a closed connection's transports and tasks hold cycles: free them first
        release_freed_memory()

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Past the cap: plain http gets a 503 naming it; TLS is closed before any handshake."""
        try:
            if self.ssl_context is None:
                body = f"fake cloud: too many connections (cap {self.max_connections})\n".encode()
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
                await _linger(reader, writer)
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.transport.abort() if self.ssl_context is not None else writer.close()

    async def _start_tls(self, writer: asyncio.StreamWriter, context: ssl.SSLContext) -> None:
        # A TLS handshake is bounded like a request head, as Go bounds it (asyncio's default is 60 s).
        await writer.start_tls(context, ssl_handshake_timeout=self.header_timeout)
        _shrink_tls_read_buffer(writer.transport)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        loop = asyncio.get_running_loop()
        # Bytes received on this connection: with what h11 still holds, it gives a head's exact size on
        # the wire however the bytes were split across reads.
        received = 0
        # The bytes of the head being read, as sent: h11 rewrites a Content-Length of "N, N" to "N".
        head_pieces: list[bytes] | None = None

        def consumed() -> int:
            return received - _buffered(conn)

        async def receive(deadline: float) -> None:
            nonlocal received
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _TimedOut
            try:
                async with asyncio.timeout(remaining):
                    data = await reader.read(READ_SIZE)
            except TimeoutError:
                raise _TimedOut from None
            received += len(data)
            if head_pieces is not None:
                head_pieces.append(data)
            conn.receive_data(data)

        async def next_event(deadline: float, chunked: bool = False) -> h11.Event | type[h11.PAUSED]:
            while True:
                if chunked:
                    _check_chunk_line(conn)  # before h11 parses it, on the same bytes however they came
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    await receive(deadline)
                    continue
                return event  # type: ignore[return-value]

        async def plain(status: int, *, text: str | None = None) -> None:
            """Go's answer to a request it cannot serve: "<status> <reason>" and a closed connection."""
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                body = (text if text is not None else f"{status} {HTTPStatus(status).phrase}").encode()
                closing = Response(status, body, "text/plain; charset=utf-8", [("connection", "close")])
                await self._send(conn, writer, closing)
            await _linger(reader, writer)

        # A new connection owes its first request within header_timeout: connections are capped, so a
        # silent one held for idle_timeout would let a thousand of them lock every client out for that long.
        wait_for_request = self.header_timeout
        while True:
            request_start = consumed()
            head_done = False
            head_pieces = [conn.trailing_data[0]] if _buffered(conn) else []
            try:
                # A keep-alive connection that has served a request may then wait idle_timeout for the
                # next; once a request has started, its whole head must arrive within header_timeout.
                if not _buffered(conn):
                    try:
                        await receive(loop.time() + wait_for_request)
                    except _TimedOut:
                        return
                wait_for_request = self.idle_timeout
                event = await next_event(loop.time() + self.header_timeout)
                if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
                if not isinstance(event, h11.Request):
                    return
                head_done = True
                if consumed() - request_start > MAX_HEADER_BYTES:
                    # h11 checks its limit only on an incomplete head; a head that completes within
                    # one read slips past it, and Go counts the whole head, as sent, either way.
                    await plain(431)
                    return
                if event.http_version[:1] != b"1" and (event.method, event.target) != (b"PRI", b"*"):
                    # Go's server speaks HTTP/1.x here (an h2 preface goes on to the "*" rule below).
                    await plain(505, text="505 HTTP Version Not Supported: unsupported protocol version")
                    return
                if event.target == b"*":
                    # Go's own answers for "*": OPTIONS gets an empty 200, anything else an empty 400.
                    await plain(200 if event.method == b"OPTIONS" else 400, text="")
                    return
                try:
                    head = _head(event)
                except BadTarget:
                    await plain(400)
                    return
                if head.content_length is not None and head.content_length > MAX_GO_CONTENT_LENGTH:
                    await plain(400)
                    return
                raw_head, head_pieces = b"".join(head_pieces or ()), None
                if _LISTED_LENGTH.search(raw_head, 0, raw_head.find(b"\r\n\r\n") + 1 or len(raw_head)):
                    # h11 takes "N, N" as one length; Go's server refuses any list in Content-Length.
                    await plain(400)
                    return
                early = await self.screen(head) if self.screen is not None else None
                if early is not None:
                    early.headers.append(("connection", "close"))
                    await self._send(conn, writer, early, head=head.method == "HEAD")
                    await _linger(reader, writer)
                    return
                chunked = "transfer-encoding" in head.headers
                if head.method in BODILESS_METHODS and (head.content_length or chunked):
                    # Answered without its body, as Go's handlers do; the connection then closes.
                    await self._answer(conn, reader, writer, _request(head, b"", False))
                    return
                if conn.they_are_waiting_for_100_continue and (head.content_length or chunked):
                    # Go's server invites the body once the handler reads it; a client may wait for that.
                    writer.write(
                        conn.send(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
                        or b""
                    )
                    await writer.drain()
                chunks: list[bytes] = []
                size = 0
                too_large = False
                body_error: str | None = None
                limit = min(self.body_limit(head), self.max_body)
                while True:
                    try:
                        part = await next_event(loop.time() + self.body_timeout, chunked)
                    except _BadChunkLine as bad:
                        body_error = str(bad)  # the body ends here; the handler says why, in Go's words
                        break
                    if isinstance(part, h11.Data):
                        size += len(part.data)
                        if size > limit:
                            too_large = True  # stop reading: the answer is 413 whatever follows
                            break
                        chunks.append(part.data)  # joined into bytes once, below
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
            except h11.RemoteProtocolError as error:
                # Go's wording for a request it cannot parse, e.g. "431 Request Header Fields Too Large";
                # a head over Go's limit is 431 whatever else is wrong with it, as when it comes in pieces.
                oversize = not head_done and consumed() - request_start > MAX_HEADER_BYTES
                if oversize:
                    await plain(431)
                elif error.error_status_hint == 501:  # a Transfer-Encoding other than chunked
                    await plain(501, text="Unsupported transfer encoding")
                else:
                    await plain(error.error_status_hint)
                return
            except _TimedOut:
                if conn.their_state is not h11.IDLE or conn.trailing_data[0]:
                    await plain(408)
                return
            request = _request(head, b"".join(chunks), too_large)
            request.body_error = body_error
            if not await self._answer(conn, reader, writer, request):
                return
            conn.start_next_cycle()

    async def _answer(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Request,
    ) -> bool:
        """Call the handler and send its answer; False when the connection is done with."""
        result = await self.handler(request)
        if isinstance(result, Drop):
            _reset(writer)
            return False
        if conn.their_state is not h11.DONE and not any(
            name.lower() == "connection" for name, _ in result.headers
        ):
            # The body was not read to its end, so this connection cannot carry another request:
            # say so, or a pooling client reuses it and meets the close.
            result = replace(result, headers=[*result.headers, ("connection", "close")])
        if result.truncate_at is not None and request.method != "HEAD":
            await self._send_truncated(conn, writer, result)
            return False
        await self._send(conn, writer, result, head=request.method == "HEAD")
        if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
            await _linger(reader, writer)
            return False
        return True

    async def _send(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response, *, head: bool = False
    ) -> None:
        headers = [
            *([("content-type", response.content_type)] if response.content_type else []),
            ("content-length", str(len(response.body))),
            ("date", time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())),
            *response.headers,
        ]
        reason = REASONS.get(response.status, b"")
        data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
        if not head and response.body and response.trickle_seconds > 0:
            writer.write(data)
            data = b""
            pieces = [
                response.body[i : i + TRICKLE_PIECE] for i in range(0, len(response.body), TRICKLE_PIECE)
            ]
            pause = response.trickle_seconds / len(pieces)
            for piece in pieces:
                await asyncio.sleep(pause)
                writer.write(conn.send(h11.Data(data=piece)) or b"")
                await writer.drain()
        elif not head and response.body:
            data += conn.send(h11.Data(data=response.body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        writer.write(data)
        await writer.drain()

    async def _send_truncated(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, response: Response
    ) -> None:
        """The head with the whole body's Content-Length, part of the body, then a close (FIN, not a reset,
        so the client reads what was sent and meets the end: Go's "unexpected EOF")."""
        headers = [
            *([("content-type", response.content_type)] if response.content_type else []),
            ("content-length", str(len(response.body))),
            *response.headers,
        ]
        reason = REASONS.get(response.status, b"")
        data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b""
        writer.write(data + response.body[: response.truncate_at])
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        writer.close()


def _buffered(conn: h11.Connection) -> int:
    """How many received bytes h11 holds unparsed (its buffer is private; trailing_data copies it)."""
    buffer = getattr(conn, "_receive_buffer", None)
    return len(buffer) if buffer is not None else len(conn.trailing_data[0])


def _check_chunk_line(conn: h11.Connection) -> None:
    """Go's chunked reader's checks on the size line h11 is about to parse (h11 keeps its reader and
    buffer private): at most 4096 bytes, CRLF only at its end, hex digits before any ';' extension,
    16 of them at most. The fake also refuses 2^63 or more, where v1.20 waits for that much data.
    Decided on the line's own bytes once it is complete (or 4096 bytes hold no end), so the answer does
    not depend on how the body was split across reads. Trailers are left to h11."""
    reader = getattr(conn, "_reader", None)
    buffer = getattr(getattr(conn, "_receive_buffer", None), "_data", None)
    if reader is None or buffer is None or getattr(reader, "_reading_trailer", True):
        return
    if getattr(reader, "_bytes_in_chunk", 1):
        return  # inside a chunk's data
    start = 0
    footer = getattr(reader, "_bytes_to_discard", b"")
    if footer:
        if not buffer.startswith(footer):
            return  # h11 refuses a missing CRLF after the data itself, or waits for it
        start = len(footer)
    end = buffer.find(b"\n", start, start + MAX_CHUNK_LINE)
    if end == -1:
        if len(buffer) - start >= MAX_CHUNK_LINE:
            raise _BadChunkLine("header line too long")
        return
    line = bytes(buffer[start : end + 1])
    carriage = line.find(b"\r")
    if carriage == -1:
        raise _BadChunkLine("chunked line ends with bare LF")
    if carriage != len(line) - 2:
        raise _BadChunkLine("invalid CR in chunked line")
    digits = line[:-2].rstrip(b" \t").split(b";", 1)[0]
    if not digits:
        raise _BadChunkLine("empty hex number for chunk length")
    if digits.strip(b"0123456789abcdefABCDEF"):
        raise _BadChunkLine("invalid byte in chunk length")
    if len(digits) > 16 or int(digits, 16) > MAX_GO_CONTENT_LENGTH:
        raise _BadChunkLine("http chunk length too large")


def _head(event: h11.Request) -> RequestHead:
    target = event.target.decode("latin-1")
    if not target.startswith("/") and not target.lower().startswith(("http://", "https://")):
        raise BadTarget(target)  # "abc": Go's server answers 400
    try:
        # An origin-form target is a path and a query; urlsplit would take "//x/..." for a host.
        parts = urlsplit(target) if not target.startswith("/") else urlsplit("http://h" + target)
    except ValueError:
        raise BadTarget(target) from None
    query = {key: values[0] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
    headers: dict[str, str] = {}
    for name, value in event.headers:
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    length = headers.get("content-length")
    return RequestHead(
        method=event.method.decode("ascii", "replace"),
        target=target,
        path=unquote(parts.path) or "/",
        query=query,
        headers=headers,
        content_length=int(length) if length is not None and "transfer-encoding" not in headers else None,
        raw_path=parts.path or "/",
        raw_query=parts.query,
    )


def wire_bytes(text: str) -> bytes:
    """A header value as it arrived: _head decodes each byte as one Latin-1 character, so this undoes
    it exactly (text that never came off the wire, with characters past U+00FF, is taken as UTF-8)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode()


def bearer_matches(header: str, token: str) -> bool:
    """Whether a header value is exactly `token` (sent as UTF-8 bytes), compared in constant time."""
    return hmac.compare_digest(wire_bytes(header), token.encode())


def _request(head: RequestHead, body: bytes, too_large: bool) -> Request:
    return Request(
        method=head.method,
        target=head.target,
        path=head.path,
        query=head.query,
        headers=head.headers,
        body=body,
        body_too_large=too_large,
        raw_path=head.raw_path,
    )


def _shrink_tls_read_buffer(transport: asyncio.BaseTransport) -> None:
    """Swap asyncio's 256 KiB TLS read buffer for a 16 KiB one (see TLS_READ_SIZE).

    asyncio offers no setting for it; this reaches into its SSL protocol (CPython 3.11-3.13 keep the
    buffer in `_ssl_buffer`, sized by `max_size`), and does nothing if that ever changes: the idle
    connection benchmark (bench/fake_cloud.py) would show it."""
    protocol = getattr(transport, "_ssl_protocol", None)
    if (
        protocol is None
        or not hasattr(protocol, "_ssl_buffer")
        or getattr(protocol, "max_size", 0) <= TLS_READ_SIZE
    ):
        return
    protocol.max_size = TLS_READ_SIZE
    protocol._ssl_buffer = bytearray(TLS_READ_SIZE)
    protocol._ssl_buffer_view = memoryview(protocol._ssl_buffer)


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc malloc_trim); elsewhere a no-op.

    Thousands of connections leave their buffers in the heap when they close, and glibc returns such
    memory only from the heap's top: without this, RSS stays at its peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        # the symbols already loaded into this process: libc is among them (no ldconfig run to find it)
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def warn(message: str) -> None:
    print(f"engram-fake-cloud: {message}", file=sys.stderr, flush=True)
