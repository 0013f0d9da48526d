"""A reviewer's attacks on the fake cloud's HTTP layer (issue 11): the same request bytes must get the same
answer however they are split across reads, and no well-formed request waits for bytes that are not
coming.

The split tests drive ``HttpServer``'s connection loop with a reader that hands out exactly the pieces
given, one per read, so each split is deterministic (no sleeps, no socket timing). Every answer is
compared with its Date header removed.
"""

from __future__ import annotations

import asyncio
import re
import resource
import socket
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from typing import Any, cast

import pytest
import test_fake_cloud_fuzz_load as route_fuzzer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_sync_kit.fake_cloud import httpserver
from engram_sync_kit.fake_cloud.httpserver import MAX_HEADER_BYTES
from engram_sync_kit.fake_cloud.process import FakeCloudProcess, command
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, Serving, start_fake_cloud

TOKEN = "review-token"
AUTH_LINE = f"Authorization: Bearer {TOKEN}\r\n".encode()
ENTRY = b'{"entries":[{"project":"p","entity":"thing","entity_key":"k","op":"upsert","payload":{}}]}'
# An upper bound only: a server that answers at once never waits for it.
BODY_TIMEOUT = 3.0


class PieceReader:
    """Hands out the given pieces, one per read; then either EOF or nothing ever again."""

    def __init__(self, pieces: list[bytes], *, then_silence: bool) -> None:
        self.pieces = deque(pieces)
        self.then_silence = then_silence

    async def read(self, limit: int) -> bytes:
        if self.pieces:
            piece = self.pieces.popleft()
            if len(piece) > limit:  # the server asked for less: hand out what it can take
                self.pieces.appendleft(piece[limit:])
                piece = piece[:limit]
            return piece
        if self.then_silence:
            await asyncio.Event().wait()  # a client that sent everything and waits for the answer
        return b""


class CapturingWriter:
    """What the server wrote, and whether it closed; the transport is the writer itself."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.transport = self

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        return None

    def get_extra_info(self, name: str) -> Any:
        return None

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def answer(pieces: list[bytes], *, then_silence: bool = True) -> bytes:
    """The fake's whole answer to these pieces, Date headers removed."""

    async def run() -> bytes:
        serving = Serving(
            FakeCloudConfig(
                token=TOKEN, header_timeout=BODY_TIMEOUT, body_timeout=BODY_TIMEOUT, idle_timeout=0.05
            ),
            None,
        )
        reader, writer = PieceReader(pieces, then_silence=then_silence), CapturingWriter()
        serve = serving.http._serve(cast(asyncio.StreamReader, reader), cast(asyncio.StreamWriter, writer))
        try:
            # Past every timeout of the server: reaching it means the connection was held forever.
            async with asyncio.timeout(BODY_TIMEOUT * 3):
                await serve
        except TimeoutError:
            return bytes(writer.data) + b"<held open>"
        assert list(serving.app.errors) == []
        return bytes(writer.data)

    return re.sub(rb"date: [^\r]*\r\n", b"", asyncio.run(run()))


def splits(data: bytes, *, tails: tuple[int, ...] = (1, 10, 100)) -> dict[str, list[bytes]]:
    """The same bytes as one piece, in 64 KiB and 4 KiB pieces, byte by byte (when short), and with the
    last few bytes apart."""
    ways = {
        "whole": [data],
        "64k": [data[i : i + 65536] for i in range(0, len(data), 65536)],
        "4k": [data[i : i + 4096] for i in range(0, len(data), 4096)],
    }
    if len(data) <= 4096:
        ways["bytes"] = [data[i : i + 1] for i in range(len(data))]
    if len(data) > 256 * 1024:
        del ways["64k"]  # a megabyte head is slow to parse; three splits show the difference
        tails = tails[:1]
    for tail in tails:
        if tail < len(data):
            ways[f"tail {tail} apart"] = [data[:-tail], data[-tail:]]
    return ways


