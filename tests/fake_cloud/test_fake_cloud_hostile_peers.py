"""The fake cloud against peers that attack it, over a real socket: tokens that a lossy encoding would
confuse, a push held across a reset, and idle TLS connections by the thousand."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

# ô is Latin-1; ✓ and 令牌 are not, so a Latin-1 encoding with "replace" turns each into one "?".
CONTROL_TOKEN = "contrôle-✓-令牌"
SYNC_TOKEN = "sync-ô-✓-令牌"


def lossy(token: str) -> bytes:
    """What the fake compared before: the token through Latin-1 with replacement."""
    return token.encode("latin-1", "replace")


def status_of(cloud: RunningFakeCloud, method: str, path: str, authorization: bytes) -> int:
    """One request on a fresh connection, its Authorization header exactly these bytes."""
    host, port = cloud.base_url.split("://")[1].rsplit(":", 1)
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n".encode()
        + b"Authorization: "
        + authorization
        + b"\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        connection: socket.socket = raw
        if cloud.base_url.startswith("https"):
            context = ssl.create_default_context(cafile=str(cloud.ca_file))
            connection = context.wrap_socket(raw, server_hostname=host)
        connection.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            piece = connection.recv(4096)
            if not piece:
                break
            answer += piece
    return int(answer.split(b" ", 2)[1])


@contextlib.contextmanager
def fake(**options: object) -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(server_version="v1.20", **options)) as cloud:  # type: ignore[arg-type]
        yield cloud


# ----- item 9: tokens compared as bytes, in constant time -----


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_control_token_is_compared_as_bytes_never_through_a_lossy_encoding(tls: bool) -> None:
    with fake(token="t", control_token=CONTROL_TOKEN, tls=tls) as cloud:
        exact = status_of(cloud, "GET", "/_fake/journal", b"Bearer " + CONTROL_TOKEN.encode())
        question_marks = status_of(cloud, "GET", "/_fake/journal", b"Bearer " + lossy(CONTROL_TOKEN))
        latin1_only = status_of(cloud, "GET", "/_fake/journal", b"Bearer contr\xf4le-?-??")

    assert (exact, question_marks, latin1_only) == (200, 401, 401)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_sync_token_is_compared_as_bytes_never_through_a_lossy_encoding(tls: bool) -> None:
    pull = "/sync/mutations/pull?since_seq=0"
    with fake(token=SYNC_TOKEN, tls=tls) as cloud:
        exact = status_of(cloud, "GET", pull, b"Bearer " + SYNC_TOKEN.encode())
        question_marks = status_of(cloud, "GET", pull, b"Bearer " + lossy(SYNC_TOKEN))
        mojibake = status_of(cloud, "GET", pull, b"Bearer " + SYNC_TOKEN.encode().decode("latin-1").encode())
        ascii_token_sent_as_non_ascii = status_of(cloud, "GET", pull, b"Bearer sync-\xc3\xb4")

    assert (exact, question_marks, mojibake, ascii_token_sent_as_non_ascii) == (200, 401, 401, 401)


def test_an_ascii_token_still_works(tmp_path: Path) -> None:
    with fake(token="plain", control_token="control") as cloud:
        assert status_of(cloud, "GET", "/sync/mutations/pull?since_seq=0", b"Bearer plain") == 200
        assert status_of(cloud, "GET", "/_fake/journal", b"Bearer control") == 200
        assert status_of(cloud, "GET", "/_fake/journal", b"Bearer contro") == 401


# ----- item 12: a request that began before a reset never appears after it -----

ROW = {
    "project": "alpha",
    "entity": "session",
    "entity_key": "held",
    "op": "upsert",
    "payload": {"id": "held", "directory": "/tmp"},
}


def scheduled_faults(cloud: RunningFakeCloud) -> list[Any]:
    faults: list[Any] = httpx.get(f"{cloud.base_url}/_fake/faults", trust_env=False).json()["faults"]
    return faults


@pytest.mark.parametrize("route", ["mutations_push", "chunk_push"])
def test_a_push_held_by_a_latency_fault_across_a_reset_never_appears_after_it(route: str) -> None:
    chunk = {
        "chunk_id": "0123abcd",
        "created_by": "laptop",
        "project": "alpha",
        "data": {"sessions": [{"id": "held", "project": "alpha", "directory": "/tmp"}]},
    }
    body = {"entries": [ROW]} if route == "mutations_push" else chunk
    path = "/sync/mutations/push" if route == "mutations_push" else "/sync/push"
    answers: list[object] = []
    with fake(token="t") as cloud:
        cloud.client.add_faults([{"route": route, "action": "latency", "latency_ms": 3000}])

        def post() -> None:
            try:
                answers.append(
                    httpx.post(
                        cloud.base_url + path,
                        json=body,
                        headers={"Authorization": "Bearer t"},
                        trust_env=False,
                        timeout=10,
                    ).status_code
                )
            except httpx.HTTPError as error:
                answers.append(type(error).__name__)

        pusher = threading.Thread(target=post)
        pusher.start()
        deadline = time.monotonic() + 5
        while scheduled_faults(cloud) and time.monotonic() < deadline:  # taken: the push is in its latency
            time.sleep(0.02)
        assert not scheduled_faults(cloud)
        cloud.client.reset()
        pusher.join(timeout=10)
        assert not pusher.is_alive()
        time.sleep(0.2)

        pulled = httpx.get(
            f"{cloud.base_url}/sync/mutations/pull?since_seq=0",
            headers={"Authorization": "Bearer t"},
            trust_env=False,
        ).json()
        manifest = httpx.get(
            f"{cloud.base_url}/sync/pull?project=alpha",
            headers={"Authorization": "Bearer t"},
            trust_env=False,
        ).json()
        received = cloud.client.received()
        journal = [entry for entry in cloud.client.journal().entries if entry.method == "POST"]

    assert (pulled["mutations"], manifest.get("chunks") or [], received, journal) == ([], [], [], [])
    assert answers == ["ReadError"]  # the connection is reset without an answer


# ----- item 10: concurrent connections are capped, and refused cleanly past the cap -----

CAP = 8


def idle_connection(cloud: RunningFakeCloud) -> socket.socket:
    """A connection that finished its TLS handshake (on https) and then sends nothing."""
    host, port = cloud.base_url.split("://")[1].rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    if not cloud.base_url.startswith("https"):
        return raw
    context = ssl.create_default_context(cafile=str(cloud.ca_file))
    try:
        return context.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def answer_of(connection: socket.socket) -> bytes:
    received = b""
    while True:
        try:
            piece = connection.recv(4096)
        except (ssl.SSLError, OSError):
            break
        if not piece:
            break
        received += piece
    return received


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_connections_past_the_cap_are_refused_at_once_and_a_freed_slot_is_reused(tls: bool) -> None:
    with fake(token="t", tls=tls, max_connections=CAP) as cloud, contextlib.ExitStack() as stack:
        held = [stack.enter_context(idle_connection(cloud)) for _ in range(CAP)]
        time.sleep(0.3)  # the server has taken each of them in

        if tls:
            started = time.monotonic()
            with pytest.raises((ssl.SSLError, OSError)):
                idle_connection(cloud).close()
            assert time.monotonic() - started < 2  # refused before any handshake, not timed out
        else:
            with idle_connection(cloud) as refused:
                refused.sendall(b"GET /health HTTP/1.1\r\nHost: f\r\n\r\n")
                answer = answer_of(refused)
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert answer.endswith(b"\r\n\r\nfake cloud: too many connections (cap 8)\n"), answer

        held.pop().close()
        time.sleep(0.3)
        verify: Any = str(cloud.ca_file) if tls else False
        assert httpx.get(f"{cloud.base_url}/health", verify=verify, trust_env=False).status_code == 200


# ----- issue 35, item 16: a connection that never sends a request is held by the header timeout -----

SILENT_CAP = 8
HEADER_SECONDS = 0.5


def silent_connections(cloud: RunningFakeCloud, count: int, stack: contextlib.ExitStack) -> None:
    host, port = cloud.base_url.split("://")[1].rsplit(":", 1)
    for _ in range(count):
        stack.enter_context(socket.create_connection((host, int(port)), timeout=10))


def health(cloud: RunningFakeCloud) -> int:
    return httpx.get(f"{cloud.base_url}/health", timeout=5, trust_env=False).status_code


def test_silent_connections_at_the_cap_are_closed_by_the_header_timeout_not_the_idle_timeout() -> None:
    options: dict[str, Any] = {"max_connections": SILENT_CAP, "header_timeout": HEADER_SECONDS}
    with fake(token="t", idle_timeout=60.0, **options) as cloud, contextlib.ExitStack() as stack:
        silent_connections(cloud, SILENT_CAP, stack)
        time.sleep(0.2)
        assert health(cloud) == 503  # the cap is full of connections that said nothing
        time.sleep(HEADER_SECONDS + 0.5)
        assert health(cloud) == 200  # they were closed after the header timeout, not after 60 s


def test_a_kept_alive_connection_still_waits_the_idle_timeout_for_its_next_request() -> None:
    with fake(token="t", idle_timeout=60.0, header_timeout=HEADER_SECONDS) as cloud:
        host, port = cloud.base_url.split("://")[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            for _ in range(2):
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: f\r\n\r\n")
                answer = b""
                while not answer.endswith(b"}\n"):
                    piece = sock.recv(4096)
                    assert piece, "the fake closed a kept-alive connection before its idle timeout"
                    answer += piece
                assert answer.startswith(b"HTTP/1.1 200 ")
                time.sleep(HEADER_SECONDS + 0.5)
