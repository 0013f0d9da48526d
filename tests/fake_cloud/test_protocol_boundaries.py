"""The protocol's edges, each pinned on both sides (a mutation run left them unguarded): the numeric
limits, and the chunk routes' refusals and what an accepted chunk leaves in the store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.fake_cloud.protocol import (
    DEFAULT_PULL_LIMIT,
    MAX_MUTATION_BATCH,
    manifest,
    pull_mutations,
    push_chunk,
    push_mutations,
    read_chunk,
)
from engram_sync_kit.fake_cloud.routes import CHUNK_READ, MANIFEST, match
from engram_sync_kit.fake_cloud.state import FakeCloudState, ServerVersion
from engram_sync_kit.fake_cloud.wire import FORBIDDEN, NO_PRINCIPAL, PROJECT_REQUIRED, Reply, paused_reply


def sessions(count: int, project: str = "p") -> dict[str, Any]:
    return {
        "entries": [
            {
                "project": project,
                "entity": "session",
                "entity_key": f"s{index}",
                "op": "upsert",
                "payload": {
                    "id": f"s{index}",
                    "project": project,
                    "directory": "/work",
                    "started_at": "2026-01-01 00:00:00",
                },
            }
            for index in range(count)
        ]
    }


def test_a_batch_of_exactly_the_maximum_is_accepted_and_one_more_is_refused() -> None:
    assert MAX_MUTATION_BATCH == 100
    state = FakeCloudState(token=None)
    accepted, _ = push_mutations(state, sessions(MAX_MUTATION_BATCH))
    assert accepted.status == 200
    assert len(accepted.body["accepted_seqs"]) == MAX_MUTATION_BATCH
    refused, _ = push_mutations(FakeCloudState(token=None), sessions(MAX_MUTATION_BATCH + 1))
    assert (refused.status, refused.body) == (400, "batch too large: max 100 entries per request")


def test_a_pull_limit_of_zero_or_less_means_the_default_page() -> None:
    state = FakeCloudState(token=None)
    for _ in range(2):
        assert push_mutations(state, sessions(MAX_MUTATION_BATCH))[0].status == 200
    for limit in ("0", "-1"):
        page = pull_mutations(state, "0", limit)
        assert page.status == 200
        assert len(page.body["mutations"]) == DEFAULT_PULL_LIMIT
        assert page.body["has_more"] is True
    assert len(pull_mutations(state, "0", "1").body["mutations"]) == 1


def test_a_pull_limit_above_the_cap_gets_the_cap_and_one_below_gets_itself() -> None:
    state = FakeCloudState(token=None)
    for _ in range(2):
        assert push_mutations(state, sessions(MAX_MUTATION_BATCH))[0].status == 200
    sizes = {
        limit: (len(page.body["mutations"]), page.body["has_more"])
        for limit in ("99", "100", "101", "100000")
        for page in [pull_mutations(state, "0", limit)]
    }
    assert DEFAULT_PULL_LIMIT == 100
    assert sizes == {"99": (99, True), "100": (100, True), "101": (100, True), "100000": (100, True)}
    last = pull_mutations(state, "100", "100")
    assert (len(last.body["mutations"]), last.body["has_more"]) == (100, False)


def test_a_chunk_is_read_from_exactly_one_segment_after_sync_pull() -> None:
    versions: tuple[ServerVersion, ...] = ("v1.20", "v2", "v3")
    for version in versions:
        assert match("/sync/pull", version) is MANIFEST
        assert match("/sync/pull/abc", version) is CHUNK_READ
        assert match("/sync/pull/a%2Fb", version) is CHUNK_READ
        assert [match(path, version) for path in ("/sync/pull/", "/sync/pull/a/b", "/sync/pull/a/")] == [
            None
        ] * 3


# --- the chunk routes, called in-process (the bodies are the real v1.20 server's, as
# tests/fake_cloud/test_fake_cloud_contract.py and the raw differential hold them over HTTP)

CHUNK_STRUCT = (
    'struct { ChunkID string "json:\\"chunk_id\\""; CreatedBy string "json:\\"created_by\\""; '
    'ClientCreatedAt string "json:\\"client_created_at\\""; Project string "json:\\"project\\""; '
    'Data json.RawMessage "json:\\"data\\"" }'
)
REPAIRABLE = {"error_class": "repairable", "error_code": "upgrade_repairable_payload_invalid"}
PROJECT_IS_REQUIRED = {
    "error_class": "blocked",
    "error_code": "upgrade_blocked_project_required",
    "error": "project is required",
}


def session_row(session_id: str = "s1") -> dict[str, Any]:
    return {"id": session_id, "project": "x", "directory": "/work", "started_at": "2026-01-01 00:00:00"}


def observation_row(sync_id: str = "o1", session_id: str = "s1") -> dict[str, Any]:
    return {
        "sync_id": sync_id,
        "session_id": session_id,
        "type": "manual",
        "title": "a title",
        "content": "some content",
        "project": "x",
        "scope": "project",
    }


def chunk_mutation(entity: str, key: str, payload: dict[str, Any], op: str = "upsert") -> dict[str, Any]:
    return {"entity": entity, "entity_key": key, "op": op, "payload": json.dumps(payload)}


RELATION = {
    "sync_id": "r1",
    "source_id": "o9",
    "target_id": "o9",
    "relation": "supports",
    "judgment_status": "pending",
    "marked_by_actor": "a",
    "marked_by_kind": "human",
}
OBSERVATION_9 = {k: v for k, v in observation_row("o9", "s9").items() if k != "project"}


def invalid(message: str) -> tuple[int, dict[str, str]]:
    return 400, {**REPAIRABLE, "error": message}


@pytest.mark.parametrize(
    ("body", "reply"),
    [
        (
            [],
            invalid(
                f"invalid push payload: json: cannot unmarshal array into Go value of type {CHUNK_STRUCT}"
            ),
        ),
        *[
            (
                {name: value, "project": "p", "data": {}},
                invalid(
                    f"invalid push payload: json: cannot unmarshal {kind} into Go struct field .{name} of type string"
                ),
            )
            for name, value, kind in [
                ("chunk_id", 1, "number"),
                ("created_by", True, "bool"),
                ("client_created_at", [], "array"),
            ]
        ],
        (
            {"project": 7, "data": {}},
            invalid(
                "invalid push payload: json: cannot unmarshal number into Go struct field .project of type string"
            ),
        ),
        ({"project": "p"}, invalid("data is required")),
        ({"data": {}}, (400, PROJECT_IS_REQUIRED)),
        ({"project": "  ", "data": {}}, (400, PROJECT_IS_REQUIRED)),
        (
            {"project": "p", "data": {"observations": [observation_row()]}},
            invalid('invalid push payload: observations[0] references missing session_id "s1"'),
        ),
        (
            {
                "project": "p",
                "data": {
                    "sessions": [session_row()],
                    "prompts": [{"sync_id": "u1", "session_id": "s2", "content": "x"}],
                },
            },
            invalid('invalid push payload: prompts[0] references missing session_id "s2"'),
        ),
        (
            {"project": "p", "data": {"sessions": [{"id": "s1"}]}},
            invalid("invalid push payload: sessions[0].directory is required"),
        ),
        (
            {"project": "p", "data": {"sessions": [{**session_row(), "started_at": 5}]}},
            invalid(
                "invalid push payload: chunk schema: json: cannot unmarshal number into Go struct field "
                "Session.sessions.started_at of type string"
            ),
        ),
        (
            {"project": "p", "data": {"mutations": [chunk_mutation("observation", "o9", OBSERVATION_9)]}},
            invalid('invalid push payload: mutations[0] references missing session_id "s9"'),
        ),
        (
            {
                "project": "p",
                "data": {
                    "mutations": [chunk_mutation("observation", "o9", {**OBSERVATION_9, "session_id": ""})]
                },
            },
            invalid(
                "invalid push payload: mutations[0]: observation payload session_id is required for upsert"
            ),
        ),
        *[
            (
                {"project": "p", "data": {"sessions": [session_row()]}, "client_created_at": when},
                invalid("client_created_at must be RFC3339"),
            )
            for when in (
                "yesterday",
                "2026-01-02T03:04:05",
                "2026-01-02 03:04:05Z",
                "2026-01-02T03:04:05+0100",
            )
        ],
    ],
)
def test_a_chunk_push_is_refused_with_the_servers_body(body: Any, reply: tuple[int, Any]) -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    answer, _ = push_chunk(state, body, None)
    assert (answer.status, answer.body) == reply
    assert (state.chunks, state.mutations, state.received) == ({}, [], [])


def stored(state: FakeCloudState) -> dict[str, Any]:
    return {
        "chunks": {
            project: [
                (
                    c.chunk_id,
                    c.created_by,
                    c.created_at,
                    json.loads(c.payload),
                    c.sessions,
                    c.memories,
                    c.prompts,
                )
                for c in chunks.values()
            ]
            for project, chunks in state.chunks.items()
        },
        "log": [
            (m.seq, m.project, m.entity, m.entity_key, m.op, json.loads(m.payload)) for m in state.mutations
        ],
        "received": [
            (r.transport, r.project, r.entity, r.entity_key, r.op, r.payload, r.payload_digest)
            for r in state.received
        ],
    }


def test_an_accepted_chunk_is_stored_for_the_query_project_logged_and_journaled() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    data = {"sessions": [session_row()], "observations": [observation_row()]}
    body = {"data": data, "created_by": " alice ", "client_created_at": "2026-01-02T03:04:05+01:00"}
    reply, items = push_chunk(state, body, " Q ")
    chunk_id = reply.body["chunk_id"]
    assert reply == Reply(200, {"chunk_id": chunk_id, "status": "ok"})
    session = {**session_row(), "project": "q"}
    observation = {**observation_row(), "project": "q"}
    assert [(i.project, i.entity, i.entity_key, i.op) for i in items] == [
        ("q", "session", "s1", "upsert"),
        ("q", "observation", "o1", "upsert"),
    ]
    assert stored(state) == {
        "chunks": {
            "q": [
                (
                    chunk_id,
                    "alice",
                    "2026-01-02T02:04:05Z",
                    {"sessions": [session], "observations": [observation]},
                    1,
                    1,
                    0,
                )
            ]
        },
        "log": [
            (1, "q", "session", "s1", "upsert", session),
            (2, "q", "observation", "o1", "upsert", observation),
        ],
        "received": [
            ("chunk", "q", "session", "s1", "upsert", session_row(), payload_digest(session_row())),
            (
                "chunk",
                "q",
                "observation",
                "o1",
                "upsert",
                observation_row(),
                payload_digest(observation_row()),
            ),
        ],
    }
    # The log keeps the payload's own key order (not sorted), as the server's jsonb text does.
    assert list(json.loads(state.mutations[0].payload)) == list(session)
    assert read_chunk(state, "q", f" {chunk_id} ") == Reply(200, state.chunks["q"][chunk_id].payload)
    again, _ = push_chunk(state, {"project": "q", "data": data}, None)
    assert (again, len(state.chunks["q"]), len(state.mutations)) == (reply, 1, 2)


def test_a_chunk_of_mutations_logs_only_its_relations_and_journals_every_entry() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    mutations = [
        chunk_mutation("session", "s9", {"id": "s9", "directory": "/w"}),
        chunk_mutation("observation", "o9", OBSERVATION_9),
        chunk_mutation("relation", "r1", RELATION),
    ]
    reply, items = push_chunk(state, {"project": "p", "data": {"mutations": mutations}}, "ignored")
    assert reply.status == 200
    relation = {**RELATION, "project": "p"}
    assert stored(state)["log"] == [(1, "p", "relation", "r1", "upsert", relation)]
    assert [(i.project, i.entity, i.entity_key, i.op) for i in items] == [
        ("p", "session", "s9", "upsert"),
        ("p", "observation", "o9", "upsert"),
        ("p", "relation", "r1", "upsert"),
    ]
    assert [
        (r.transport, r.project, r.entity, r.entity_key, r.op, r.payload, r.payload_digest)
        for r in state.received
    ] == [
        (
            "chunk",
            "p",
            "session",
            "s9",
            "upsert",
            {"id": "s9", "directory": "/w"},
            payload_digest({"id": "s9", "directory": "/w"}),
        ),
        ("chunk", "p", "observation", "o9", "upsert", OBSERVATION_9, payload_digest(OBSERVATION_9)),
        ("chunk", "p", "relation", "r1", "upsert", RELATION, payload_digest(RELATION)),
    ]
    (chunk,) = state.chunks["p"].values()
    assert (chunk.sessions, chunk.memories, chunk.prompts, chunk.created_by) == (0, 0, 0, "")


def test_a_chunk_push_stores_nothing_when_told_not_to_or_when_denied_or_paused() -> None:
    data = {"sessions": [session_row()]}
    quiet = FakeCloudState(token=None, server_version="v1.20")
    reply, items = push_chunk(quiet, {"project": "p", "data": data}, None, store=False)
    assert (reply.status, sorted(reply.body), [i.project for i in items]) == (
        200,
        ["chunk_id", "status"],
        ["p"],
    )
    assert stored(quiet) == {"chunks": {}, "log": [], "received": []}
    paused = FakeCloudState(token=None, server_version="v1.20")
    paused.set_paused("p", True)
    assert push_chunk(paused, {"project": "P", "data": data}, None)[0] == paused_reply("p", "p")
    fenced = FakeCloudState(token=None, allowed_projects=["q"], server_version="v1.20")
    assert push_chunk(fenced, {"project": "p", "data": data}, None)[0] == FORBIDDEN
    anonymous = FakeCloudState(token=None, principal_required=True, server_version="v1.20")
    assert push_chunk(anonymous, {"project": "p", "data": data}, None)[0] == NO_PRINCIPAL
    for state in (paused, fenced, anonymous):
        assert stored(state) == {"chunks": {}, "log": [], "received": []}


def test_a_chunk_holding_nul_is_refused_unless_the_body_cannot_hold_one() -> None:
    data = {"sessions": [{"id": "s1", "directory": "/w\u0000"}]}
    state = FakeCloudState(token=None, server_version="v1.20")
    reply, _ = push_chunk(state, {"project": "p", "data": data}, None)
    assert reply == Reply(
        500,
        {
            "error_class": "blocked",
            "error_code": "upgrade_blocked_internal",
            "error": "write chunk: cloudstore: write chunk: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)",
        },
    )
    assert state.chunks == {}
    assert push_chunk(state, {"project": "p", "data": data}, None, may_hold_nul=False)[0].status == 200


def test_a_chunk_id_that_names_different_bytes_is_a_409_conflict() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    data = {"sessions": [session_row()]}
    chunk_id = push_chunk(FakeCloudState(token=None), {"project": "p", "data": data}, None)[0].body[
        "chunk_id"
    ]
    state.store_chunk("p", chunk_id, "", "", b'{"sessions":[]}', {"sessions": []})
    reply, _ = push_chunk(state, {"project": "p", "data": data}, None)
    assert reply == Reply(
        409,
        {
            "error_class": "repairable",
            "error_code": "upgrade_repairable_chunk_conflict",
            "error": f'write chunk: cloudstore: chunk id conflict: existing chunk "{chunk_id}" has different payload',
        },
    )


def test_reading_a_chunk_needs_a_project_an_allowed_scope_and_an_id() -> None:
    state = FakeCloudState(token=None, allowed_projects=["p"], server_version="v1.20")
    assert read_chunk(state, None, "abc") == PROJECT_REQUIRED
    assert read_chunk(state, "q", "abc") == FORBIDDEN
    assert read_chunk(state, "p", "  ") == Reply(400, "chunkID is required")
    assert read_chunk(state, "p", "abc") == Reply(404, 'read chunk: cloudstore: chunk not found: "abc"')
    assert manifest(state, None) == PROJECT_REQUIRED
    assert manifest(state, "q") == FORBIDDEN


# --- the mutation routes' bodies (v1.20's handler order: decode, size, empty, project, scope, pause,
# relation fields, the insert's materialization)


def entry(entity: str, key: str, payload: Any, project: str = "p", op: str = "upsert") -> dict[str, Any]:
    return {"project": project, "entity": entity, "entity_key": key, "op": op, "payload": payload}


SESSION_1 = {"id": "s1", "directory": "/w", "started_at": "2026-01-01 00:00:00"}
OBSERVATION_1 = {k: v for k, v in observation_row().items() if k != "project"}
RELATION_AB = {**RELATION, "source_id": "a", "target_id": "b"}
EMPTY_BATCH = {
    "error_class": "repairable",
    "error_code": "empty_batch",
    "error": "mutation batch must contain at least one entry",
}


@pytest.mark.parametrize(
    ("body", "reply"),
    [
        (None, (400, EMPTY_BATCH)),
        ({"entries": None}, (400, EMPTY_BATCH)),
        ({"entries": []}, (400, EMPTY_BATCH)),
        (
            [],
            (
                400,
                "invalid request body: json: cannot unmarshal array into Go value of type "
                "cloudserver.mutationPushEnvelope",
            ),
        ),
        (
            {"entries": {}},
            (
                400,
                "invalid request body: json: cannot unmarshal object into Go struct field "
                "mutationPushEnvelope.entries of type []cloudstore.MutationEntry",
            ),
        ),
        (
            {"entries": [None, 5]},
            (
                400,
                "invalid request body: json: cannot unmarshal number into Go struct field "
                "mutationPushEnvelope.entries of type cloudstore.MutationEntry",
            ),
        ),
        (
            {"entries": [{"project": "p", "op": []}]},
            (
                400,
                "invalid request body: json: cannot unmarshal array into Go struct field "
                "MutationEntry.entries.op of type string",
            ),
        ),
        (
            {"entries": [entry("session", "s1", SESSION_1, project=" ")]},
            (
                400,
                {
                    "error_class": "invalid_request",
                    "error_code": "empty_project",
                    "error": "mutation entries must specify a project",
                },
            ),
        ),
        (
            {"entries": [entry("session", "s1", SESSION_1), entry("relation", "r1", {"sync_id": "r1"})]},
            (
                400,
                {
                    "error": "invalid relation payload",
                    "invalid": [{"entity": "relation", "field": "source_id", "index": 1}],
                    "reason_code": "validation_error",
                },
            ),
        ),
        (
            {"entries": [entry("session", "s1", [1])]},
            (
                500,
                'insert mutations: cloudstore: materialize mutation batch session "s1": json: cannot unmarshal '
                "array into Go value of type store.Session",
            ),
        ),
        (
            {"entries": [entry("memo", "m1", {}), entry("observation", "o1", {"sync_id": "o1"})]},
            (
                500,
                "insert mutations: cloudstore: canonicalize materialized mutation batch chunk: mutations[0]: "
                "observation payload session_id is required for upsert",
            ),
        ),
    ],
)
def test_a_mutation_push_is_refused_with_the_servers_body(body: Any, reply: tuple[int, Any]) -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    answer, _ = push_mutations(state, body)
    assert (answer.status, answer.body) == reply
    assert stored(state) == {"chunks": {}, "log": [], "received": []}


def test_a_mutation_push_stops_at_the_first_denied_or_paused_project() -> None:
    batch = {"entries": [entry("session", "s1", SESSION_1), entry("session", "s1", SESSION_1, project=" q ")]}
    fenced = FakeCloudState(token=None, allowed_projects=["p"], server_version="v1.20")
    assert push_mutations(fenced, batch)[0] == FORBIDDEN
    paused = FakeCloudState(token=None, server_version="v1.20")
    paused.set_paused("q", True)
    assert push_mutations(paused, batch)[0] == paused_reply("q", "p")
    assert stored(fenced) == stored(paused) == {"chunks": {}, "log": [], "received": []}


def test_an_accepted_mutation_push_logs_every_entry_and_stores_a_chunk_per_project() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    reply, items = push_mutations(
        state,
        {
            "entries": [
                entry("session", " s1 ", SESSION_1, project=" p "),
                entry("observation", "o1", OBSERVATION_1, op=" upsert "),
                entry("observation", "o2", {"sync_id": "o2"}, op="delete"),
                entry("memo", "m1", {"a": 1}),
                entry("relation", "r1", RELATION_AB, project="q"),
            ]
        },
    )
    assert reply == Reply(
        200,
        {
            "accepted_seqs": [1, 2, 3, 4, 5],
            "project": "p",
            "project_path": "",
            "project_source": "request_body",
        },
    )
    assert [(i.project, i.entity, i.entity_key, i.op) for i in items] == [
        (" p ", "session", " s1 ", "upsert"),
        ("p", "observation", "o1", " upsert "),
        ("p", "observation", "o2", "delete"),
        ("p", "memo", "m1", "upsert"),
        ("q", "relation", "r1", "upsert"),
    ]
    logged = [
        ("p", "session", "s1", "upsert", SESSION_1),
        ("p", "observation", "o1", "upsert", OBSERVATION_1),
        ("p", "observation", "o2", "delete", {"sync_id": "o2"}),
        ("p", "memo", "m1", "upsert", {"a": 1}),
        ("q", "relation", "r1", "upsert", RELATION_AB),
    ]
    now = stored(state)
    assert now["log"] == [(seq, *row) for seq, row in enumerate(logged, start=1)]
    assert now["received"] == [("mutation", *row, payload_digest(row[-1])) for row in logged]
    assert list(json.loads(state.mutations[0].payload)) == ["id", "directory", "started_at"]

    def materialized(project: str, entity: str, key: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "entity": entity,
            "entity_key": key,
            "occurred_at": "",
            "op": op,
            "payload": payload,
            "project": project,
            "seq": 0,
            "source": "",
            "target_key": "",
        }

    chunks = {
        project: [
            (chunk_id, created_by, counts, document) for chunk_id, created_by, _, document, *counts in rows
        ]
        for project, rows in now["chunks"].items()
    }
    for rows in chunks.values():
        for _, _, _, document in rows:
            for mutation in document["mutations"]:
                mutation["payload"] = json.loads(mutation["payload"])
    session, observation = {**SESSION_1, "project": "p"}, {**observation_row(), "project": "p"}
    blank = {"session_id": "", "type": "", "title": "", "content": "", "project": "p", "scope": ""}
    ((p_id, *p_rest),) = chunks["p"]
    ((q_id, *q_rest),) = chunks["q"]
    assert p_rest == [
        "mutation-push",
        [1, 1, 0],
        {
            "mutations": [
                materialized("p", "session", "s1", "upsert", session),
                materialized("p", "observation", "o1", "upsert", observation),
                materialized("p", "observation", "o2", "delete", {"sync_id": "o2", **blank}),
            ],
            "observations": [observation],
            "prompts": [],
            "sessions": [session],
        },
    ]
    assert q_rest == [
        "mutation-push",
        [0, 0, 0],
        {
            "mutations": [materialized("q", "relation", "r1", "upsert", {**RELATION_AB, "project": "q"})],
            "observations": [],
            "prompts": [],
            "sessions": [],
        },
    ]


def test_an_unstored_mutation_push_answers_the_seqs_the_next_push_gets() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    assert push_mutations(state, sessions(2))[0].body["accepted_seqs"] == [1, 2]
    quiet, _ = push_mutations(state, sessions(3), store=False)
    assert quiet.body == {
        "accepted_seqs": [3, 4, 5],
        "project": "p",
        "project_path": "",
        "project_source": "request_body",
    }
    assert (len(state.mutations), len(state.received)) == (2, 2)
    assert push_mutations(state, sessions(1))[0].body["accepted_seqs"] == [3]


def pulled(state: FakeCloudState, since: str | None, limit: str | None = None) -> tuple[Any, ...]:
    body = pull_mutations(state, since, limit).body
    return (
        [(m["seq"], m["project"]) for m in body["mutations"]],
        body["has_more"],
        body["latest_seq"],
        body["project"],
        body["project_path"],
        body["project_source"],
    )


def test_a_pull_pages_from_since_through_the_allowlist_and_past_trimmed_rows() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    for project in ("p", "q", "p", "q"):
        push_mutations(state, sessions(1, project))
    assert pulled(state, None) == ([(1, "p"), (2, "q"), (3, "p"), (4, "q")], False, 4, "", "", "request_body")
    assert pulled(state, " 2 ", "x") == ([(3, "p"), (4, "q")], False, 4, "", "", "request_body")
    assert pulled(state, "4") == ([], False, 0, "", "", "request_body")
    state.set_allowlist(["q"])
    assert pulled(state, "0") == ([(2, "q"), (4, "q")], False, 4, "q", "", "request_body")
    assert pulled(state, "0", "1") == ([(2, "q")], True, 2, "q", "", "request_body")
    state.set_allowlist([])
    assert pulled(state, "0") == ([], False, 0, "", "", "request_body")
    anonymous = FakeCloudState(token=None, principal_required=True, server_version="v1.20")
    assert pull_mutations(anonymous, "0", "1") == NO_PRINCIPAL

    trimmed = FakeCloudState(token=None, store_limit=8, server_version="v1.20")
    push_mutations(trimmed, sessions(9))
    assert trimmed.mutations_dropped == 2
    assert pulled(trimmed, "3", "2") == ([(4, "p"), (5, "p")], True, 5, "", "", "request_body")
    assert pulled(trimmed, "0", "1") == ([(3, "p")], True, 3, "", "", "request_body")


def test_the_manifest_lists_each_chunk_of_the_project_with_its_counts() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    data = {
        "sessions": [session_row()],
        "observations": [observation_row()],
        "prompts": [{"sync_id": "u1", "session_id": "s1", "content": "a prompt"}],
    }
    body = {"project": "p", "data": data, "created_by": "bob", "client_created_at": "2026-01-02T03:04:05Z"}
    reply, items = push_chunk(state, body, None)
    assert [(i.project, i.entity, i.entity_key, i.op) for i in items] == [
        ("p", "session", "s1", "upsert"),
        ("p", "observation", "o1", "upsert"),
        ("p", "prompt", "u1", "upsert"),
    ]
    assert [r.payload_digest for r in state.received] == [
        payload_digest(row) for row in (session_row(), observation_row(), data["prompts"][0])
    ]
    assert [(m.entity, m.entity_key) for m in state.mutations] == [
        ("session", "s1"),
        ("observation", "o1"),
        ("prompt", "u1"),
    ]
    chunk = {
        "created_at": "2026-01-02T03:04:05Z",
        "created_by": "bob",
        "id": reply.body["chunk_id"],
        "memories": 1,
        "prompts": 1,
        "sessions": 1,
    }
    assert manifest(state, " P ") == Reply(200, {"chunks": [chunk], "version": 1})
    assert manifest(state, "q") == Reply(200, {"chunks": [], "version": 1})


def test_the_items_of_a_refused_chunk_carry_the_project_and_each_rows_digest() -> None:
    prompt = {"sync_id": "u1", "session_id": "s9", "content": "x"}
    state = FakeCloudState(token=None, server_version="v1.20")
    _, items = push_chunk(state, {"data": {"prompts": [prompt]}}, None)
    assert [(i.project, i.entity, i.entity_key, i.payload_digest) for i in items] == [
        (None, "prompt", "u1", payload_digest(prompt))
    ]
    _, items = push_chunk(state, {"project": "P", "data": {"prompts": [prompt]}}, None)
    assert [(i.project, i.entity, i.entity_key, i.payload_digest) for i in items] == [
        ("p", "prompt", "u1", payload_digest(prompt))
    ]
    observation = chunk_mutation("observation", "o9", OBSERVATION_9)
    _, items = push_chunk(state, {"project": "p", "data": {"mutations": [observation]}}, None)
    assert [(i.entity, i.entity_key, i.op, i.payload_digest) for i in items] == [
        ("observation", "o9", "upsert", payload_digest(OBSERVATION_9))
    ]


def test_a_mutation_batch_is_stored_with_one_timestamp_and_a_missing_payload_as_an_empty_object() -> None:
    state = FakeCloudState(token=None, server_version="v1.20")
    reply, _ = push_mutations(
        state, {"entries": [entry("session", "s1", SESSION_1), entry("memo", "m1", None)]}
    )
    assert reply.status == 200
    (first, second) = state.mutations
    assert first.occurred_at == second.occurred_at and first.occurred_at.endswith("Z")
    assert second.payload == "{}"
    assert state.received[1].payload_digest == payload_digest({})
    (chunk,) = state.chunks["p"].values()
    assert chunk.created_at.endswith("Z")