def status(raw: bytes) -> int:
    match = re.search(rb"HTTP/1\.1 (\d{3}) ", raw)
    assert match, raw[:200]
    return int(match.group(1))


def final_status(raw: bytes) -> int:
    """The status of the last answer (after any 100 Continue)."""
    return int(re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)[-1])


def push_head(framing: bytes, extra: bytes = b"") -> bytes:
    return b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\n" + AUTH_LINE + extra + framing + b"\r\n"


def chunked(body: bytes, size_line: bytes | None = None) -> bytes:
    line = size_line if size_line is not None else b"%x" % len(body)
    return push_head(b"Transfer-Encoding: chunked\r\n") + line + b"\r\n" + body + b"\r\n0\r\n\r\n"


MAX = MAX_HEADER_BYTES
CHUNKED = b"Transfer-Encoding: chunked\r\n"
# Each case: request bytes, the one status every split must get, and words the answer must end with.
SPLIT_CASES: dict[str, tuple[bytes, int, bytes]] = {
    "a plain push": (push_head(b"Content-Length: %d\r\n" % len(ENTRY)) + ENTRY, 200, b'"request_body"}\n'),
    "a chunked push": (chunked(ENTRY), 200, b'"request_body"}\n'),
    "a chunked push with extensions and a trailer": (
        push_head(CHUNKED) + b"%x;a=b;c\r\n" % len(ENTRY) + ENTRY + b"\r\n0;z=1\r\nX-Trailer: 1\r\n\r\n",
        200,
        b'"request_body"}\n',
    ),
    # Go counts the head's bytes on the wire: padding that h11 strips from a value still counts.
    "a head over 1 MiB of header-value padding": (
        b"GET /health HTTP/1.1\r\nHost: f\r\nX: a" + b" " * (MAX + 100) + b"\r\n\r\n",
        431,
        b"431 Request Header Fields Too Large",
    ),
    "a head over 1 MiB of obs-fold": (
        b"GET /health HTTP/1.1\r\nHost: f\r\nX: a" + b"\r\n  b" * ((MAX + 100) // 5) + b"\r\n\r\n",
        431,
        b"431 Request Header Fields Too Large",
    ),
    # ...and only those: 200,000 'a:b' headers are 1,000,000 bytes on the wire, under Go's limit (a
    # size rebuilt from h11's parsed headers, as "name: value", came to 1.2 MB and answered 431).
    "a head under 1 MiB of short headers": (
        b"GET /health HTTP/1.1\r\nHost: f\r\nConnection: close\r\n" + b"a:b\r\n" * 200_000 + b"\r\n",
        200,
        b'"status":"ok"}\n',
    ),
    "a malformed head over 1 MiB": (
        b"GET /health HTTP/1.1\r\nHost: f\r\nX: a" + b" " * (MAX + 100) + b"\r\nbad header\r\n\r\n",
        431,
        b"431 Request Header Fields Too Large",
    ),
    # Chunk lines as Go's chunked reader reads them (each observed on v1.20 but the 2^63 one, where
    # v1.20 waits for the data): the handler reports the reader's error.
    "a chunk length just past 2^63": (
        push_head(CHUNKED) + b"8000000000000005\r\n" + b"x" * 10,
        400,
        b"invalid request body: http chunk length too large\n",
    ),
    "a chunk length of 17 hex digits": (
        chunked(ENTRY, b"%017x" % len(ENTRY)),
        400,
        b"invalid request body: http chunk length too large\n",
    ),
    "a chunk extension over 1 MiB": (
        chunked(ENTRY, b"%x;x=" % len(ENTRY) + b"a" * (MAX + 100)),
        400,
        b"invalid request body: header line too long\n",
    ),
    "a chunk extension of 5000 bytes": (
        chunked(ENTRY, b"%x;x=" % len(ENTRY) + b"a" * 5000),
        400,
        b"invalid request body: header line too long\n",
    ),
    "a chunk line just under 4096 bytes": (chunked(ENTRY, b"%x;x=" % len(ENTRY) + b"a" * 4080), 200, b"}\n"),
    "chunk lines that end in a bare LF": (
        push_head(CHUNKED) + b"%x\n" % len(ENTRY) + ENTRY + b"\n0\n\n",
        400,
        b"invalid request body: chunked line ends with bare LF\n",
    ),
    "a bare LF with a CRLF later": (
        push_head(CHUNKED) + b"%x\n" % len(ENTRY) + ENTRY + b"\r\n0\r\n\r\n",
        400,
        b"invalid request body: chunked line ends with bare LF\n",
    ),
    "a chunk length with a space before it": (
        chunked(ENTRY, b" %x" % len(ENTRY)),
        400,
        b"invalid request body: invalid byte in chunk length\n",
    ),
    # Trailers are not a chunk line: v1.20 answers 200 to one of 5000 bytes.
    "a trailer of 5000 bytes": (
        push_head(CHUNKED) + b"%x\r\n" % len(ENTRY) + ENTRY + b"\r\n0\r\nX: " + b"a" * 5000 + b"\r\n\r\n",
        200,
        b'"request_body"}\n',
    ),
}


@pytest.mark.parametrize("name", sorted(SPLIT_CASES))
def test_the_answer_does_not_depend_on_how_the_bytes_are_split(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After an answer that closes, the server reads what the silent client might still send for a
    # moment (Go's linger); nothing more is coming here.
    monkeypatch.setattr(httpserver, "LINGER_SECONDS", 0.01)
    data, expected, words = SPLIT_CASES[name]
    answers = {way: answer(pieces) for way, pieces in splits(data).items()}
    statuses = {way: status(raw) if raw.startswith(b"HTTP/") else raw[-40:] for way, raw in answers.items()}
    assert set(statuses.values()) == {expected}, statuses
    assert len(set(answers.values())) == 1, {way: raw[-300:] for way, raw in answers.items()}
    assert answers["whole"].endswith(words), answers["whole"][-300:]


def test_expect_100_continue_is_answered_before_the_body(server: RunningFakeCloud) -> None:
    # Go's server sends "100 Continue" when the handler reads the body; a client that waits for it
    # (as curl and Go's own client can) must not wait for the body timeout.
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT) as sock:
        sock.sendall(push_head(b"Expect: 100-continue\r\nContent-Length: %d\r\n" % len(ENTRY)))
        interim = sock.recv(4096)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(ENTRY)
        assert status(sock.recv(65536)) == 200


def test_expect_100_continue_is_not_sent_when_the_head_is_answered(server: RunningFakeCloud) -> None:
    # An unauthenticated push is answered 401 from its head: no invitation to send the body.
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT) as sock:
        sock.sendall(
            b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nExpect: 100-continue\r\n"
            b"Content-Length: 10\r\n\r\n"
        )
        assert status(sock.recv(65536)) == 401


