"""The shared push validator: what engram v1.20's cloud refuses per entry, as the fake and triage see it.

(In tests/contract/, not tests/engram_contract/: a test directory named like the package would shadow
it for pytest's rootdir imports.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_sync_kit.engram_contract import PushRefusal, push_rules, refusal_for_entry
from engram_sync_kit.engram_contract.push_rules import MATERIALIZE_STATUS


def session(**fields: Any) -> dict[str, Any]:
    base = {"id": "s1", "project": "p", "directory": "/w", "started_at": "2026-01-01 00:00:00"}
    base.update(fields)
    return {key: value for key, value in base.items() if value is not None}


OBSERVATION = {
    "sync_id": "o1",
    "session_id": "s1",
    "type": "manual",
    "title": "t",
    "content": "c",
    "scope": "project",
}
RELATION = {
    "sync_id": "r1",
    "source_id": "o1",
    "target_id": "o2",
    "relation": "supersedes",
    "judgment_status": "confirmed",
    "marked_by_actor": "me",
    "marked_by_kind": "human",
}


def refusal(entity: str, payload: object, *, op: str = "upsert", key: str = "", project: str = "p") -> Any:
    return refusal_for_entry(project=project, entity=entity, entity_key=key, op=op, payload=payload)


@pytest.mark.parametrize(
    ("entity", "payload", "op"),
    [
        ("session", session(), "upsert"),
        ("session", {"id": "s1"}, "delete"),
        ("observation", OBSERVATION, "upsert"),
        ("observation", {"sync_id": "o1"}, "delete"),
        ("prompt", {"sync_id": "p1", "session_id": "s1", "content": "hi"}, "upsert"),
        ("relation", RELATION, "upsert"),
        ("thing", {"anything": 1}, "upsert"),  # v1.20 stores entities it does not know as they are
    ],
)
def test_good_entries_pass(entity: str, payload: dict[str, Any], op: str) -> None:
    assert refusal(entity, payload, op=op) is None
    assert refusal(entity, json.dumps(payload), op=op) is None  # as stored in sync_mutations


def test_empty_project_is_refused_first() -> None:
    assert refusal("session", {}, project="  ") == PushRefusal(
        400, "mutation entries must specify a project", "project"
    )


def test_relation_missing_field_is_the_handlers_400() -> None:
    assert refusal("relation", {**RELATION, "marked_by_kind": " "}) == PushRefusal(
        400, "invalid relation payload", "marked_by_kind"
    )
    # Observed on v1.20: a relation delete is validated like an upsert.
    assert refusal("relation", {"sync_id": "r1"}, op="delete") == PushRefusal(
        400, "invalid relation payload", "source_id"
    )


@pytest.mark.parametrize(
    ("entity", "payload", "reason", "field"),
    [
        ("session", session(directory=None), "session payload directory is required for upsert", "directory"),
        ("session", session(directory="  "), "session payload directory is required for upsert", "directory"),
        ("session", session(id=None), "session payload id is required", "id"),
        (
            "observation",
            {**OBSERVATION, "title": ""},
            "observation payload title is required for upsert",
            "title",
        ),
        (
            "prompt",
            {"sync_id": "p1", "session_id": "s1"},
            "prompt payload content is required for upsert",
            "content",
        ),
    ],
)
def test_payloads_the_batch_insert_cannot_materialize_are_the_real_500(
    entity: str, payload: dict[str, Any], reason: str, field: str
) -> None:
    assert MATERIALIZE_STATUS == 500
    assert refusal(entity, payload) == PushRefusal(500, reason, field)


def test_key_mismatch_and_unsupported_op_and_non_object_payload() -> None:
    assert refusal("session", session(), key="zz") == PushRefusal(
        500, 'entity_key "zz" does not match payload key "s1"', "entity_key"
    )
    wrong = refusal("session", 5, key="s1")
    assert (wrong.status, wrong.field) == (500, "payload")
    assert wrong.reason.startswith('materialize mutation batch session "s1": json: cannot unmarshal number')
    as_string = refusal("session", json.dumps(json.dumps(session())), key="s1")
    assert (as_string.status, as_string.field) == (500, "payload")


def test_numbers_go_cannot_hold_are_refused() -> None:
    for value in (2**70, 1.5):
        found = refusal("observation", {**OBSERVATION, "revision_count": value})
        assert (found.status, found.field) == (500, "revision_count")


def test_stored_text_that_is_not_json() -> None:
    assert refusal("session", "{not json") == PushRefusal(
        400, "invalid request body: payload is not valid JSON", "payload"
    )


def test_an_entry_larger_than_the_push_limit_alone_is_refused_413_like_v120() -> None:
    # v1.20's handler reads at most 8 MiB of a push body; {"entries":[entry]} is the smallest push.
    limit = push_rules.MAX_PUSH_BYTES
    framing = push_rules.entry_push_bytes("p", "observation", "o1", "upsert", "{}") - len("{}")
    filler = limit - framing - len(json.dumps({**OBSERVATION, "content": ""}))
    fits = json.dumps({**OBSERVATION, "content": "x" * filler})
    assert push_rules.entry_push_bytes("p", "observation", "o1", "upsert", fits) == limit
    assert refusal("observation", fits, key="o1") is None
    over = json.dumps({**OBSERVATION, "content": "x" * (filler + 1)})
    refused = refusal("observation", over, key="o1")
    assert refused == PushRefusal(413, "push payload too large (max 8388608 bytes)", "payload")


def test_the_size_rule_follows_the_servers_configured_limit() -> None:
    payload = json.dumps({**OBSERVATION, "content": "x" * 300})
    assert refusal("observation", payload, key="o1") is None
    refused = refusal_for_entry(
        project="p", entity="observation", entity_key="o1", op="upsert", payload=payload, max_push_bytes=256
    )
    assert refused == PushRefusal(413, "push payload too large (max 256 bytes)", "payload")
    # A decoded payload is measured as Go would encode it.
    decoded = {**OBSERVATION, "content": "x" * 300}
    assert (
        refusal_for_entry(
            project="p",
            entity="observation",
            entity_key="o1",
            op="upsert",
            payload=decoded,
            max_push_bytes=256,
        )
        == refused
    )


# ----- issue 35, item 15: what Postgres refuses in v1.20's INSERT (observed on v1.20 with Postgres) -----

NUL_ESCAPE = "insert mutation: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)"


def bad_bytes(shown: str) -> str:
    return f'insert mutation: ERROR: invalid byte sequence for encoding "UTF8": {shown} (SQLSTATE 22021)'


@pytest.mark.parametrize(
    ("entity", "payload", "reason"),
    [
        ("thing", '{"a":"x\\u0000y"}', NUL_ESCAPE),
        ("thing", '{"a\\u0000":"x"}', NUL_ESCAPE),
        ("thing", '"x\\u0000"', NUL_ESCAPE),
        ("session", '{"id":"s1","directory":"/w\\u0000"}', NUL_ESCAPE),
        ("session", '{"id":"s1","directory":"/w","summary":"a\\u0000b"}', NUL_ESCAPE),
        ("thing", b'{"a":"x\xffy"}', bad_bytes("0xff")),
        ("thing", b'{"a":"x\xc0\x80y"}', bad_bytes("0xc0 0x80")),  # an overlong NUL
        ("thing", b'{"a":"x\xc0\xafy"}', bad_bytes("0xc0 0xaf")),  # an overlong "/"
        ("thing", b'{"a":"x\xed\xa0\x80y"}', bad_bytes("0xed 0xa0 0x80")),  # a surrogate, encoded
        ("thing", b'{"a":"x\xe2\x82"}', bad_bytes("0xe2 0x82 0x22")),  # cut short: the next byte is shown
        ("session", b'{"id":"s1","directory":"/w\xff"}', bad_bytes("0xff")),
        # a raw invalid byte is reported before an escape anywhere: Postgres checks the encoding first
        ("thing", b'{"a":"\\u0000","b":"\xff"}', bad_bytes("0xff")),
        # in text order, the first escape that jsonb cannot hold decides
        ("thing", '{"a":"\\ud800","b":"\\u0000"}', push_rules.POSTGRES_JSON_REASON),
        ("thing", '{"a":"\\u0000","b":"\\ud800"}', NUL_ESCAPE),
    ],
)
def test_what_postgres_refuses_in_a_payload_is_a_500(entity: str, payload: str | bytes, reason: str) -> None:
    key = "s1" if entity == "session" else "k"
    op = "upsert" if entity == "session" else "delete"
    assert refusal(entity, payload, op=op, key=key) == PushRefusal(MATERIALIZE_STATUS, reason, "payload")


@pytest.mark.parametrize(
    "payload",
    [
        '{"a":"x\\\\u0000"}',  # an escaped backslash, then the text u0000
        '{"a":"\\ud83d\\ude00"}',  # a surrogate pair
        '{"a":"\u00e9\u4e2d\U0001f600"}',  # UTF-8 of 2, 3 and 4 bytes
        "{}",
    ],
)
def test_what_postgres_holds_passes(payload: str) -> None:
    assert refusal("thing", payload, op="delete", key="k") is None


def test_a_payload_read_with_surrogateescape_is_judged_on_its_bytes() -> None:
    text = b'{"a":"x\xffy"}'.decode("utf-8", "surrogateescape")
    assert refusal("thing", text, op="delete", key="k") == PushRefusal(
        MATERIALIZE_STATUS, bad_bytes("0xff"), "payload"
    )


def test_a_decoded_payload_holding_nul_is_refused_like_its_text() -> None:
    assert refusal("thing", {"a": "x\x00"}, op="delete", key="k") == PushRefusal(
        MATERIALIZE_STATUS, NUL_ESCAPE, "payload"
    )
    assert refusal("thing", {"a": "\ud800"}, op="delete", key="k") == PushRefusal(
        MATERIALIZE_STATUS, push_rules.POSTGRES_JSON_REASON, "payload"
    )


@pytest.mark.parametrize("field", ["entity", "entity_key", "op", "project"])
def test_nul_in_a_text_column_is_a_500_naming_the_byte(field: str) -> None:
    row: dict[str, Any] = {"project": "p", "entity": "thing", "entity_key": "k", "op": "delete"}
    row[field] = row[field] + "\x00"
    assert refusal_for_entry(**row, payload="{}") == PushRefusal(MATERIALIZE_STATUS, bad_bytes("0x00"), field)


def test_the_text_columns_come_before_the_payload() -> None:
    refused = refusal("thing", '{"a":"\\u0000"}', op="delete", key="k\x00")
    assert refused == PushRefusal(MATERIALIZE_STATUS, bad_bytes("0x00"), "entity_key")


def test_a_materialize_error_comes_before_what_postgres_refuses() -> None:
    refused = refusal("session", '{"id":"s1","summary":"\\u0000"}', key="s1")
    assert refused is not None and refused.field == "directory"


def test_the_canary_triage_pre_flight_sees_a_payload_holding_nul_as_refused() -> None:
    from engram_sync_kit.canary.lanes import entry_refusal, lane_row

    payload = json.dumps({**OBSERVATION, "content": "a\x00b"})  # as engram stores it: "a\u0000b"
    assert "\\u0000" in payload
    row = lane_row((7, "", "observation", "o1", "upsert", payload, "p", "2026-01-01 00:00:00", None))
    assert entry_refusal("p", row, payload) == PushRefusal(MATERIALIZE_STATUS, NUL_ESCAPE, "payload")
