"""The fake's v3 mode answers the mutation routes as v3's handler does (predicted from source:
internal/cloud/cloudserver/mutations.go of module github.com/Gentleman-Programming/engram/v3, stored in
the fork wahh-22/engram @9c52018c; engram_sync_kit/engram_contract/push_rules.py). Each case runs on v3
and on v2, where the answer stays as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engram_sync_kit.engram_contract.push_rules import payload_is_refused_utf8
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "v3-mutations-token"
PUSH = "/sync/mutations/push"
# An observation upsert whose title holds the byte 0xff: JSON that Go decodes, but not UTF-8.
NOT_UTF8 = (
    b'{"entries":[{"project":"alpha","entity":"observation","entity_key":"o-1","op":"upsert",'
    b'"payload":{"sync_id":"o-1","session_id":"s-1","type":"note","title":"caf\xff",'
    b'"content":"c","scope":"project"}}]}'
)


@pytest.fixture(scope="module", params=["v3", "v2"])
def cloud(request: pytest.FixtureRequest) -> Iterator[RunningFakeCloud]:
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha",), server_version=request.param)
    with start_fake_cloud(config) as running:
        yield running


@pytest.fixture
def http(cloud: RunningFakeCloud) -> Iterator[httpx.Client]:
    cloud.client.reset()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=cloud.base_url, headers=headers, trust_env=False, timeout=10) as client:
        yield client


def pulled(http: httpx.Client) -> list[dict[str, Any]]:
    response = http.get("/sync/mutations/pull", params={"since_seq": 0})
    assert response.status_code == 200, response.text
    mutations: list[dict[str, Any]] = response.json()["mutations"]
    return mutations


def test_a_payload_that_is_not_utf8(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    response = http.post(PUSH, content=NOT_UTF8)
    if cloud.config.server_version == "v3":
        assert response.status_code == 400, response.text
        assert response.json() == {
            "error": "invalid mutation payload",
            "error_class": "repairable",
            "error_code": "upgrade_repairable_payload_invalid",
            "reason_code": "validation_error",
            "invalid": [{"entity": "observation", "field": "payload", "index": 0}],
        }
        assert pulled(http) == []
    else:
        assert response.status_code == 200, response.text
        assert [m["entity_key"] for m in pulled(http)] == ["o-1"]


def test_every_refused_entry_is_listed_in_batch_order(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    relation = b'{"project":"alpha","entity":"relation","entity_key":"r-1","op":"upsert","payload":{}}'
    body = NOT_UTF8.replace(b"]}", b"," + relation + b"]}")
    response = http.post(PUSH, content=body)
    assert response.status_code == 400, response.text
    invalid = response.json()["invalid"]
    if cloud.config.server_version == "v3":
        assert [entry["index"] for entry in invalid] == [0, 1]
    else:
        assert [entry["index"] for entry in invalid] == [1]


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        (b'{"title":"caf\xc3\xa9"}', False),
        (b'{"title":"caf\xff"}', True),
        (b'{"title":"\\ud800"}', False),  # an escape is ASCII: utf8.Valid passes it
        (None, False),  # no payload: Go's nil RawMessage is valid
    ],
)
def test_the_rule(raw: bytes | None, refused: bool) -> None:
    assert payload_is_refused_utf8(raw, "v3") is refused
    assert payload_is_refused_utf8(raw, "v2") is False


SESSION = b'{"project":"alpha","entity":"session","entity_key":"s-1","op":"upsert","payload":{"id":"s-1","directory":"/d"}}'
NUL_TITLE = (
    b'{"project":"alpha","entity":"observation","entity_key":"o-1","op":"upsert","payload":{"sync_id":"o-1",'
    b'"session_id":"s-1","type":"note","title":"t\\u0000x","content":"c","scope":"project"}}'
)
V2_NUL = "insert mutations: cloudstore: insert mutation: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)"


def test_an_entry_postgres_refuses(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    response = http.post(PUSH, content=b'{"entries":[' + SESSION + b"," + NUL_TITLE + b"]}")
    assert response.status_code == 500
    if cloud.config.server_version == "v3":
        # v3 names the entry, never the store's own text (MutationBatchEntryError, cloudstore.go @9c52018c).
        assert response.text == 'insert mutations: batch_index=1 entity="observation" entity_key="o-1"\n'
    else:
        assert response.text == V2_NUL + "\n"
    assert pulled(http) == []


def test_the_named_entry_is_quoted_to_64_characters(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    key = "k\u00e9\t" + "x" * 70
    entry = (
        '{"project":"alpha","entity":"widget","entity_key":"' + key.replace("\t", "\\t") + '","op":"upsert",'
        '"payload":{"a":"\\u0000"}}'
    )
    response = http.post(PUSH, content=('{"entries":[' + entry + "]}").encode())
    assert response.status_code == 500
    if cloud.config.server_version == "v3":
        quoted = '"k\u00e9\\t' + "x" * 61 + '"'
        assert response.text == f'insert mutations: batch_index=0 entity="widget" entity_key={quoted}\n'
    else:
        assert response.text == V2_NUL + "\n"