@pytest.fixture(scope="module")
def server() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN)) as cloud:
        yield cloud


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /health HTTP/1.1\r\nHost: f\r\nContent-Length: 100\r\n\r\n",
        b"GET /sync/mutations/pull HTTP/1.1\r\nHost: f\r\n"
        + AUTH_LINE
        + b"Content-Length: 100000000\r\n\r\n",
        b"GET /_fake/journal HTTP/1.1\r\nHost: f\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"DELETE /_fake/errors HTTP/1.1\r\nHost: f\r\nContent-Length: 5\r\n\r\n",
    ],
    ids=["health", "pull", "journal-chunked", "delete-errors"],
)
def test_a_route_that_reads_no_body_answers_without_waiting_for_one(
    server: RunningFakeCloud, request_head: bytes
) -> None:
    # Go's handlers for these never read the body, so the answer comes at once; the fake waited for the
    # declared body until its 30 s body timeout and then answered 408.
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT) as sock:
        sock.sendall(request_head)
        assert status(sock.recv(65536)) == 200


def test_running_out_of_file_descriptors_is_one_line_not_a_traceback_per_accept() -> None:
    # asyncio reports each failed accept through the loop's exception handler with a traceback: hundreds
    # a second while the descriptors are gone, and with stderr a pipe nobody reads yet, the fake blocked
    # on it and answered nothing. Go logs one line and retries.
    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    server = subprocess.Popen(
        [*command(), "serve", "--token", TOKEN, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=few_descriptors,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().decode().strip()
        host, port = base_url.removeprefix("http://").rsplit(":", 1)
        crowd = [socket.create_connection((host, int(port)), timeout=10) for _ in range(60)]
        for sock in crowd:
            sock.sendall(b"GET /health HTTP/1.1\r\n")  # heads that never end: each holds a descriptor
        late = socket.create_connection((host, int(port)), timeout=10)
        late.sendall(b"GET /health HTTP/1.1\r\nHost: f\r\n\r\n")
        for sock in crowd:
            sock.close()
        assert status(late.recv(65536)) == 200  # accepted once descriptors are free again
        late.close()
    finally:
        server.terminate()
        _, err = server.communicate(timeout=10)
    text = err.decode()
    assert "Traceback" not in text
    assert "Too many open files" in text
    assert len(text.splitlines()) <= 20, text[:2000]


def test_a_fake_that_writes_much_to_stderr_is_never_blocked_by_its_pipe() -> None:
    # FakeCloudProcess kept the server's stderr in a pipe it read only after the server died: 64 KiB of
    # warnings (a repeated bug of the fake, say) and the server blocked writing the next one. Here a
    # launcher writes 200 kB to stderr before the real server starts.
    noisy = "import os, sys; sys.stderr.write('x' * 200_000 + '\\n'); sys.stderr.flush(); os.execv(sys.argv[1], sys.argv[1:])"
    launcher = [sys.executable, "-c", noisy, *command()]
    with FakeCloudProcess(["--port", "0", "--token", TOKEN], launcher=launcher, start_timeout=10) as process:
        host, port = process.base_url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: f\r\n\r\n")
            assert status(sock.recv(65536)) == 200
    assert process.stderr_text().endswith("x" * 1000 + "\n")


@pytest.fixture(scope="module", params=["v1.20", "v2"])
def older_server(request: pytest.FixtureRequest) -> Iterator[RunningFakeCloud]:
    config = FakeCloudConfig(
        token=route_fuzzer.TOKEN, max_push_bytes=256 * 1024, server_version=request.param
    )
    with start_fake_cloud(config) as cloud:
        yield cloud


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    route=st.sampled_from(route_fuzzer.EVERY_ROUTE), data=st.data(), authorized=st.sampled_from([True, False])
)
def test_the_route_fuzzer_holds_on_the_older_server_versions(
    older_server: RunningFakeCloud, route: tuple[str, str], data: st.DataObject, authorized: bool
) -> None:
    # The suite's fuzzer runs on the default server version (v3); v1.20 and v2 answer pushes their own way.
    inner = route_fuzzer.test_every_route_answers_every_body_with_a_4xx_or_better.hypothesis.inner_test  # type: ignore[attr-defined]
    inner(older_server, route, data, authorized)


@pytest.mark.parametrize("opening", [b"", bytes.fromhex("160301020001")], ids=["silent", "cut-hello"])
def test_a_tls_handshake_that_never_finishes_is_closed_within_the_header_timeout(opening: bytes) -> None:
    # asyncio's own handshake timeout is 60 s; Go bounds the handshake by the server's header timeout.
    config = FakeCloudConfig(token=TOKEN, tls=True, header_timeout=0.5)
    with start_fake_cloud(config) as cloud:
        host, port = cloud.base_url.removeprefix("https://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT) as sock:
            sock.sendall(opening)
            assert sock.recv(4096) == b""  # closed, long before the upper bound
