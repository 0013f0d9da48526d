"""The fake cloud as an attacker sees it (issue 11): raw sockets, values that parse but break later, auth
tricks, control-API abuse and resets under load. Every request is answered, with a 4xx (or the real
server's own 500 for a payload it cannot materialize); nothing hangs; the fake records no internal
error; and it still serves afterwards.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_sync_kit.fake_cloud import protocol
from engram_sync_kit.fake_cloud.client import FakeCloudClient, FakeCloudInternalError
from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, Route
from engram_sync_kit.fake_cloud.process import FakeCloudProcess, command
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "adversary-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_PUSH = 64 * 1024


@pytest.fixture(scope="module")
def server() -> Iterator[RunningFakeCloud]:
    # The idle timeout stays above httpx's 5 s keep-alive expiry: shorter, a pooled connection can be
    # closed by the fake just as the client reuses it (test_an_idle_connection... has its own fake).
    config = FakeCloudConfig(token=TOKEN, max_push_bytes=MAX_PUSH, header_timeout=1.0, body_timeout=1.0)
    with start_fake_cloud(config) as cloud:
        yield cloud


@pytest.fixture
def cloud(server: RunningFakeCloud) -> Iterator[RunningFakeCloud]:
    server.client.reset()
    yield server
    healthy(server)


def healthy(cloud: RunningFakeCloud) -> None:
    """Still serving every read route with JSON, and no bug of its own recorded."""
    with httpx.Client(base_url=cloud.base_url, trust_env=False, timeout=10, headers=AUTH) as http:
        assert http.get("/health").status_code == 200
        for path in ("/sync/mutations/pull", "/sync/pull?project=p", "/_fake/journal", "/_fake/received"):
            response = http.get(path)
            assert response.status_code == 200, (path, response.text)
            json.loads(response.text)  # strict: NaN or Infinity would not parse
        assert http.post("/_fake/wait", json={"count": 1, "timeout": 0}).status_code in (200, 408)
    cloud.client.check()


def connect(cloud: RunningFakeCloud) -> socket.socket:
    host, port = cloud.base_url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def exchange(cloud: RunningFakeCloud, data: bytes, *, half_close: bool = False) -> tuple[bytes, float]:
    """Send raw bytes; return everything the server sent until it closed, and how long that took."""
    started = time.monotonic()
    with connect(cloud) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer, time.monotonic() - started


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


# ----- raw-socket protocol suite -----


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET * HTTP/1.1\r\nHost: f\r\n\r\n", 400),
        (b"GET abc HTTP/1.1\r\nHost: f\r\n\r\n", 400),
        (b"GET http://[::1/x HTTP/1.1\r\nHost: f\r\n\r\n", 400),
        (b"GET /%zz%ff HTTP/1.1\r\nHost: f\r\n\r\n", 404),
        (b"GET //health HTTP/1.1\r\nHost: f\r\n\r\n", 307),  # Go's ServeMux: to the clean path
        (
            b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nContent-Length: 18446744073709551615\r\n\r\n",
            400,
        ),
        (
            b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nContent-Length: 9223372036854775808\r\n\r\n",
            400,
        ),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: f\r\nX: " + b"a" * (1 << 21) + b"\r\n\r\n", 431),
    ],
    ids=[
        "star",
        "relative",
        "bad-ipv6",
        "bad-escapes",
        "double-slash",
        "cl-2^64",
        "cl-2^63",
        "garbage",
        "huge",
    ],
)
def test_malformed_requests_get_a_4xx_and_a_closed_connection(
    cloud: RunningFakeCloud, request_bytes: bytes, status: int
) -> None:
    answer, took = exchange(cloud, request_bytes)
    assert status_of(answer) == status
    assert took < 5


def test_an_unauthenticated_push_is_refused_before_its_body_is_read(cloud: RunningFakeCloud) -> None:
    # 8 MiB announced, none of it sent: the 401 must come at once, from the head alone.
    head = b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nContent-Length: 8388608\r\n\r\n"
    answer, took = exchange(cloud, head)
    assert status_of(answer) == 401
    assert answer.endswith(b"unauthorized: missing authorization header\n")
    assert took < 2  # not the body timeout
    [entry] = cloud.client.journal().entries
    assert (entry.status, entry.entity) == (401, None)


def test_an_announced_oversize_push_gets_413_before_its_body(cloud: RunningFakeCloud) -> None:
    head = (
        f"POST /sync/push HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Length: {MAX_PUSH + 1}\r\n\r\n"
    ).encode()
    answer, took = exchange(cloud, head)
    assert status_of(answer) == 413
    assert b"upgrade_repairable_payload_too_large" in answer
    assert took < 2


@pytest.mark.parametrize(
    ("size", "status", "says"),
    [
        ("ffffffffffffffff", 400, b"invalid request body: http chunk length too large\n"),  # Go's words
        ("20000", 413, b"push payload too large"),
    ],
)
def test_a_chunk_size_beyond_the_cap_is_answered_not_awaited(
    cloud: RunningFakeCloud, size: str, status: int, says: bytes
) -> None:
    head = (
        f"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Transfer-Encoding: chunked\r\n\r\n{size}\r\n"
    ).encode()
    answer, took = exchange(cloud, head + b"x" * (MAX_PUSH + 10))
    assert status_of(answer) == status
    assert says in answer
    assert took < 5


@pytest.mark.parametrize(
    "data",
    [
        b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\n",  # a head that never ends
        (
            f"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 100\r\n\r\n{"
        ).encode(),  # a body that never comes
    ],
    ids=["slow-head", "slow-body"],
)
def test_a_slow_client_gets_408_within_the_timeout(cloud: RunningFakeCloud, data: bytes) -> None:
    answer, took = exchange(cloud, data)
    assert status_of(answer) == 408
    assert 0.5 < took < 4


def test_an_idle_connection_is_closed_quietly() -> None:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, idle_timeout=2.0)) as idle_cloud:
        answer, took = exchange(idle_cloud, b"GET /health HTTP/1.1\r\nHost: f\r\n\r\n")
    assert status_of(answer) == 200
    assert answer.endswith(b'"status":"ok"}\n')  # the answer, then a close with nothing more
    assert 1.5 < took < 5


def test_a_connection_that_sends_nothing_is_closed_quietly_after_the_header_timeout() -> None:
    config = FakeCloudConfig(token=TOKEN, header_timeout=1.0, idle_timeout=60.0)
    with start_fake_cloud(config) as silent_cloud:
        answer, took = exchange(silent_cloud, b"")
    assert answer == b""
    assert 0.5 < took < 4


def test_a_client_that_vanishes_mid_body_leaves_no_trace(
    cloud: RunningFakeCloud, capfd: pytest.CaptureFixture[str]
) -> None:
    head = (
        f"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Length: 5000\r\n\r\n"
    ).encode()
    for _ in range(20):
        with connect(cloud) as sock:
            sock.sendall(head + b'{"entries": [')
        with connect(cloud) as sock:  # and one that resets instead of closing
            sock.sendall(head + b'{"entries": [')
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.3)
    healthy(cloud)
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "internal error" not in err


# ----- values that parse but break later -----

DEEP = "[" * 250 + "]" * 250
PARSE_BUT_BREAK = {
    "huge int": '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k", "op": "upsert", '
    '"payload": {"n": ' + "9" * 5000 + "}}]}",
    "1e999": '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k", "op": "upsert", '
    '"payload": {"n": 1e999}}]}',
    "NaN": '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k", "op": "upsert", '
    '"payload": {"n": NaN}}]}',
    "lone surrogate": '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k\\ud800", '
    '"op": "upsert", "payload": {"t": "\\udc00x"}}]}',
    "deep payload": '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k", "op": "upsert", '
    '"payload": ' + DEEP + "}]}",
    "deep payload as a string": '{"entries": [{"project": "p", "entity": "observation", "entity_key": "k", '
    '"op": "delete", "payload": '
    + json.dumps(json.dumps({"sync_id": "k", "x": json.loads("[" * 190 + "]" * 190)}))
    + "}]}",
}


@pytest.mark.parametrize("name", sorted(PARSE_BUT_BREAK))
def test_values_python_cannot_keep_are_refused_and_break_nothing(cloud: RunningFakeCloud, name: str) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:
        response = http.post("/sync/mutations/push", content=PARSE_BUT_BREAK[name].encode())
        assert response.status_code in (200, 400, 500), response.text
        if name == "lone surrogate":  # Postgres refuses it in the payload's json column: the real 500
            # (v3, the fake's default, names the entry instead of Postgres's text; v1.20 is observed)
            assert (response.status_code, response.text) == (
                500,
                'insert mutations: batch_index=0 entity="thing" entity_key="k\ufffd"\n',
            )
            assert http.get("/sync/mutations/pull").json()["mutations"] == []
            # Outside a payload, Go decodes a lone surrogate as U+FFFD, and so does the fake.
            clean = PARSE_BUT_BREAK[name].replace('"\\udc00x"', '"x"').encode()
            assert http.post("/sync/mutations/push", content=clean).status_code == 200
            [pulled] = http.get("/sync/mutations/pull").json()["mutations"]
            assert (pulled["entity_key"], pulled["payload"]) == ("k\ufffd", {"t": "x"})
        # The control API decodes its bodies the same way.
        control = http.post("/_fake/wait", content=PARSE_BUT_BREAK[name].encode())
        assert control.status_code in (200, 400, 408), control.text


@pytest.mark.parametrize(
    "created_at", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-13-45T99:99:99Z", "T"]
)
def test_extreme_timestamps_are_answered(cloud: RunningFakeCloud, created_at: str) -> None:
    body = {
        "project": "p",
        "client_created_at": created_at,
        "data": {"sessions": [{"id": "s", "directory": "/d"}]},
    }
    with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:
        assert http.post("/sync/push", json=body).status_code in (200, 400)
        assert http.get("/sync/pull", params={"project": "p"}).status_code == 200


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (gzip.compress(b'{"project": "p", "data": {}}', mtime=0)[:-8], "unexpected EOF"),  # no trailer
        (gzip.compress(b'{"project": "p", "data": {}}', mtime=0) + b"junk", "gzip: invalid header"),
    ],
    ids=["no-trailer", "trailing-garbage"],
)
def test_broken_gzip_is_400(cloud: RunningFakeCloud, body: bytes, reason: str) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:
        response = http.post("/sync/push", content=body, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert reason in response.json()["error"]


@pytest.mark.parametrize("status", [100, 101, 199, 204, 304])
def test_fault_statuses_that_cannot_answer_are_refused(cloud: RunningFakeCloud, status: int) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False) as http:
        response = http.post("/_fake/faults", json={"faults": [{"status": status}]})
    assert response.status_code == 400
    assert response.json()["error"].startswith("faults[0].status: ")


# ----- reset epoch -----


def push(http: httpx.Client, key: str) -> httpx.Response:
    entry = {"project": "p", "entity": "thing", "entity_key": key, "op": "upsert", "payload": {}}
    return http.post("/sync/mutations/push", json={"entries": [entry]})


def test_wait_never_returns_an_entry_from_before_a_reset(cloud: RunningFakeCloud) -> None:
    with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:

        def reset_then_push_many() -> None:
            time.sleep(0.2)
            cloud.client.reset()
            for index in range(5):  # more than were scanned before the reset
                push(http, f"new{index}")

        push(http, "old")
        worker = threading.Thread(target=reset_then_push_many)
        worker.start()
        try:
            entries = cloud.client.wait(3, timeout=10, path="/sync/mutations/push")
        finally:
            worker.join()
    assert [entry.entity_key for entry in entries] == ["new0", "new1", "new2"]


def test_request_ids_stay_unique_across_a_reset(cloud: RunningFakeCloud) -> None:
    cloud.client.add_faults([Fault(route=Route.MUTATIONS_PULL, action=FaultAction.LATENCY, latency_ms=500)])
    with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:
        slow = threading.Thread(target=lambda: http.get("/sync/mutations/pull"))
        slow.start()
        time.sleep(0.1)
        cloud.client.reset()
        push(http, "a")
        slow.join()
        push(http, "b")
    ids = [entry.request_id for entry in cloud.client.journal().entries]
    assert len(ids) == len(set(ids))
    # The slow request began before the reset: it is not in the new journal.
    assert [entry.path for entry in cloud.client.journal().entries] == ["/sync/mutations/push"] * 2


# ----- the fake's own errors -----


def test_an_internal_error_is_recorded_answered_and_raised_by_check(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any) -> Any:
        raise KeyError("planted bug")

    with start_fake_cloud(FakeCloudConfig(token=TOKEN)) as cloud:
        monkeypatch.setattr(protocol, "manifest", broken)
        with httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http:
            response = http.get("/sync/pull", params={"project": "p"})
        assert response.status_code == 500
        assert response.text == "fake cloud internal error: KeyError (see GET /_fake/errors)\n"
        [error] = cloud.client.errors()
        assert error["where"] == "GET /sync/pull"
        assert "planted bug" in error["error"]
        with pytest.raises(FakeCloudInternalError, match="bug in the fake, not an engram delivery failure"):
            cloud.client.check()
        cloud.client.check()  # check() forgets what it raised
        monkeypatch.undo()
        with (  # and leaving the block checks too
            pytest.raises(FakeCloudInternalError),
            cloud,
            httpx.Client(base_url=cloud.base_url, trust_env=False, headers=AUTH) as http,
        ):
            monkeypatch.setattr(protocol, "manifest", broken)
            http.get("/sync/pull", params={"project": "p"})
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "engram-fake-cloud: internal error on GET /sync/pull: KeyError" in err


# ----- safe exposure -----


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command(), "serve", "--token", "t", *args], capture_output=True, text=True, timeout=20, check=False
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::"])
def test_a_non_loopback_bind_needs_a_control_token(host: str) -> None:
    result = serve("--host", host)
    assert result.returncode == 3
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("engram-fake-cloud: refusing to bind ")
    assert "--control-token" in line


def test_with_a_control_token_every_control_route_needs_it() -> None:
    with FakeCloudProcess(
        ["--port", "0", "--host", "0.0.0.0", "--token", "t", "--control-token", "c"]
    ) as proc:
        assert proc.base_url.startswith("http://0.0.0.0:")  # the address actually bound
        url = proc.base_url.replace("0.0.0.0", "127.0.0.1")
        proc.base_url = url
        with httpx.Client(base_url=url, trust_env=False) as http:
            for method, path in [
                ("GET", "/_fake/ready"),
                ("GET", "/_fake/journal"),
                ("POST", "/_fake/reset"),
            ]:
                assert http.request(method, path).status_code == 401
                assert http.request(method, path, headers={"Authorization": "Bearer t"}).status_code == 401
            assert http.get("/health").status_code == 200
            # A refused control request's body is never read.
            refused = http.post("/_fake/faults", content=b"x" * 100_000)
            assert refused.status_code == 401
        with FakeCloudClient(url, control_token="c") as client:
            assert client.ready()
            client.reset()
            assert client.stats()["errors"] == 0


def test_the_first_line_is_the_url_actually_bound_for_localhost() -> None:
    with FakeCloudProcess(["--port", "0", "--host", "localhost", "--token", "t"]) as proc:
        assert proc.base_url.split("://")[1].rsplit(":", 1)[0] in ("127.0.0.1", "[::1]")
        assert httpx.get(f"{proc.base_url}/health", trust_env=False).status_code == 200


def test_python_refuses_a_non_loopback_bind_without_a_control_token() -> None:
    from engram_sync_kit.fake_cloud.errors import FakeCloudError

    with pytest.raises(FakeCloudError, match="refusing to bind '0.0.0.0' without a control token"):
        FakeCloudConfig(token="t", host="0.0.0.0").validate()


def test_the_harness_closing_its_cloud_raises_the_fakes_own_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engram_sync_kit.harness.cloud.launch import CloudHandle

    def broken(*_: Any) -> Any:
        raise KeyError("planted bug")

    handle = CloudHandle("inprocess", TOKEN, ["*"], tmp_path / "cloud.log")
    monkeypatch.setattr(protocol, "manifest", broken)
    with httpx.Client(base_url=handle.base_url, trust_env=False, headers=AUTH) as http:
        assert http.get("/sync/pull", params={"project": "p"}).status_code == 500
    with pytest.raises(FakeCloudInternalError, match="not an engram delivery failure"):
        handle.close()
    with pytest.raises(httpx.TransportError):  # and the cloud is stopped all the same
        httpx.get(f"{handle.base_url}/health", trust_env=False, timeout=2)


def test_an_idle_connection_outlives_engrams_client_pool() -> None:
    """engram's MutationTransport uses an http.Client on Go's DefaultTransport (IdleConnTimeout 90 s;
    internal/cloud/remote/transport.go at v1.20.0): the client, not the fake, must close an idle
    connection first, as with v1.20's server, which never does."""
    go_default_transport_idle_seconds = 90.0
    assert FakeCloudConfig().idle_timeout > go_default_transport_idle_seconds
