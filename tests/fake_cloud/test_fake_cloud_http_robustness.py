"""Malformed and misbehaving HTTP clients: the fake answers 4xx or drops the connection, never 500 or a trace.

Raw sockets, because an HTTP client library will not send a wrong Content-Length or stop mid-body.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
from collections.abc import Iterator

import httpx
import pytest

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "robust-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN)) as cloud:
        yield cloud


@pytest.fixture
def cloud(server: RunningFakeCloud) -> RunningFakeCloud:
    server.client.reset()
    return server


@pytest.fixture(autouse=True)
def no_trace_on_stderr(capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    yield
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "internal error" not in err


def connect(cloud: RunningFakeCloud) -> socket.socket:
    host, port = cloud.base_url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def head(path: str, *, length: int | str, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: fake\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def still_serving(cloud: RunningFakeCloud) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False) as http:
        assert http.get("/health").status_code == 200
    assert all(entry.status != 500 for entry in cloud.client.journal().entries)


@pytest.mark.parametrize(
    ("path", "body", "status", "start"),
    [
        # v3's chunk push never reads Content-Encoding: the body is JSON to it (cloudserver.go @d4397781)
        ("/sync/push", b"<not gzip at all", 400, "invalid push payload: invalid character '<' looking for "),
        # A cut gzip stream (found by its magic bytes) ends early: Go's gzip reader says unexpected EOF.
        (
            "/sync/push",
            gzip.compress(b'{"project": "p", "data": {}}', mtime=0)[:12],
            400,
            "invalid push payload: decode compressed payload: unexpected EOF",
        ),
        ("/sync/mutations/push", b"\x1f\x8b\x08garbage", 400, "invalid request body: gzip body: "),
    ],
)
def test_bad_gzip_is_400_with_the_reason(
    cloud: RunningFakeCloud, path: str, body: bytes, status: int, start: str
) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False) as http:
        response = http.post(path, content=body, headers={**AUTH, "Content-Encoding": "gzip"})
    assert response.status_code == status
    message = response.json()["error"] if path == "/sync/push" else response.text
    assert message.startswith(start), message
    still_serving(cloud)


def test_non_utf8_body_is_400(cloud: RunningFakeCloud) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False) as http:
        response = http.post("/sync/mutations/push", content=b"\xff\xfe{", headers=AUTH)
    assert response.status_code == 400
    assert response.text.startswith("invalid request body: ")


@pytest.mark.parametrize("length", ["abc", "-5", "5, 6"])
def test_an_unparseable_content_length_is_400_bad_request(cloud: RunningFakeCloud, length: str) -> None:
    with connect(cloud) as sock:
        sock.sendall(head("/sync/mutations/push", length=length) + b"{}")
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert answer.endswith(b"\r\n\r\n400 Bad Request"), answer
    still_serving(cloud)


def test_a_content_length_shorter_than_the_body_answers_the_short_body_then_400(
    cloud: RunningFakeCloud,
) -> None:
    with connect(cloud) as sock:
        sock.sendall(head("/sync/mutations/push", length=5) + b'{"entries": []}\r\n\r\n')
        sock.shutdown(socket.SHUT_WR)
        answer = read_until_closed(sock)
    first, second = answer.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"400 Bad Request\r\n"), answer
    assert first.endswith(b"\r\n\r\ninvalid request body: unexpected EOF\n"), answer  # the 5 bytes '{"ent'
    assert second.startswith(b"400 Bad Request\r\n"), answer  # the rest is no request
    assert second.endswith(b"\r\n\r\n400 Bad Request"), answer
    still_serving(cloud)


def test_a_client_that_leaves_mid_body_gets_400_and_no_journal_entry(cloud: RunningFakeCloud) -> None:
    with connect(cloud) as sock:
        sock.sendall(head("/sync/mutations/push", length=1000) + b'{"entries": [')
        sock.shutdown(socket.SHUT_WR)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert answer.endswith(b"\r\n\r\n400 Bad Request"), answer
    still_serving(cloud)
    assert [entry.path for entry in cloud.client.journal().entries] == ["/health"]


def test_a_client_that_resets_before_reading_the_answer_does_not_disturb_the_server(
    cloud: RunningFakeCloud,
) -> None:
    body = json.dumps({"entries": []}).encode()
    for _ in range(20):
        sock = connect(cloud)
        sock.sendall(head("/sync/mutations/push", length=len(body)) + body)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # an RST, maybe before the fake has answered
    still_serving(cloud)


def test_a_slow_client_does_not_hold_up_others_and_is_answered_when_it_finishes(
    cloud: RunningFakeCloud,
) -> None:
    body = b'{"entries": []}'
    with connect(cloud) as slow:
        slow.sendall(head("/sync/mutations/push", length=len(body)) + body[:3])
        still_serving(cloud)  # another connection is served while this body is incomplete
        slow.sendall(body[3:])
        answer = slow.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b'"error_code":"empty_batch"' in answer


@pytest.mark.parametrize(
    ("header_bytes", "status_line"),
    [
        (20_000, b"HTTP/1.1 200 OK\r\n"),
        (1_100_000, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        # just past the limit: the head can complete within one read, before a parser's own size check
        ((1 << 20) + 4096 + 200, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
    ],
)
def test_headers_past_gos_1_mib_limit_are_431_not_a_crash(
    cloud: RunningFakeCloud, header_bytes: int, status_line: bytes
) -> None:
    with connect(cloud) as sock:
        sock.sendall(
            b"GET /health HTTP/1.1\r\nHost: fake\r\nConnection: close\r\nX-Big: "
            + b"a" * header_bytes
            + b"\r\n\r\n"
        )
        answer = read_until_closed(sock)
    assert answer.startswith(status_line), answer[:200]
    if header_bytes > 1_000_000:
        assert answer.endswith(b"\r\n\r\n431 Request Header Fields Too Large"), answer[-200:]
    still_serving(cloud)
