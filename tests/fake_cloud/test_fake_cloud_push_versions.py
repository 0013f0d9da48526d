"""POST /sync/mutations/push under each --server-version.

v1.20 is observed (and pinned against the real server by test_differential.py); the v2/v3 answers are
predicted from engram's v2 source (docs/fake-cloud.md, "Server versions"): the v2 handler fills
placeholders into sparse legacy upserts and answers what it still cannot canonicalize with 400
"invalid mutation payload"; v3 keeps that rule (its handler, module /v3, read in the fork
wahh-22/engram @9c52018c; its own difference is pinned in test_fake_cloud_v3_mutations.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engram_sync_kit.engram_contract import refusal_for_entry
from engram_sync_kit.engram_contract.push_rules import PushRefusal
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "push-versions-token"
PUSH = "/sync/mutations/push"
VERSIONS = ("v1.20", "v2", "v3")
CANONICALIZING = ("v2", "v3")
SPARSE_SESSION = {
    "project": "alpha",
    "entity": "session",
    "entity_key": "s-1",
    "op": "upsert",
    "payload": {"id": "s-1"},
}
V120_NO_DIRECTORY = (
    "insert mutations: cloudstore: canonicalize materialized mutation batch chunk: "
    "mutations[0]: session payload directory is required for upsert"
)


@pytest.fixture(scope="module", params=VERSIONS)
def cloud(request: pytest.FixtureRequest) -> Iterator[RunningFakeCloud]:
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha",), server_version=request.param)
    with start_fake_cloud(config) as running:
        yield running


@pytest.fixture
def http(cloud: RunningFakeCloud) -> Iterator[httpx.Client]:
    cloud.client.reset()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=cloud.base_url, headers=headers, trust_env=False, timeout=10) as client:
        yield client


def version_of(cloud: RunningFakeCloud) -> str:
    return str(cloud.config.server_version)


def pulled(http: httpx.Client) -> list[dict[str, Any]]:
    response = http.get("/sync/mutations/pull", params={"since_seq": 0})
    assert response.status_code == 200, response.text
    return list(response.json()["mutations"])


def invalid_reply(invalid: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "error": "invalid mutation payload",
        "error_class": "repairable",
        "error_code": "upgrade_repairable_payload_invalid",
        "invalid": invalid,
        "reason_code": "validation_error",
    }


def test_a_session_without_directory(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    response = http.post(PUSH, json={"entries": [SPARSE_SESSION]})
    if version_of(cloud) == "v1.20":
        assert (response.status_code, response.text) == (500, V120_NO_DIRECTORY + "\n")
        assert pulled(http) == []
        return
    assert response.status_code == 200, response.text
    assert response.json()["accepted_seqs"] == [1]
    [stored] = pulled(http)
    assert (stored["entity"], stored["entity_key"], stored["op"]) == ("session", "s-1", "upsert")
    assert stored["payload"] == {"id": "s-1", "project": "alpha", "directory": "."}


def test_sparse_observation_and_prompt_get_placeholders(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    entries = [
        {"project": "alpha", "entity": "observation", "entity_key": "o-1", "op": "upsert", "payload": {}},
        # a payload sent as a JSON string holding the object
        {"project": "alpha", "entity": "prompt", "entity_key": "p-1", "op": "upsert", "payload": "{}"},
    ]
    response = http.post(PUSH, json={"entries": entries})
    if version_of(cloud) == "v1.20":
        assert response.status_code == 500
        assert response.text.startswith("insert mutations: cloudstore: ")
        return
    assert response.status_code == 200, response.text
    observation, prompt = (row["payload"] for row in pulled(http))
    assert observation == {
        "sync_id": "o-1",
        "session_id": "legacy-o-1",
        "type": "legacy",
        "title": "o-1",
        "content": "o-1",
        "project": "alpha",
        "scope": "project",
    }
    assert prompt == {"sync_id": "p-1", "session_id": "legacy-p-1", "content": "p-1", "project": "alpha"}


UNREPAIRABLE = [
    # a supplied empty directory is not absent: no placeholder, still refused
    {
        "project": "alpha",
        "entity": "session",
        "entity_key": "s-2",
        "op": "upsert",
        "payload": {"id": "s-2", "directory": ""},
    },
    {"project": "alpha", "entity": "session", "entity_key": "s-3", "op": "upsert", "payload": [1, 2]},
    {
        "project": "alpha",
        "entity": "observation",
        "entity_key": "o-2",
        "op": "upsert",
        "payload": {"sync_id": "other"},
    },
]


@pytest.mark.parametrize("entry", UNREPAIRABLE, ids=["empty-directory", "array-payload", "key-mismatch"])
def test_an_unrepairable_payload(cloud: RunningFakeCloud, http: httpx.Client, entry: dict[str, Any]) -> None:
    response = http.post(PUSH, json={"entries": [SPARSE_SESSION, entry]})
    if version_of(cloud) == "v1.20":
        assert response.status_code == 500
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.text.startswith("insert mutations: cloudstore: ")
    else:
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/json"
        assert response.json() == invalid_reply([{"entity": entry["entity"], "field": "payload", "index": 1}])
    assert pulled(http) == []  # the whole batch is refused, the valid neighbour too


def test_relations_and_payloads_are_listed_together(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    entries = [
        {
            "project": "alpha",
            "entity": "relation",
            "entity_key": "r-1",
            "op": "upsert",
            "payload": {"sync_id": "r-1"},
        },
        UNREPAIRABLE[0],
    ]
    response = http.post(PUSH, json={"entries": entries})
    assert response.status_code == 400
    if version_of(cloud) == "v1.20":
        # v1.20 checks relations first and answers before its insert sees the session
        assert response.json() == {
            "error": "invalid relation payload",
            "invalid": [{"entity": "relation", "field": "source_id", "index": 0}],
            "reason_code": "validation_error",
        }
    else:
        assert response.json() == invalid_reply(
            [
                {"entity": "relation", "field": "source_id", "index": 0},
                {"entity": "session", "field": "payload", "index": 1},
            ]
        )
    assert pulled(http) == []


def test_refusal_for_entry_keeps_v120_by_default() -> None:
    """Triage's pre-flight targets v1.20 and passes no server_version: its answers must not move."""
    row: dict[str, Any] = {"project": "alpha", "entity": "session", "entity_key": "s-1", "op": "upsert"}
    sparse = json.dumps({"id": "s-1"})
    assert refusal_for_entry(**row, payload=sparse) == PushRefusal(
        500, "session payload directory is required for upsert", "directory"
    )
    assert refusal_for_entry(**row, payload=sparse, server_version="v1.20") == refusal_for_entry(
        **row, payload=sparse
    )
    for version in CANONICALIZING:
        assert refusal_for_entry(**row, payload=sparse, server_version=version) is None
        assert refusal_for_entry(**row, payload='{"id":"s-1","directory":""}', server_version=version) == (
            PushRefusal(400, "invalid mutation payload", "payload")
        )


def test_a_lone_surrogate_in_a_session(cloud: RunningFakeCloud, http: httpx.Client) -> None:
    """v1.20 stores the payload as sent and Postgres refuses it; v2 decodes it into a map first (U+FFFD)."""
    entry = '{"project":"alpha","entity":"session","entity_key":"s-4","op":"upsert","payload":{"id":"s-4","directory":"d\\ud800"}}'
    response = http.post(PUSH, content='{"entries":[' + entry + "]}")
    if version_of(cloud) == "v1.20":
        assert response.status_code == 500
        assert "invalid input syntax for type json" in response.text
        return
    assert response.status_code == 200, response.text
    assert pulled(http)[0]["payload"]["directory"] == "d\ufffd"
