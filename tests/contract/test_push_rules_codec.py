"""The chunk codec's per-entity payload rules (push_rules.normalize_mutation_payload) and v2's legacy
placeholders, pinned text for text: the canonical payload is what a v2/v3 cloud stores, and the key it
implies is what a v1.20 push is checked against.

PREDICTED from source (no v2/v3 binary builds here): the mutation*Payload structs, normalizeMutationPayload
and DecodeSyncMutationPayload of internal/cloud/chunkcodec/chunkcodec.go@04ac0548 (Gentleman-Programming/
engram): fields in struct order, pointers omitted only when nil, omitempty values when empty; required
fields trimmed, the rest kept as sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.push_rules import (
    PushRefusal,
    canonical_entry,
    fill_legacy_placeholders,
    normalize_mutation_payload,
    refusal_for_entry,
)

SESSION_FULL = {
    "id": " s1 ",
    "directory": " /w ",
    "started_at": " a ",
    "ended_at": " b ",
    "summary": " sum ",
    "deleted": True,
    "deleted_at": " d ",
    "hard_delete": True,
    "project": "sent",
}
OBSERVATION_FULL = {
    "sync_id": " o1 ",
    "session_id": " s1 ",
    "type": " t ",
    "title": " ti ",
    "content": " c ",
    "tool_name": " tn ",
    "project": "sent",
    "scope": " sc ",
    "topic_key": " tk ",
    "revision_count": 2,
    "duplicate_count": 3.0,
    "last_seen_at": " l ",
    "created_at": " cr ",
    "updated_at": " up ",
    "deleted": True,
    "deleted_at": " da ",
    "hard_delete": True,
}
PROMPT_FULL = {
    "sync_id": " p1 ",
    "session_id": " s1 ",
    "content": " c ",
    "project": "sent",
    "created_at": " cr ",
    "deleted": True,
    "deleted_at": " da ",
    "hard_delete": True,
}
RELATION_MIN = {
    "sync_id": "r",
    "source_id": "a",
    "target_id": "b",
    "relation": "x",
    "judgment_status": "j",
    "marked_by_actor": "m",
    "marked_by_kind": "k",
}
RELATION_FULL = {
    **{name: f" {value} " for name, value in RELATION_MIN.items()},
    "reason": " why ",
    "evidence": " ev ",
    "confidence": 0.5,
    "marked_by_model": " mo ",
    "session_id": " s1 ",
    "project": "sent",
    "created_at": " c ",
    "updated_at": " u ",
}
OBSERVATION_MIN = {
    "sync_id": "o1",
    "session_id": "s1",
    "type": "t",
    "title": "ti",
    "content": "c",
    "scope": "sc",
}

CANONICAL = [
    (
        "session",
        "upsert",
        SESSION_FULL,
        '{"id":"s1","project":"p","directory":"/w","started_at":" a ","ended_at":" b ","summary":" sum ",'
        '"deleted":true,"deleted_at":" d ","hard_delete":true}',
        "s1",
    ),
    # a delete clears what only an upsert carries, and trims deleted_at
    (
        "session",
        "delete",
        SESSION_FULL,
        '{"id":"s1","project":"p","deleted":true,"deleted_at":"d","hard_delete":true}',
        "s1",
    ),
    ("session", "delete", {"id": "s1", "deleted_at": "  "}, '{"id":"s1","project":"p"}', "s1"),
    # omitempty drops "", false; a pointer set to "" stays
    (
        "session",
        "upsert",
        {"id": "s1", "directory": "/w", "started_at": "", "ended_at": "", "summary": "", "deleted": False},
        '{"id":"s1","project":"p","directory":"/w","ended_at":"","summary":""}',
        "s1",
    ),
    (
        "observation",
        "upsert",
        OBSERVATION_FULL,
        '{"sync_id":"o1","session_id":"s1","type":"t","title":"ti","content":"c","tool_name":" tn ",'
        '"project":"p","scope":"sc","topic_key":" tk ","revision_count":2,"duplicate_count":3,'
        '"last_seen_at":" l ","created_at":" cr ","updated_at":" up ","deleted":true,"deleted_at":" da ",'
        '"hard_delete":true}',
        "o1",
    ),
    # a delete trims only the two ids
    (
        "observation",
        "delete",
        OBSERVATION_FULL,
        '{"sync_id":"o1","session_id":"s1","type":" t ","title":" ti ","content":" c ","tool_name":" tn ",'
        '"project":"p","scope":" sc ","topic_key":" tk ","revision_count":2,"duplicate_count":3,'
        '"last_seen_at":" l ","created_at":" cr ","updated_at":" up ","deleted":true,"deleted_at":" da ",'
        '"hard_delete":true}',
        "o1",
    ),
    (
        "observation",
        "upsert",
        {
            **OBSERVATION_MIN,
            "tool_name": "",
            "topic_key": "",
            "last_seen_at": "",
            "deleted_at": "",
            "revision_count": 0,
            "duplicate_count": 0,
            "created_at": "",
            "updated_at": "",
            "deleted": False,
            "hard_delete": False,
        },
        '{"sync_id":"o1","session_id":"s1","type":"t","title":"ti","content":"c","tool_name":"",'
        '"project":"p","scope":"sc","topic_key":"","last_seen_at":"","deleted_at":""}',
        "o1",
    ),
    (
        "observation",
        "delete",
        {"sync_id": "o1"},
        '{"sync_id":"o1","session_id":"","type":"","title":"","content":"","project":"p","scope":""}',
        "o1",
    ),
    (
        "prompt",
        "upsert",
        PROMPT_FULL,
        '{"sync_id":"p1","session_id":"s1","content":"c","project":"p","created_at":" cr ","deleted":true,'
        '"deleted_at":" da ","hard_delete":true}',
        "p1",
    ),
    (
        "prompt",
        "delete",
        PROMPT_FULL,
        '{"sync_id":"p1","session_id":"s1","content":" c ","project":"p","created_at":" cr ","deleted":true,'
        '"deleted_at":" da ","hard_delete":true}',
        "p1",
    ),
    (
        "prompt",
        "delete",
        {"sync_id": "p1"},
        '{"sync_id":"p1","session_id":"","content":"","project":"p"}',
        "p1",
    ),
    (
        "relation",
        "upsert",
        RELATION_FULL,
        '{"sync_id":"r","source_id":"a","target_id":"b","relation":"x","reason":" why ","evidence":" ev ",'
        '"confidence":0.5,"judgment_status":"j","marked_by_actor":"m","marked_by_kind":"k",'
        '"marked_by_model":" mo ","session_id":" s1 ","project":"p","created_at":" c ","updated_at":" u "}',
        "r",
    ),
    # a confidence pointer to 0 is not nil, so it stays
    (
        "relation",
        "upsert",
        {**RELATION_MIN, "confidence": 0, "reason": "", "created_at": "", "updated_at": ""},
        '{"sync_id":"r","source_id":"a","target_id":"b","relation":"x","reason":"","confidence":0,'
        '"judgment_status":"j","marked_by_actor":"m","marked_by_kind":"k","project":"p"}',
        "r",
    ),
    # a JSON string holding the object decodes like the object
    (
        "relation",
        "upsert",
        json.dumps(json.dumps(RELATION_MIN)),
        '{"sync_id":"r","source_id":"a","target_id":"b","relation":"x","judgment_status":"j",'
        '"marked_by_actor":"m","marked_by_kind":"k","project":"p"}',
        "r",
    ),
    ("session", "delete", "null", None, None),  # null decodes to an empty struct: its id is missing
]


@pytest.mark.parametrize(("entity", "op", "payload", "canonical", "key"), CANONICAL)
def test_the_codec_writes_each_entity_in_struct_order(
    entity: str, op: str, payload: Any, canonical: str | None, key: str | None
) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    if canonical is None:
        with pytest.raises(ContractError, match="^session payload id is required$"):
            normalize_mutation_payload(entity, op, text, "p")
        return
    assert normalize_mutation_payload(entity, op, text, "p") == (canonical, key)


REQUIRED = [
    ("session", "upsert", {"id": " ", "directory": "/w"}, "session payload id is required", "id"),
    ("session", "delete", {"id": " "}, "session payload id is required", "id"),
    (
        "session",
        "upsert",
        {"id": "s1", "directory": " "},
        "session payload directory is required for upsert",
        "directory",
    ),
    *(
        (
            "observation",
            "upsert",
            {**OBSERVATION_MIN, name: " "},
            f"observation payload {name} is required" + ("" if name == "sync_id" else " for upsert"),
            name,
        )
        for name in OBSERVATION_MIN
    ),
    ("observation", "delete", {"session_id": "s1"}, "observation payload sync_id is required", "sync_id"),
    *(
        (
            "prompt",
            "upsert",
            {"sync_id": "p1", "session_id": "s1", "content": "c", name: " "},
            f"prompt payload {name} is required" + ("" if name == "sync_id" else " for upsert"),
            name,
        )
        for name in ("sync_id", "session_id", "content")
    ),
    *(
        (
            "relation",
            "upsert",
            {**RELATION_MIN, name: " "},
            f"relation payload {name} is required for upsert",
            name,
        )
        for name in RELATION_MIN
    ),
    *(
        (
            "relation",
            "upsert",
            {key: value for key, value in RELATION_MIN.items() if key != name},
            f"relation payload {name} is required for upsert",
            name,
        )
        for name in ("marked_by_actor", "marked_by_kind")
    ),
    (
        "relation",
        "upsert",
        "[1]",
        "decode mutation payload: json: cannot unmarshal array into Go value of type "
        "chunkcodec.mutationRelationPayload",
        "payload",
    ),
    (
        "prompt",
        "upsert",
        "5",
        "decode mutation payload: json: cannot unmarshal number into Go value of type "
        "chunkcodec.mutationPromptPayload",
        "payload",
    ),
    ("relation", "upsert", "  ", "decode mutation payload: empty payload", "payload"),
    (
        "relation",
        "upsert",
        '{"a":NaN}',
        "decode mutation payload: invalid character 'N' looking for beginning of value",
        "payload",
    ),
    ("thing", "upsert", "{}", 'unsupported mutation "thing"/"upsert"', "entity"),
]


@pytest.mark.parametrize(("entity", "op", "payload", "message", "field"), REQUIRED)
def test_what_the_codec_refuses_in_its_words(
    entity: str, op: str, payload: Any, message: str, field: str
) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    with pytest.raises(ContractError) as caught:
        normalize_mutation_payload(entity, op, text, "p")
    assert (str(caught.value), caught.value.field) == (message, field)


def wrong_type(struct: str, name: str, kind: str, go_type: str) -> str:
    return f"decode mutation payload: json: cannot unmarshal {kind} into Go struct field {struct}.{name} of type {go_type}"


OBSERVATION_STRUCT = "mutationObservationPayload"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, "bool"),
        (1.5, "number"),
        (2**63, "number"),
        (-(2**63) - 1, "number"),
        ("1", "string"),
        (1e300, "number"),
    ],
)
def test_a_count_go_int_cannot_hold(value: Any, kind: str) -> None:
    for name in ("revision_count", "duplicate_count"):
        with pytest.raises(ContractError) as caught:
            normalize_mutation_payload(
                "observation", "delete", json.dumps({"sync_id": "o1", name: value}), "p"
            )
        assert (str(caught.value), caught.value.field) == (
            wrong_type(OBSERVATION_STRUCT, name, kind, "int"),
            name,
        )


@pytest.mark.parametrize(
    ("value", "written"),
    [(2**63 - 1, "9223372036854775807"), (-(2**63), "-9223372036854775808"), (2.0, "2"), (-1, "-1")],
)
def test_a_count_go_int_holds(value: Any, written: str) -> None:
    text, _ = normalize_mutation_payload(
        "observation", "delete", json.dumps({"sync_id": "o1", "revision_count": value}), "p"
    )
    assert json.loads(text)["revision_count"] == int(value)
    assert text.endswith(f'"revision_count":{written}}}')


@pytest.mark.parametrize(
    ("entity", "name", "value", "kind", "go_type"),
    [
        ("observation", "deleted", 1, "number", "bool"),
        ("observation", "hard_delete", "true", "string", "bool"),
        ("session", "deleted", "yes", "string", "bool"),
        ("prompt", "hard_delete", 0, "number", "bool"),
        ("observation", "title", 5, "number", "string"),
        ("session", "summary", ["x"], "array", "string"),
        ("prompt", "created_at", {"a": 1}, "object", "string"),
        ("relation", "confidence", True, "bool", "float64"),
        ("relation", "confidence", "1", "string", "float64"),
        ("relation", "reason", False, "bool", "string"),
    ],
)
def test_a_field_of_the_wrong_kind(entity: str, name: str, value: Any, kind: str, go_type: str) -> None:
    ids = {"session": {"id": "s1"}, "observation": {"sync_id": "o1"}, "prompt": {"sync_id": "p1"}}
    op = "upsert" if entity == "relation" else "delete"
    body = {**(RELATION_MIN if entity == "relation" else ids[entity]), name: value}
    with pytest.raises(ContractError) as caught:
        normalize_mutation_payload(entity, op, json.dumps(body), "p")
    struct = f"mutation{entity.capitalize()}Payload"
    assert (str(caught.value), caught.value.field) == (wrong_type(struct, name, kind, go_type), name)


@pytest.mark.parametrize(
    ("entity", "key", "op", "payload", "filled"),
    [
        ("session", " s1 ", "upsert", {}, {"id": "s1", "directory": "."}),
        ("session", "s1", " upsert ", {"sync_id": " x "}, {"sync_id": " x ", "id": "x", "directory": "."}),
        ("session", "s1", "upsert", {"id": "", "directory": ""}, {"id": "", "directory": ""}),
        ("session", "s1", "delete", {"a": 1}, {"a": 1}),
        (
            "observation",
            " o1 ",
            "upsert",
            {},
            {
                "sync_id": "o1",
                "session_id": "legacy-o1",
                "content": "o1",
                "type": "legacy",
                "title": "o1",
                "scope": "project",
            },
        ),
        (
            "observation",
            "o1",
            "upsert",
            {"sync_id": " x ", "title": None},
            {
                "sync_id": " x ",
                "title": None,
                "session_id": "legacy-x",
                "content": "x",
                "type": "legacy",
                "scope": "project",
            },
        ),
        (
            "observation",
            "o1",
            "upsert",
            {"sync_id": 5},
            {
                "sync_id": 5,
                "session_id": "legacy-o1",
                "content": "o1",
                "type": "legacy",
                "title": "o1",
                "scope": "project",
            },
        ),
        (
            "prompt",
            "p1",
            "upsert",
            '{"sync_id":"  ","content":""}',
            {"sync_id": "  ", "content": "", "session_id": "legacy-p1", "project": "pp"},
        ),
    ],
)
def test_v2_fills_placeholders_into_absent_upsert_fields_only(
    entity: str, key: str, op: str, payload: Any, filled: dict[str, Any]
) -> None:
    assert fill_legacy_placeholders(entity, key, op, payload, "pp") == filled


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("[1]", "payload must be an object"),
        (None, "payload must be an object"),
        ('"{}"', "payload must be an object"),
        ("NaN", "invalid character 'N' looking for beginning of value"),
    ],
)
def test_v2_placeholders_need_an_object(payload: Any, message: str) -> None:
    for op in ("upsert", "delete"):
        with pytest.raises(ContractError) as caught:
            fill_legacy_placeholders("prompt", "p1", op, payload, "pp")
        assert (str(caught.value), caught.value.field) == (message, "payload")


def test_canonical_entry_stores_the_codecs_text() -> None:
    stored, text = canonical_entry(
        project=" p ", entity=" session ", entity_key=" s1 ", op=" upsert ", payload={"id": "s1"}
    )
    assert text == '{"id":"s1","project":"p","directory":"."}'
    assert stored == {"id": "s1", "project": "p", "directory": "."}
    # Go decodes into a map first: a lone surrogate is U+FFFD in what is stored
    _, text = canonical_entry(
        project="p", entity="session", entity_key="", op="upsert", payload={"id": "s1", "summary": "\ud800"}
    )
    assert text == '{"id":"s1","project":"p","directory":".","summary":"\ufffd"}'
    # an entity the codec does not know passes as sent, in Go's escapes
    assert canonical_entry(
        project="p", entity="thing", entity_key="k", op="x", payload={"b": 1, "a": "<"}
    ) == (
        {"b": 1, "a": "<"},
        '{"b":1,"a":"\\u003c"}',
    )
    assert canonical_entry(project="p", entity="thing", entity_key="k", op="x", payload=None) == (None, "{}")


@pytest.mark.parametrize(
    ("entity", "key", "op", "payload", "message", "field"),
    [
        ("relation", "r", "upsert", {"sync_id": "r"}, "invalid relation payload", "source_id"),
        (
            " relation ",
            "r",
            "upsert",
            {**RELATION_MIN, "marked_by_kind": ""},
            "invalid relation payload",
            "marked_by_kind",
        ),
        ("relation", "r", "delete", RELATION_MIN, 'unsupported mutation "relation"/"delete"', "payload"),
        ("session", "s1", "patch", {"id": "s1"}, 'unsupported mutation "session"/"patch"', "payload"),
        (
            "relation",
            "zz",
            "upsert",
            RELATION_MIN,
            'entity_key "zz" does not match payload key "r"',
            "payload",
        ),
        (
            "session",
            " s2 ",
            "upsert",
            {"id": "s1"},
            'entity_key " s2 " does not match payload key "s1"',
            "payload",
        ),
        (
            "session",
            "s1",
            "upsert",
            {"id": "s1", "directory": ""},
            "session payload directory is required for upsert",
            "payload",
        ),
    ],
)
def test_canonical_entry_refuses_in_the_codecs_words(
    entity: str, key: str, op: str, payload: Any, message: str, field: str
) -> None:
    with pytest.raises(ContractError) as caught:
        canonical_entry(project="p", entity=entity, entity_key=key, op=op, payload=payload)
    assert (str(caught.value), caught.value.field) == (message, field)


NUL_ESCAPE = PushRefusal(
    500, "insert mutation: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)", "payload"
)


@pytest.mark.parametrize(
    ("entity", "payload", "v120", "v2"),
    [
        (
            "session",
            [1],
            PushRefusal(
                500,
                'materialize mutation batch session "s1": json: cannot unmarshal array into Go value of type '
                "store.Session",
                "payload",
            ),
            PushRefusal(400, "invalid mutation payload", "payload"),
        ),
        ("session", {}, PushRefusal(500, "session payload id is required", "id"), None),  # v2 fills the id
        (
            "relation",
            {"sync_id": "r"},
            PushRefusal(400, "invalid relation payload", "source_id"),
            PushRefusal(400, "invalid mutation payload", "source_id"),
        ),
        ("thing", '{"a":"\\u0000"}', NUL_ESCAPE, NUL_ESCAPE),  # stored as sent: Postgres refuses it on both
        (
            "session",
            '{"id":"s1","summary":"\\u0000"}',
            PushRefusal(500, "session payload directory is required for upsert", "directory"),
            NUL_ESCAPE,
        ),
        (
            "session",
            "  ",
            PushRefusal(500, "session payload id is required", "id"),
            PushRefusal(400, "invalid mutation payload", "payload"),
        ),
    ],
)
def test_refusal_for_entry_by_server_version(
    entity: str, payload: Any, v120: PushRefusal, v2: PushRefusal | None
) -> None:
    row: dict[str, Any] = {
        "project": "p",
        "entity": entity,
        "entity_key": "s1" if entity == "session" else "r",
        "op": "upsert",
    }
    assert refusal_for_entry(**row, payload=payload) == v120
    for version in ("v2", "v3"):
        assert refusal_for_entry(**row, payload=payload, server_version=version) == v2
    empty = PushRefusal(400, "mutation entries must specify a project", "project")
    for version in ("v1.20", "v2", "v3"):
        assert refusal_for_entry(**{**row, "project": " "}, payload=payload, server_version=version) == empty
