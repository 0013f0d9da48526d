"""The fake's v3 mode reads and answers chunks as v3's cloud server does (predicted from source:
internal/cloud/cloudserver/cloudserver.go @d4397781, handlePushChunk and handlePullChunk; the envelope's
rules in internal/cloud/chunkcodec/envelope.go @7a823197; engram_sync_kit/engram_contract/envelope.py)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_cloud_support import AUTH, TOKEN

from engram_sync_kit.engram_contract.envelope import accepts_envelope, names_envelope
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

ENVELOPE = "application/vnd.engram.sync+gzip; version=1"
LIMIT = 64 * 1024


@pytest.fixture(scope="module", params=["v3", "v2"])
def server(request: pytest.FixtureRequest) -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(
        FakeCloudConfig(token=TOKEN, server_version=request.param, max_push_bytes=LIMIT)
    ) as cloud:
        yield cloud


@pytest.fixture
def http(server: RunningFakeCloud) -> Iterator[httpx.Client]:
    server.client.reset()
    with httpx.Client(base_url=server.base_url, headers=AUTH, trust_env=False) as client:
        yield client


def v3(server: RunningFakeCloud) -> bool:
    return server.config.server_version == "v3"


def push_body() -> dict[str, Any]:
    return {
        "project": "p",
        "data": {
            "sessions": [
                {"id": "s1", "project": "p", "directory": "/work ü", "started_at": "2026-01-01 00:00:00"}
            ],
            "observations": [
                {
                    "sync_id": "o1",
                    "session_id": "s1",
                    "type": "manual",
                    "title": "t",
                    "content": "c ✓",
                    "project": "p",
                    "scope": "project",
                }
            ],
            "prompts": [],
        },
    }


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"])


@pytest.mark.parametrize(
    ("content_type", "reason"),
    [
        ("te@xt/plain", "parse content type: mime: expected slash after first token"),
        ("application/", "parse content type: mime: expected token after slash"),
        ("application/json; charset", "parse content type: mime: invalid media parameter"),
        ("application/vnd.engram.sync+gzip; version=2", "unsupported compressed envelope version"),
        ("application/vnd.engram.sync+gzip", "unsupported compressed envelope version"),
    ],
)
def test_a_content_type_v3_cannot_read_is_415_before_the_body(
    server: RunningFakeCloud, http: httpx.Client, content_type: str, reason: str
) -> None:
    response = http.post(
        "/sync/push", content=json.dumps(push_body()), headers={"Content-Type": content_type}
    )
    if v3(server):
        assert error_of(response) == (415, f"unsupported push payload: {reason}")
        assert response.json()["error_code"] == "upgrade_repairable_payload_invalid"
    else:
        assert response.status_code == 200  # v2's handler never reads the Content-Type
    assert server.client.received() == ([] if v3(server) else server.client.received())


def test_a_content_type_without_a_subtype_is_read_as_json(
    server: RunningFakeCloud, http: httpx.Client
) -> None:
    """Go's ParseMediaType takes a bare type ("garbage", as a Content-Disposition has): not the envelope."""
    response = http.post("/sync/push", content=json.dumps(push_body()), headers={"Content-Type": "garbage"})
    assert response.status_code == 200, response.text


def test_415_comes_before_413_on_v3(server: RunningFakeCloud, http: httpx.Client) -> None:
    response = http.post("/sync/push", content=b" " * (LIMIT + 1), headers={"Content-Type": "te@xt/plain"})
    assert response.status_code == (415 if v3(server) else 413)


def test_v3_reads_the_envelope_by_its_content_type_or_gzip_magic_never_by_content_encoding(
    server: RunningFakeCloud, http: httpx.Client
) -> None:
    plain = json.dumps(push_body()).encode()
    as_envelope = http.post("/sync/push", content=gzip.compress(plain), headers={"Content-Type": ENVELOPE})
    sniffed = http.post(
        "/sync/push", content=gzip.compress(plain), headers={"Content-Type": "application/json"}
    )
    plain_said_gzip = http.post("/sync/push", content=plain, headers={"Content-Encoding": "gzip"})
    not_gzip = http.post("/sync/push", content=plain, headers={"Content-Type": ENVELOPE})

    assert (as_envelope.status_code, sniffed.status_code) == (200, 200)
    if v3(server):
        assert plain_said_gzip.status_code == 200
        assert error_of(not_gzip) == (
            400,
            f'invalid push payload: open compressed payload: gzip: invalid header (content-type: "{ENVELOPE}")',
        )
    else:
        assert plain_said_gzip.status_code == 400


def test_v3_words_a_bad_body_with_its_content_type_and_refuses_what_follows_the_value(
    server: RunningFakeCloud, http: httpx.Client
) -> None:
    cut = gzip.compress(json.dumps(push_body()).encode(), mtime=0)[:20]
    cases = {
        b"<not json>": "invalid character '<' looking for beginning of value",
        b"": "unexpected end of JSON input",
        json.dumps(push_body()).encode() + b" x": "invalid character 'x' after top-level value",
        cut: "decode compressed payload: unexpected EOF",
    }
    for body, reason in cases.items():
        response = http.post("/sync/push", content=body, headers={"Content-Type": "application/json"})
        if v3(server):
            assert error_of(response) == (
                400,
                f'invalid push payload: {reason} (content-type: "application/json")',
            ), body
        else:
            assert response.status_code in (200, 400), body


def test_v3_refuses_a_body_that_inflates_past_the_limit_in_its_own_words(
    server: RunningFakeCloud, http: httpx.Client
) -> None:
    bomb = gzip.compress(b" " * (LIMIT + 1) + json.dumps(push_body()).encode())
    assert len(bomb) < LIMIT
    response = http.post("/sync/push", content=bomb, headers={"Content-Type": ENVELOPE})
    if v3(server):
        assert error_of(response) == (413, f"decoded push payload too large (max {LIMIT} bytes)")
    else:
        assert response.status_code == 413


def test_a_v3_chunk_read_is_never_cached_and_is_the_envelope_when_asked(
    server: RunningFakeCloud, http: httpx.Client
) -> None:
    chunk_id = http.post("/sync/push", json=push_body()).json()["chunk_id"]
    plain = http.get(f"/sync/pull/{chunk_id}", params={"project": "p"})
    asked = http.get(
        f"/sync/pull/{chunk_id}", params={"project": "p"}, headers={"Accept": f"application/json, {ENVELOPE}"}
    )

    assert plain.headers["content-type"] == "application/json"
    if v3(server):
        assert (plain.headers["cache-control"], plain.headers["vary"]) == ("no-store", "Accept")
        assert asked.headers["content-type"] == ENVELOPE
        assert gzip.decompress(asked.content) == plain.content
    else:
        assert "cache-control" not in plain.headers
        assert asked.content == plain.content


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", False),
        ("application/json", False),
        (ENVELOPE, True),
        ('APPLICATION/VND.ENGRAM.SYNC+GZIP; Version="1"', True),
        ("application/vnd.engram.sync+gzip;version=1;", True),
    ],
)
def test_the_envelope_content_type_is_read_as_go_reads_it(value: str, expected: bool) -> None:
    assert names_envelope(value) is expected


def test_accept_names_the_envelope_in_any_of_its_values() -> None:
    assert accepts_envelope(f"application/json, {ENVELOPE}")
    assert not accepts_envelope("application/json, application/vnd.engram.sync+gzip; version=2, garbage")
