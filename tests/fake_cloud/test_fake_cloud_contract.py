"""The client-facing contract, checked the same way against every mode of the ``cloud`` fixture.

Expected bodies and their order of checks come from engram v1.20.0's internal/cloud/cloudserver.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any

import httpx
import pytest
from fake_cloud_support import AUTH, TOKEN, CloudUnderTest

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

SYNC_ROUTES = [
    ("POST", "/sync/mutations/push"),
    ("GET", "/sync/mutations/pull"),
    ("GET", "/sync/pull?project=p"),
    ("POST", "/sync/push"),
    ("GET", "/sync/pull/abcd1234?project=p"),
]


def session(session_id: str = "s1", project: str = "p") -> dict[str, Any]:
    return {"id": session_id, "project": project, "directory": "/work", "started_at": "2026-01-01 00:00:00"}


def observation(sync_id: str = "o1", session_id: str = "s1", project: str = "p") -> dict[str, Any]:
    return {
        "sync_id": sync_id,
        "session_id": session_id,
        "type": "manual",
        "title": "a title",
        "content": "some content",
        "project": project,
        "scope": "project",
    }


def entry(entity: str, key: str, payload: Any, project: str = "p", op: str = "upsert") -> dict[str, Any]:
    return {"project": project, "entity": entity, "entity_key": key, "op": op, "payload": payload}


def batch(project: str = "p") -> dict[str, Any]:
    return {
        "entries": [
            entry("session", "s1", session(project=project), project),
            entry("observation", "o1", observation(project=project), project),
        ]
    }


def digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_health_needs_no_token(cloud: CloudUnderTest) -> None:
    with cloud.http() as raw:
        response = raw.get("/health")
    assert response.status_code == 200
    assert response.json() == {"service": "engram-cloud", "status": "ok"}


@pytest.mark.parametrize(("method", "path"), SYNC_ROUTES)
@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "unauthorized: missing authorization header"),
        ("Bearer wrong", "unauthorized: unknown token"),
        (f"Token {TOKEN}", "unauthorized: authorization must use Bearer token"),
        (f"Bearer {TOKEN} extra", "unauthorized: authorization must use Bearer token"),
        (TOKEN, "unauthorized: authorization must use Bearer token"),
    ],
)
def test_sync_routes_refuse_a_missing_or_wrong_bearer(
    cloud: CloudUnderTest, method: str, path: str, header: str | None, message: str
) -> None:
    headers = {"Authorization": header} if header else {}
    with cloud.http() as raw:
        response = raw.request(method, path, headers=headers, json={"entries": []})
    assert response.status_code == 401
    assert response.text == message + "\n"
    assert response.headers["content-type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize("header", [f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer   {TOKEN}"])
def test_bearer_scheme_is_case_insensitive_and_spacing_tolerant(cloud: CloudUnderTest, header: str) -> None:
    with cloud.http() as raw:
        response = raw.get("/sync/mutations/pull", headers={"Authorization": header})
    assert response.status_code == 200


def test_token_is_checked_before_the_body_size(cloud: CloudUnderTest) -> None:
    with cloud.http() as raw:
        response = raw.post("/sync/mutations/push", content=b"x" * (8 * 1024 * 1024 + 10))
    assert response.status_code == 401


def test_mutation_push_accepts_stores_and_journals_each_entry(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    response = http.post("/sync/mutations/push", json=batch())
    assert response.status_code == 200
    assert response.json() == {
        "accepted_seqs": [1, 2],
        "project": "p",
        "project_path": "",
        "project_source": "request_body",
    }

    entries = cloud.client.wait(2, timeout=5, transport="mutation", status=200)
    assert [(e.entity, e.entity_key, e.op, e.project) for e in entries] == [
        ("session", "s1", "upsert", "p"),
        ("observation", "o1", "upsert", "p"),
    ]
    assert len({e.request_id for e in entries}) == 1
    assert entries[0].id < entries[1].id
    assert entries[1].payload_digest == digest(observation())

    received = cloud.client.received()
    assert [(r.seq, r.transport, r.entity, r.entity_key) for r in received] == [
        (1, "mutation", "session", "s1"),
        (2, "mutation", "observation", "o1"),
    ]
    assert received[1].payload == observation()
    assert received[1].payload_digest == digest(observation())


def test_a_string_encoded_upsert_payload_is_refused_but_digested_as_its_object(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    # The real v1.20 server cannot materialize the row and answers 500 (test_differential pins it).
    text = json.dumps(observation())
    response = http.post("/sync/mutations/push", json={"entries": [entry("observation", "o1", text)]})
    assert response.status_code == 500
    assert response.text == (
        'insert mutations: cloudstore: materialize mutation batch observation "o1": '
        "json: cannot unmarshal string into Go value of type store.Observation\n"
    )
    assert cloud.client.received() == []
    [journaled] = cloud.client.wait(1, timeout=5, status=500)
    assert journaled.payload_digest == digest(observation())


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (
            {"entries": []},
            400,
            {
                "error": "mutation batch must contain at least one entry",
                "error_class": "repairable",
                "error_code": "empty_batch",
            },
        ),
        (
            {},
            400,
            {
                "error": "mutation batch must contain at least one entry",
                "error_class": "repairable",
                "error_code": "empty_batch",
            },
        ),
        (
            {"entries": [entry("session", "s1", session(), project="  ")]},
            400,
            {
                "error": "mutation entries must specify a project",
                "error_class": "invalid_request",
                "error_code": "empty_project",
            },
        ),
        (
            {"entries": [entry("relation", "r1", {"sync_id": "r1", "source_id": "a"})]},
            400,
            {
                "error": "invalid relation payload",
                "invalid": [{"entity": "relation", "field": "target_id", "index": 0}],
                "reason_code": "validation_error",
            },
        ),
    ],
)
def test_mutation_push_refuses_bad_batches_with_the_real_bodies(
    http: httpx.Client, body: dict[str, Any], status: int, expected: dict[str, Any]
) -> None:
    response = http.post("/sync/mutations/push", json=body)
    assert response.status_code == status
    assert response.json() == expected


@pytest.mark.parametrize(
    ("content", "start"),
    [
        (b"{not json", "invalid request body: "),
        (b"", "invalid request body: EOF"),
        (b'{"entries":', "invalid request body: unexpected EOF"),
        (b'{"entries": [{"project": "p', "invalid request body: unexpected EOF"),
        (b"[1, 2]", "invalid request body: json: cannot unmarshal"),
        (b'{"entries": {"a": 1}}', "invalid request body: json: cannot unmarshal"),
        (b'{"entries": [{"project": 5}]}', "invalid request body: json: cannot unmarshal"),
    ],
)
def test_mutation_push_undecodable_bodies_are_400_text(
    http: httpx.Client, content: bytes, start: str
) -> None:
    response = http.post("/sync/mutations/push", content=content)
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.startswith(start)
    assert response.text.count("\n") == 1


def test_mutation_push_caps_a_batch_at_100_entries(http: httpx.Client) -> None:
    entries = [entry("observation", f"o{i}", observation(f"o{i}")) for i in range(101)]
    response = http.post("/sync/mutations/push", json={"entries": entries})
    assert response.status_code == 400
    assert response.text == "batch too large: max 100 entries per request\n"


def test_body_over_the_limit_is_413(http: httpx.Client) -> None:
    padding = "x" * (8 * 1024 * 1024)
    response = http.post("/sync/mutations/push", json={"entries": [entry("session", "s1", {"pad": padding})]})
    assert response.status_code == 413
    assert response.json() == {
        "error": "push payload too large (max 8388608 bytes)",
        "error_class": "repairable",
        "error_code": "upgrade_repairable_payload_too_large",
    }


FORBIDDEN = {
    "error": "forbidden: project is not allowed",
    "error_class": "policy",
    "error_code": "policy_forbidden",
}


def test_allowlist_forbids_other_projects_and_star_allows_all(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    assert cloud.client.set_allowlist(["Alpha--Team", "p"]) == ["alpha-team", "p"]
    denied = http.post("/sync/mutations/push", json=batch("q"))
    assert denied.status_code == 403
    assert denied.json() == FORBIDDEN
    assert http.post("/sync/mutations/push", json=batch("alpha-team")).status_code == 200
    assert http.get("/sync/pull", params={"project": "q"}).status_code == 403
    assert cloud.client.set_allowlist(["*"]) == ["*"]
    assert http.post("/sync/mutations/push", json=batch("q")).status_code == 200
    assert [r.project for r in cloud.client.received()] == ["alpha-team", "alpha-team", "q", "q"]


def test_a_batch_with_one_forbidden_project_is_refused_whole(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.set_allowlist(["p"])
    body = {"entries": [*batch("p")["entries"], *batch("q")["entries"]]}
    assert http.post("/sync/mutations/push", json=body).status_code == 403
    assert cloud.client.received() == []


def test_empty_batch_is_checked_before_the_allowlist(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.set_allowlist([])
    assert http.post("/sync/mutations/push", json={"entries": []}).status_code == 400


def test_paused_project_answers_409_sync_paused_until_resumed(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.pause("p")
    response = http.post("/sync/mutations/push", json=batch("p"))
    assert response.status_code == 409
    assert response.json() == {
        "error": 'sync is paused for project "p"',
        "error_class": "policy",
        "error_code": "sync-paused",
        "project": "p",
        "project_path": "",
        "project_source": "request_body",
    }
    chunk = http.post("/sync/push", json={"project": "p", "data": {"sessions": [session()]}})
    assert chunk.status_code == 409
    assert chunk.json()["error_code"] == "sync-paused"
    cloud.client.pause("p", paused=False)
    assert http.post("/sync/mutations/push", json=batch("p")).status_code == 200


def test_allowlist_is_checked_before_pause(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.set_allowlist(["other"])
    cloud.client.pause("p")
    assert http.post("/sync/mutations/push", json=batch("p")).status_code == 403


def test_mutation_pull_pages_by_since_seq_and_limit(http: httpx.Client) -> None:
    for index in range(3):
        body = {"entries": [entry("observation", f"o{index}", observation(f"o{index}"))]}
        assert http.post("/sync/mutations/push", json=body).status_code == 200
    first = http.get("/sync/mutations/pull", params={"since_seq": 0, "limit": 2}).json()
    assert [m["seq"] for m in first["mutations"]] == [1, 2]
    assert first["has_more"] is True
    assert first["latest_seq"] == 2
    assert first["mutations"][0]["payload"] == observation("o0")
    assert set(first["mutations"][0]) == {
        "seq",
        "project",
        "entity",
        "entity_key",
        "op",
        "payload",
        "occurred_at",
    }
    rest = http.get("/sync/mutations/pull", params={"since_seq": 2, "limit": 500}).json()
    assert [m["seq"] for m in rest["mutations"]] == [3]
    assert rest["has_more"] is False
    empty = http.get("/sync/mutations/pull", params={"since_seq": "junk"}).json()
    assert [m["seq"] for m in empty["mutations"]] == [1, 2, 3]


def test_mutation_pull_only_returns_allowlisted_projects(cloud: CloudUnderTest, http: httpx.Client) -> None:
    http.post("/sync/mutations/push", json=batch("p"))
    http.post("/sync/mutations/push", json=batch("q"))
    cloud.client.set_allowlist(["q"])
    body = http.get("/sync/mutations/pull").json()
    assert {m["project"] for m in body["mutations"]} == {"q"}
    assert body["project"] == "q"
    cloud.client.set_allowlist([])
    assert http.get("/sync/mutations/pull").json()["mutations"] == []


def chunk_data(project: str = "p") -> dict[str, Any]:
    return {"sessions": [session(project="x")], "observations": [observation(project="x")], "prompts": []}


def test_chunk_push_canonicalizes_for_the_project_and_serves_it_back(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    response = http.post(
        "/sync/push",
        json={
            "chunk_id": "whatever",
            "created_by": "alice",
            "client_created_at": "2026-01-02T03:04:05Z",
            "project": "P",
            "data": chunk_data(),
        },
    )
    assert response.status_code == 200
    chunk_id = response.json()["chunk_id"]
    assert response.json() == {"chunk_id": chunk_id, "status": "ok"}

    manifest = http.get("/sync/pull", params={"project": "p"}).json()
    assert manifest == {
        "version": 1,
        "chunks": [
            {
                "id": chunk_id,
                "created_by": "alice",
                "created_at": "2026-01-02T03:04:05Z",
                "sessions": 1,
                "memories": 1,
                "prompts": 0,
            }
        ],
    }
    pulled = http.get(f"/sync/pull/{chunk_id}", params={"project": "p"})
    assert pulled.status_code == 200
    assert hashlib.sha256(pulled.content).hexdigest()[:8] == chunk_id
    data = pulled.json()
    assert data["sessions"][0]["project"] == "p"
    assert data["observations"][0]["project"] == "p"

    entries = cloud.client.wait(2, timeout=5, transport="chunk", path="/sync/push")
    assert [(e.entity, e.entity_key, e.project, e.status) for e in entries] == [
        ("session", "s1", "p", 200),
        ("observation", "o1", "p", 200),
    ]
    assert [r.transport for r in cloud.client.received()] == ["chunk", "chunk"]


def test_a_v120_chunk_push_reads_a_gzip_body_as_sent(cloud: CloudUnderTest, http: httpx.Client) -> None:
    body = gzip.compress(json.dumps({"project": "p", "data": chunk_data()}).encode())
    response = http.post("/sync/push", content=body, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400  # as v1.20 answers (test_review_raw_differential.py)
    assert (
        response.json()["error"]
        == "invalid push payload: invalid character '\\x1f' looking for beginning of value"
    )


def test_a_v3_chunk_push_accepts_a_gzip_body() -> None:
    body = gzip.compress(json.dumps({"project": "p", "data": chunk_data()}).encode())
    with (
        start_fake_cloud(FakeCloudConfig(token=TOKEN, server_version="v3")) as v3,
        httpx.Client(base_url=v3.base_url, headers=AUTH, trust_env=False) as client,
    ):
        assert client.post("/sync/push", content=body).status_code == 200
        assert len(client.get("/sync/pull", params={"project": "p"}).json()["chunks"]) == 1


def test_the_same_chunk_twice_is_stored_once(http: httpx.Client) -> None:
    first = http.post("/sync/push", json={"project": "p", "data": chunk_data()})
    second = http.post("/sync/push", json={"project": "p", "data": chunk_data()})
    assert first.json() == second.json()
    assert len(http.get("/sync/pull", params={"project": "p"}).json()["chunks"]) == 1


def test_chunk_push_takes_the_project_from_the_query_when_the_body_has_none(http: httpx.Client) -> None:
    assert http.post("/sync/push", params={"project": "q"}, json={"data": chunk_data()}).status_code == 200
    assert len(http.get("/sync/pull", params={"project": "q"}).json()["chunks"]) == 1


PAYLOAD_INVALID = {"error_class": "repairable", "error_code": "upgrade_repairable_payload_invalid"}


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"project": "p"}, 400, "data is required"),
        ({"data": {}}, 400, "project is required"),
        (
            {"project": "p", "data": {"observations": [observation()]}},
            400,
            'invalid push payload: observations[0] references missing session_id "s1"',
        ),
        (
            {"project": "p", "data": {"sessions": [{"id": "s1"}]}},
            400,
            "invalid push payload: sessions[0].directory is required",
        ),
        (
            {"project": "p", "data": {"sessions": "nope"}},
            400,
            "invalid push payload: sessions must be an array",
        ),
        (
            {"project": "p", "data": chunk_data(), "client_created_at": "yesterday"},
            400,
            "client_created_at must be RFC3339",
        ),
    ],
)
def test_chunk_push_refuses_invalid_chunks(
    http: httpx.Client, body: dict[str, Any], status: int, error: str
) -> None:
    response = http.post("/sync/push", json=body)
    assert response.status_code == status
    assert response.json()["error"] == error


def test_chunk_push_undecodable_body_is_400_payload_invalid(http: httpx.Client) -> None:
    response = http.post("/sync/push", content=b"{nope")
    assert response.status_code == 400
    assert {k: v for k, v in response.json().items() if k != "error"} == PAYLOAD_INVALID


def test_chunk_pull_answers_404_for_an_unknown_chunk_and_400_without_project(http: httpx.Client) -> None:
    missing = http.get("/sync/pull/deadbeef", params={"project": "p"})
    assert missing.status_code == 404
    assert missing.text == 'read chunk: cloudstore: chunk not found: "deadbeef"\n'
    assert http.get("/sync/pull/deadbeef").status_code == 400
    assert http.get("/sync/pull").json()["error_code"] == "upgrade_blocked_project_required"


def test_unknown_paths_404_and_wrong_methods_405_like_go(cloud: CloudUnderTest, http: httpx.Client) -> None:
    assert http.get("/sync/other").text == "404 page not found\n"
    wrong = http.delete("/sync/push")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"


def test_keep_alive_serves_many_requests_on_one_connection(http: httpx.Client) -> None:
    statuses = {http.get("/health").status_code for _ in range(50)}
    assert statuses == {200}
