"""What engram v1.20's cloud refuses in ``POST /sync/mutations/push``, one entry at a time.

The fake cloud's push handler and the inbox triage pre-flight both ask ``refusal_for_entry``, so they
cannot disagree. The rules that depend on cloud state (allowlist, pause) and on the whole batch (size,
emptiness) are not here: they belong to whoever holds that state.

A refusal carries the status the REAL v1.20 server answers (observed by the differential test against
``engram cloud serve``, tests/fake_cloud/test_differential.py), not a status the fake would prefer:

- an empty project: 400 ``empty_project`` "mutation entries must specify a project";
- a relation upsert missing a required field: 400 "invalid relation payload" (``invalid[]``);
- a session/observation/prompt/relation payload the server's chunk codec cannot materialize (a session
  upsert without ``directory``, an observation without ``title``, a key that does not match the
  payload, an upsert payload that is not an object, a number Go's int cannot hold): v1.20 passes the
  handler's checks and fails inside its batch insert with 500 ``insert mutations: ...``, storing
  nothing;
- what Postgres refuses in the INSERT of the entry (``insert_refusal``; the columns in the statement's
  order, project, entity, entity_key, op, payload): a U+0000 in a text column, 500 "insert mutation:
  ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)"; in the payload, which
  reaches the jsonb column as the bytes sent, first a byte sequence that is not UTF-8 (raw, overlong, an
  encoded surrogate: the same 22021 naming its bytes), then, in text order, a ``\u0000`` escape (22P05
  "unsupported Unicode escape sequence") or a lone UTF-16 surrogate escape (22P02 "invalid input
  syntax for type json"). One such memory blocks its project: v1.20 refuses the batch on every retry;
- an entry whose encoded size alone exceeds the push body limit (8 MiB unless the server sets
  ENGRAM_CLOUD_MAX_PUSH_BYTES): the smallest push that carries it is over the limit, so every push of it
  is 413 ``upgrade_repairable_payload_too_large`` "push payload too large (max N bytes)".

``server_version="v2"``/``"v3"`` asks the rule predicted from v2's source instead (``canonical_entry``,
docs/fake-cloud.md "Mutation push under v2 and v3"); the default stays v1.20, which triage targets.

A 500 here is not transient: the same batch is refused on every retry, so for triage it is a poison
entry. The reason is the innermost text; on the wire the server prefixes it
(``insert mutations: cloudstore: canonicalize materialized mutation batch chunk: mutations[i]: ``, where
i counts the batch's entries of that project with a known entity), which the fake reproduces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.go_strings import quote as go_quote
from engram_sync_kit.engram_contract.gojson import go_json, go_kind, go_loads, replace_surrogates

SESSION: Final = "session"
OBSERVATION: Final = "observation"
PROMPT: Final = "prompt"
RELATION: Final = "relation"
UPSERT: Final = "upsert"
DELETE: Final = "delete"

MAX_MUTATION_BATCH: Final = 100
SUPPORTED_OPS: Final[Mapping[str, tuple[str, ...]]] = {
    SESSION: (UPSERT, DELETE),
    OBSERVATION: (UPSERT, DELETE),
    PROMPT: (UPSERT, DELETE),
    RELATION: (UPSERT,),
}
RELATION_REQUIRED: Final = (
    "sync_id",
    "source_id",
    "target_id",
    "relation",
    "judgment_status",
    "marked_by_actor",
    "marked_by_kind",
)
EMPTY_PROJECT_REASON: Final = "mutation entries must specify a project"
INVALID_RELATION_REASON: Final = "invalid relation payload"
# v1.20 validates session/observation/prompt payloads only inside its batch insert, which fails whole.
MATERIALIZE_STATUS: Final = 500
# v1.20's defaultMaxPushBodyBytes; the server reads no more of a push body than this.
MAX_PUSH_BYTES: Final = 8 * 1024 * 1024
TOO_LARGE_STATUS: Final = 413

POSTGRES_JSON_REASON: Final = "insert mutation: ERROR: invalid input syntax for type json (SQLSTATE 22P02)"
POSTGRES_NUL_ESCAPE_REASON: Final = (
    "insert mutation: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)"
)
POSTGRES_REASON_PREFIX: Final = "insert mutation: ERROR: "
TEXT_COLUMNS: Final = ("project", "entity", "entity_key", "op")  # the INSERT's order, payload last
# A chunk push writes its canonical chunk to a jsonb column, where a \u0000 escape is refused (observed).
CHUNK_NUL_ESCAPE_REASON: Final = (
    "write chunk: cloudstore: write chunk: ERROR: unsupported Unicode escape sequence (SQLSTATE 22P05)"
)
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)

# Predicted from source (docs/fake-cloud.md, "Mutation push under v2 and v3"): the later of the two v2
# push handlers in the index, and v3's (mutations.go, module /v3, in the fork wahh-22/engram @9c52018c),
# canonicalize every entry before its insert, filling placeholders into sparse legacy upserts, and answer
# what they still cannot canonicalize with 400 "invalid mutation payload". v1.20 has no such step: its
# batch insert fails with 500.
CANONICALIZING_SERVER_VERSIONS: Final = ("v2", "v3")
# v3 lists, first of all, an entry whose payload as sent is not UTF-8 (utf8.Valid on the raw JSON).
UTF8_CHECKING_SERVER_VERSIONS: Final = ("v3",)
# v3 answers a failed insert without the store's own text: an entry Postgres refuses is named
# (cloudstore.MutationBatchEntryError), anything else is "insert mutations failed" (mutations.go and
# cloudstore.go, module /v3, fork wahh-22/engram @9c52018c).
NAMING_INSERT_FAILURE_SERVER_VERSIONS: Final = ("v3",)
INSERT_FAILED_REASON: Final = "insert mutations failed"
INVALID_MUTATION_REASON: Final = "invalid mutation payload"
LEGACY_ENTITIES: Final = (SESSION, OBSERVATION, PROMPT)

POINTER: Final = object()  # marks a Go pointer field with omitempty: omitted only when nil


@dataclass(frozen=True, slots=True)
class PushRefusal:
    status: int  # the HTTP status the real v1.20 server answers (400, 413, 500, ...)
    reason: str  # the server's error text, e.g. "mutation entries must specify a project"
    field: str | None  # the payload field at fault when there is one (e.g. "directory"), else None


def payload_is_refused_utf8(raw_payload: bytes | None, server_version: str) -> bool:
    """Whether the push handler of ``server_version`` lists an entry (field "payload") because its
    payload, as sent, is not UTF-8. v3 checks the raw bytes before anything else; an absent payload is
    valid, and an escape such as \\ud800 is ASCII, so it passes."""
    if server_version not in UTF8_CHECKING_SERVER_VERSIONS or raw_payload is None:
        return False
    try:
        raw_payload.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def entry_insert_failure_reason(batch_index: int, entity: str, entity_key: str) -> str:
    """v3's 500 text for the entry whose INSERT failed (each name quoted to 64 runes, %.64q)."""
    return (
        f"insert mutations: batch_index={batch_index} entity={go_quote(entity.strip(), 64)} "
        f"entity_key={go_quote(entity_key.strip(), 64)}"
    )


def too_large_reason(limit: int) -> str:
    """The error text of v1.20's 413 for a push body over ``limit`` bytes."""
    return f"push payload too large (max {limit} bytes)"


def refusal_for_entry(
    *,
    project: str,
    entity: str,
    entity_key: str,
    op: str,
    payload: object,
    max_push_bytes: int = MAX_PUSH_BYTES,
    server_version: str = "v1.20",
) -> PushRefusal | None:
    """Would engram v1.20's cloud refuse a POST /sync/mutations/push that carries this entry?
    payload is the row's payload as stored in sync_mutations (JSON text) or already decoded.
    None means the entry passes every contract rule that does not depend on cloud state
    (allowlist and pause are cloud state, not contract).

    For triage: status 500 is what v1.20 answers for a payload its batch insert cannot materialize
    (reason is the codec's wording, e.g. "session payload directory is required for upsert", field
    "directory") or that Postgres refuses (``insert_refusal``: a U+0000, bytes that are not UTF-8, a lone
    surrogate); it is refused again on every retry. A str payload read with surrogateescape is judged on
    its original bytes.
    Status 400 with reason "invalid request body: payload is not valid JSON" means the stored text
    is not JSON at all, which the client cannot even send. Status 413 means the entry alone does not
    fit in a push body of ``max_push_bytes`` (the server's limit), so no push can ever carry it.

    ``server_version`` "v2" or "v3" asks the predicted v2/v3 rule instead (``canonical_entry``): a sparse
    legacy upsert passes with placeholders, and what still cannot be canonicalized is 400
    "invalid mutation payload" (field "payload", or a relation's missing field)."""
    if entry_push_bytes(project, entity, entity_key, op, payload) > max_push_bytes:
        return PushRefusal(TOO_LARGE_STATUS, too_large_reason(max_push_bytes), "payload")
    wire_payload = payload_bytes(payload)
    if isinstance(payload, bytes | str):
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        try:
            payload = go_loads(text, keep_surrogates=True) if text.strip() else None
        except (json.JSONDecodeError, ContractError):
            # The client could not even put this on the wire as a JSON value.
            return PushRefusal(400, "invalid request body: payload is not valid JSON", "payload")
    if server_version in CANONICALIZING_SERVER_VERSIONS:
        refused = project_refusal(project)
        if refused is not None:
            return refused
        try:
            _, canonical = canonical_entry(
                project=project, entity=entity, entity_key=entity_key, op=op, payload=payload
            )
        except ContractError as error:
            return PushRefusal(400, INVALID_MUTATION_REASON, error.field)
        # Predicted: a known entity is stored as the canonical text Go's encoder wrote (NUL still \u0000).
        stored = canonical.encode() if entity.strip() in SUPPORTED_OPS else wire_payload
        return insert_refusal(project=project, entity=entity, entity_key=entity_key, op=op, payload=stored)
    return (
        project_refusal(project)
        or relation_refusal(entity, op, payload)
        or payload_refusal(project=project, entity=entity, entity_key=entity_key, op=op, payload=payload)
        or insert_refusal(project=project, entity=entity, entity_key=entity_key, op=op, payload=wire_payload)
    )


def entry_push_bytes(project: str, entity: str, entity_key: str, op: str, payload: object) -> int:
    """The size of the smallest push body that carries this entry: {"entries":[entry]}, the payload
    sent as its stored text (the client forwards it as raw JSON), the other fields as Go encodes them."""
    if isinstance(payload, bytes):
        payload_bytes = len(payload)
    elif isinstance(payload, str):
        payload_bytes = len(payload.encode("utf-8", "surrogatepass"))
    else:
        payload_bytes = len(go_json(payload).encode("utf-8", "surrogatepass"))
    frame = {
        "entries": [
            {"entity": entity, "entity_key": entity_key, "op": op, "payload": None, "project": project}
        ]
    }
    return len(go_json(frame).encode("utf-8", "surrogatepass")) - len("null") + payload_bytes


def project_refusal(project: str) -> PushRefusal | None:
    """The handler's first per-entry check, before the allowlist and pause."""
    if not project.strip():
        return PushRefusal(400, EMPTY_PROJECT_REASON, "project")
    return None


def relation_missing_field(payload: Any) -> str | None:
    """The first required relation field the payload lacks (v1.20 validates relations in the handler)."""
    if not isinstance(payload, dict):
        return RELATION_REQUIRED[0]
    for name in RELATION_REQUIRED:
        value = payload.get(name)
        if not isinstance(value, str) or not value.strip():
            return name
    return None


def relation_refusal(entity: str, op: str, payload: Any) -> PushRefusal | None:
    """The handler's relation check, after the allowlist and pause; the wire lists every such entry."""
    if entity != RELATION:
        return None
    missing = relation_missing_field(payload)
    return PushRefusal(400, INVALID_RELATION_REASON, missing) if missing else None


def payload_refusal(
    *, project: str, entity: str, entity_key: str, op: str, payload: Any
) -> PushRefusal | None:
    """What the server's batch insert refuses when it materializes the entry (payload: the wire value)."""
    entity, op, entity_key = entity.strip(), op.strip(), entity_key.strip()
    if entity not in SUPPORTED_OPS:
        return None  # stored as is: v1.20 materializes only the entities it knows
    try:
        if op not in SUPPORTED_OPS[entity]:
            raise ContractError(f'unsupported mutation "{entity}"/"{op}"', "op")
        if op == UPSERT and entity != RELATION and payload is not None and not isinstance(payload, dict):
            # The batch insert decodes an upsert into engram's store struct before anything else.
            raise ContractError(
                f'materialize mutation batch {entity} "{entity_key}": json: cannot unmarshal '
                f"{go_kind(payload)} into Go value of type store.{entity.capitalize()}",
                "payload",
            )
        if op == UPSERT and isinstance(payload, dict):
            check_store_fields(entity, entity_key, payload)
        text = "{}" if payload is None else go_json(payload, sort_keys=False)
        _, expected_key = normalize_mutation_payload(entity, op, text, project.strip())
        if entity_key and entity_key != expected_key:
            raise ContractError(
                f'entity_key "{entity_key}" does not match payload key "{expected_key}"', "entity_key"
            )
    except ContractError as error:
        return PushRefusal(MATERIALIZE_STATUS, str(error), error.field)
    return None


def canonical_entry(*, project: str, entity: str, entity_key: str, op: str, payload: Any) -> tuple[Any, str]:
    """The v2/v3 push handler's per-entry step before its insert (predicted from source): the payload it
    stores and its text. A relation is checked for its required fields first; a session, observation or
    prompt payload (an object, or a JSON string holding one) gets placeholders for absent upsert fields
    (``fill_legacy_placeholders``); then the chunk codec canonicalizes it. ContractError (field: the
    relation's missing field, else "payload") for whatever the handler lists in ``invalid[]``. An entity
    the codec does not know passes as sent."""
    entity, op = entity.strip(), op.strip()
    if entity == RELATION:
        missing = relation_missing_field(payload)
        if missing:
            raise ContractError(INVALID_RELATION_REASON, missing)
    if entity not in SUPPORTED_OPS:
        text = "{}" if payload is None else go_json(payload, sort_keys=False)
        return payload, text
    try:
        if entity in LEGACY_ENTITIES:
            payload = fill_legacy_placeholders(entity, entity_key, op, payload, project.strip())
        if op not in SUPPORTED_OPS[entity]:
            raise ContractError(f'unsupported mutation "{entity}"/"{op}"', "op")
        # Go decodes the payload into a map, so a lone surrogate escape becomes U+FFFD.
        text = "{}" if payload is None else go_json(replace_surrogates(payload), sort_keys=True)
        canonical, expected_key = normalize_mutation_payload(entity, op, text, project.strip())
        if entity_key.strip() and entity_key.strip() != expected_key:
            raise ContractError(f'entity_key "{entity_key}" does not match payload key "{expected_key}"')
    except ContractError as error:
        raise ContractError(str(error), "payload") from None
    return go_loads(canonical), canonical


def fill_legacy_placeholders(
    entity: str, entity_key: str, op: str, payload: Any, project: str
) -> dict[str, Any]:
    """v2's normalizeLegacyMutationPayload (predicted from source): the payload must be an object (or a
    JSON string holding one) for any op; an upsert gets deterministic values for ABSENT fields only (a
    field sent empty or null stays, and the codec refuses it)."""
    if isinstance(payload, str):
        try:
            payload = go_loads(payload)
        except (json.JSONDecodeError, ContractError) as error:
            raise ContractError(str(error), "payload") from None
    if not isinstance(payload, dict):
        raise ContractError("payload must be an object", "payload")
    fields = dict(payload)
    if op.strip() != UPSERT:
        return fields
    key = entity_key.strip()
    if entity == SESSION:
        fields.setdefault("id", _legacy_id(fields, key))
        fields.setdefault("directory", ".")
        return fields
    fields.setdefault("sync_id", key)
    row_id = _legacy_id(fields, key)
    placeholders = {"session_id": f"legacy-{row_id}", "content": row_id}
    if entity == OBSERVATION:
        placeholders |= {"type": "legacy", "title": row_id, "scope": "project"}
    else:
        placeholders["project"] = project
    for name, value in placeholders.items():
        fields.setdefault(name, value)
    return fields


def _legacy_id(fields: Mapping[str, Any], fallback: str) -> str:
    sync_id = fields.get("sync_id")
    if isinstance(sync_id, str) and sync_id.strip():
        return sync_id.strip()
    return fallback


def insert_refusal(
    *, project: str, entity: str, entity_key: str, op: str, payload: bytes
) -> PushRefusal | None:
    """What Postgres refuses in v1.20's ``INSERT INTO cloud_mutations (project, entity, entity_key, op,
    payload)``, checking the parameters in that order. The text columns are Go strings (the JSON decoder
    already replaced invalid UTF-8), trimmed; payload is the json.RawMessage as sent (``payload_bytes``).
    The reason is Postgres's, as the server wraps it ("insert mutation: ERROR: ...")."""
    for name, value in zip(TEXT_COLUMNS, (project, entity, entity_key, op), strict=True):
        if "\x00" in value:
            return PushRefusal(MATERIALIZE_STATUS, _bad_encoding_reason(b"\x00"), name)
    reason = jsonb_refusal(payload)
    return (
        None
        if reason is None
        else PushRefusal(MATERIALIZE_STATUS, POSTGRES_REASON_PREFIX + reason, "payload")
    )


def jsonb_refusal(text: bytes) -> str | None:
    """Postgres's error for these bytes as a jsonb value that is valid JSON, or None when it holds them:
    the encoding is verified first (a NUL byte, or a sequence that is not UTF-8), then the escapes in
    text order."""
    bad = _first_bad_sequence(text)
    if bad is not None:
        return _bad_encoding_reason(bad).removeprefix(POSTGRES_REASON_PREFIX)
    if b"\\" not in text:
        return None
    high_surrogate_end = -1  # where an unpaired high surrogate escape ends: a low one must start there
    for match in _ESCAPE.finditer(text.decode("utf-8")):
        code = int(match.group(1), 16) if match.group(1) else None
        if high_surrogate_end >= 0:
            if match.start() != high_surrogate_end or code is None or not 0xDC00 <= code <= 0xDFFF:
                return POSTGRES_JSON_REASON.removeprefix(POSTGRES_REASON_PREFIX)
            high_surrogate_end = -1
            continue
        if code is None:
            continue
        if 0xD800 <= code <= 0xDBFF:
            high_surrogate_end = match.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return POSTGRES_JSON_REASON.removeprefix(POSTGRES_REASON_PREFIX)
        elif code == 0:
            return POSTGRES_NUL_ESCAPE_REASON.removeprefix(POSTGRES_REASON_PREFIX)
    if high_surrogate_end >= 0:
        return POSTGRES_JSON_REASON.removeprefix(POSTGRES_REASON_PREFIX)
    return None


def payload_bytes(payload: object) -> bytes:
    """The payload as the bytes that reach Postgres: stored text as it is (text read with
    surrogateescape gives its invalid bytes back), a decoded value as JSON with its NULs and lone
    surrogates escaped, as they were sent."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        try:
            return payload.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return payload.encode("utf-8", "surrogatepass")
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    if _LONE_SURROGATE_CHAR.search(text):
        text = _LONE_SURROGATE_CHAR.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text.encode("utf-8")


def chunk_write_refusal(chunk: object) -> str | None:
    """v1.20's error text when writing this canonical chunk (a jsonb value) fails: a U+0000 anywhere in
    it; Go's encoder has already replaced invalid UTF-8 and lone surrogates."""
    return CHUNK_NUL_ESCAPE_REASON if _holds_nul(chunk) else None


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    return False


_LONE_SURROGATE_CHAR = re.compile("[\ud800-\udfff]")


def _first_bad_sequence(text: bytes) -> bytes | None:
    """The bytes Postgres names for the first invalid character: a NUL byte, or a sequence that is not
    UTF-8 (overlong forms and encoded surrogates too), as long as its first byte says it is, cut at the
    text's end (pg_verify_mbstr and report_invalid_encoding)."""
    nul = text.find(b"\x00")
    try:
        text.decode("utf-8")
        start = nul
    except UnicodeDecodeError as error:
        start = error.start if nul == -1 else min(nul, error.start)
    if start == -1:
        return None
    lead = text[start]
    length = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 1
    return text[start : start + length]


def _bad_encoding_reason(sequence: bytes) -> str:
    shown = " ".join(f"0x{byte:02x}" for byte in sequence)
    return f'{POSTGRES_REASON_PREFIX}invalid byte sequence for encoding "UTF8": {shown} (SQLSTATE 22021)'


# The fields of engram's store.Session/Observation/Prompt, which v1.20's batch insert decodes an upsert
# payload into first (observed on v1.20: a wrong type here is "materialize mutation batch ...", elsewhere
# the chunk codec's "decode mutation payload ..."). Go names a field by its JSON name.
STORE_FIELDS: Final[Mapping[str, Mapping[str, str]]] = {
    SESSION: dict.fromkeys(("id", "project", "directory", "started_at", "ended_at", "summary"), "string"),
    OBSERVATION: {
        **dict.fromkeys(
            ("sync_id", "session_id", "type", "title", "content", "tool_name", "project", "scope"), "string"
        ),
        "topic_key": "string",
        "revision_count": "int",
        "duplicate_count": "int",
        **dict.fromkeys(("last_seen_at", "created_at", "updated_at", "deleted_at"), "string"),
    },
    PROMPT: dict.fromkeys(("sync_id", "session_id", "content", "project", "created_at"), "string"),
}


def _fits(value: Any, go_type: str) -> bool:
    if value is None:
        return True  # null leaves a Go field as it is
    if go_type == "string":
        return isinstance(value, str)
    if go_type == "bool":
        return isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)  # int, float64: numbers


def check_store_fields(entity: str, entity_key: str, payload: Mapping[str, Any]) -> None:
    """ContractError in v1.20's words when an upsert payload does not decode into engram's store struct."""
    fields = STORE_FIELDS.get(entity, {})
    for name, value in payload.items():  # the first wrong field in the payload's own order
        go_type = fields.get(name)
        if go_type is not None and not _fits(value, go_type):
            raise ContractError(
                f'materialize mutation batch {entity} "{entity_key}": json: cannot unmarshal '
                f"{go_kind(value)} into Go struct field {entity.capitalize()}.{name} of type {go_type}",
                name,
            )


class _WrongType(ContractError):
    """A payload field of the wrong JSON kind; normalize_mutation_payload words it with its struct."""

    def __init__(self, value: Any, name: str, go_type: str) -> None:
        super().__init__(f"{go_kind(value)}|{go_type}", name)
        self.kind, self.go_type = go_kind(value), go_type


# ----- the chunk codec's per-entity payload rules (chunkcodec.NormalizeSyncMutationPayload) -----


def decode_mutation_payload(payload: Any) -> Any:
    """chunkcodec.DecodeSyncMutationPayload: a JSON text, or a JSON string holding one."""
    if isinstance(payload, str):
        text = payload.strip()
        if not text:
            raise ContractError("empty payload", "payload")
        try:
            decoded = go_loads(text)
            if isinstance(decoded, str):
                decoded = go_loads(decoded)
        except ContractError as error:
            raise ContractError(str(error), "payload") from None
        except json.JSONDecodeError as error:
            raise ContractError(str(error), "payload") from None
        return decoded
    return payload


def normalize_mutation_payload(entity: str, op: str, payload: str, project: str) -> tuple[str, str]:
    """The canonical payload text and the entity key it implies; raises ContractError in engram's words."""
    try:
        body = _object(payload, entity)
    except ContractError as error:
        message = str(error)
        if not message.startswith("decode mutation payload"):
            message = f"decode mutation payload: {message}"
        raise ContractError(message, "payload") from None
    try:
        # Go decodes the whole payload struct before any check: the first wrong field, in payload order.
        for name, value in body.items():
            go_type = CODEC_FIELDS.get(entity, {}).get(name)
            if go_type is not None and not _fits(value, go_type):
                raise _WrongType(value, name, go_type)
        if entity == SESSION:
            normalized, key = _normalize_session(op, body, project)
        elif entity == OBSERVATION:
            normalized, key = _normalize_observation(op, body, project)
        elif entity == PROMPT:
            normalized, key = _normalize_prompt(op, body, project)
        elif entity == RELATION:
            normalized, key = _normalize_relation(body, project)
        else:
            raise ContractError(f'unsupported mutation "{entity}"/"{op}"', "entity")
    except _WrongType as wrong:
        raise ContractError(
            f"decode mutation payload: json: cannot unmarshal {wrong.kind} into Go struct field "
            f"{_payload_struct(entity)}.{wrong.field} of type {wrong.go_type}",
            wrong.field,
        ) from None
    return go_json(normalized, sort_keys=False), key


def _payload_struct(entity: str) -> str:
    return f"mutation{entity.capitalize()}Payload"


_TEXT, _FLAG = "string", "bool"
# The chunk codec's payload structs (chunkcodec.mutation*Payload), field by JSON name.
CODEC_FIELDS: Final[Mapping[str, Mapping[str, str]]] = {
    SESSION: {
        **dict.fromkeys(("id", "directory", "started_at", "ended_at", "summary", "deleted_at"), _TEXT),
        **dict.fromkeys(("deleted", "hard_delete"), _FLAG),
    },
    OBSERVATION: {
        **dict.fromkeys(
            ("sync_id", "session_id", "type", "title", "content", "tool_name", "scope", "topic_key"), _TEXT
        ),
        **dict.fromkeys(("revision_count", "duplicate_count"), "int"),
        **dict.fromkeys(("last_seen_at", "created_at", "updated_at", "deleted_at"), _TEXT),
        **dict.fromkeys(("deleted", "hard_delete"), _FLAG),
    },
    PROMPT: {
        **dict.fromkeys(("sync_id", "session_id", "content", "created_at", "deleted_at"), _TEXT),
        **dict.fromkeys(("deleted", "hard_delete"), _FLAG),
    },
    RELATION: {
        **dict.fromkeys(RELATION_REQUIRED, _TEXT),
        **dict.fromkeys(("reason", "evidence", "marked_by_model", "session_id"), _TEXT),
        **dict.fromkeys(("created_at", "updated_at"), _TEXT),
        "confidence": "float64",
    },
}


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _WrongType(value, key, "string")
    return value


def _optional_text(body: Mapping[str, Any], key: str) -> str | None:
    if body.get(key) is None:
        return None
    return _text(body, key)


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _WrongType(value, key, "bool")
    return value


def _count(body: Mapping[str, Any], key: str) -> int:
    value = body.get(key)
    if value is None:
        return 0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value  # NaN
        or value in (float("inf"), float("-inf"))
        or int(value) != value
        or not -(2**63) <= value < 2**63
    ):
        raise _WrongType(value, key, "int")
    return int(value)


def _object(payload: str, entity: str) -> Mapping[str, Any]:
    body = decode_mutation_payload(payload)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ContractError(
            f"decode mutation payload: json: cannot unmarshal {go_kind(body)} into Go value of type "
            f"chunkcodec.{_payload_struct(entity)}",
            "payload",
        )
    return body


def _go_struct(fields: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """A Go struct's JSON: declaration order; omitempty values drop when empty, pointers when nil."""
    out: dict[str, Any] = {}
    for name, value, omit in fields:
        if omit is POINTER:
            if value is not None:
                out[name] = value
        elif not (omit and value in ("", 0, False)):
            out[name] = value
    return out


def _normalize_session(op: str, body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    session_id = _text(body, "id").strip()
    directory = _text(body, "directory").strip()
    if not session_id:
        raise ContractError("session payload id is required", "id")
    if op == UPSERT and not directory:
        raise ContractError("session payload directory is required for upsert", "directory")
    started_at, ended_at = _text(body, "started_at"), _optional_text(body, "ended_at")
    summary = _optional_text(body, "summary")
    deleted_at = _optional_text(body, "deleted_at")
    if op == DELETE:
        directory, started_at, ended_at, summary = "", "", None, None
        if deleted_at is not None:
            deleted_at = deleted_at.strip() or None
    fields: list[tuple[str, Any, Any]] = [
        ("id", session_id, False),
        ("project", project, False),
        ("directory", directory, True),
        ("started_at", started_at, True),
        ("ended_at", ended_at, POINTER),
        ("summary", summary, POINTER),
        ("deleted", _flag(body, "deleted"), True),
        ("deleted_at", deleted_at, POINTER),
        ("hard_delete", _flag(body, "hard_delete"), True),
    ]
    return _go_struct(fields), session_id


def _row_ids(entity: str, op: str, body: Mapping[str, Any]) -> tuple[str, str]:
    """An observation's or prompt's sync_id and session_id, both required for an upsert."""
    sync_id, session_id = _text(body, "sync_id").strip(), _text(body, "session_id").strip()
    if not sync_id:
        raise ContractError(f"{entity} payload sync_id is required", "sync_id")
    if op == UPSERT and not session_id:
        raise ContractError(f"{entity} payload session_id is required for upsert", "session_id")
    return sync_id, session_id


def _normalize_observation(op: str, body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    sync_id, session_id = _row_ids(OBSERVATION, op, body)
    kind, title = _text(body, "type"), _text(body, "title")
    content, scope = _text(body, "content"), _text(body, "scope")
    if op == UPSERT:
        kind, title, content, scope = kind.strip(), title.strip(), content.strip(), scope.strip()
        for name, value in (("type", kind), ("title", title), ("content", content), ("scope", scope)):
            if not value:
                raise ContractError(f"observation payload {name} is required for upsert", name)
    fields: list[tuple[str, Any, Any]] = [
        ("sync_id", sync_id, False),
        ("session_id", session_id, False),
        ("type", kind, False),
        ("title", title, False),
        ("content", content, False),
        ("tool_name", _optional_text(body, "tool_name"), POINTER),
        ("project", project, POINTER),
        ("scope", scope, False),
        ("topic_key", _optional_text(body, "topic_key"), POINTER),
        ("revision_count", _count(body, "revision_count"), True),
        ("duplicate_count", _count(body, "duplicate_count"), True),
        ("last_seen_at", _optional_text(body, "last_seen_at"), POINTER),
        ("created_at", _text(body, "created_at"), True),
        ("updated_at", _text(body, "updated_at"), True),
        ("deleted", _flag(body, "deleted"), True),
        ("deleted_at", _optional_text(body, "deleted_at"), POINTER),
        ("hard_delete", _flag(body, "hard_delete"), True),
    ]
    return _go_struct(fields), sync_id


def _normalize_prompt(op: str, body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    sync_id, session_id = _row_ids(PROMPT, op, body)
    content = _text(body, "content")
    if op == UPSERT:
        content = content.strip()
        if not content:
            raise ContractError("prompt payload content is required for upsert", "content")
    fields: list[tuple[str, Any, Any]] = [
        ("sync_id", sync_id, False),
        ("session_id", session_id, False),
        ("content", content, False),
        ("project", project, POINTER),
        ("created_at", _text(body, "created_at"), True),
        ("deleted", _flag(body, "deleted"), True),
        ("deleted_at", _optional_text(body, "deleted_at"), POINTER),
        ("hard_delete", _flag(body, "hard_delete"), True),
    ]
    return _go_struct(fields), sync_id


def _normalize_relation(body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    values = {name: _text(body, name).strip() for name in RELATION_REQUIRED[:5]}
    actor, kind = _optional_text(body, "marked_by_actor"), _optional_text(body, "marked_by_kind")
    actor = actor.strip() if actor is not None else None
    kind = kind.strip() if kind is not None else None
    for name in RELATION_REQUIRED[:5]:
        if not values[name]:
            raise ContractError(f"relation payload {name} is required for upsert", name)
    if not actor:
        raise ContractError("relation payload marked_by_actor is required for upsert", "marked_by_actor")
    if not kind:
        raise ContractError("relation payload marked_by_kind is required for upsert", "marked_by_kind")
    confidence = body.get("confidence")
    if confidence is not None and (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or confidence != confidence
        or confidence in (float("inf"), float("-inf"))
    ):
        raise _WrongType(confidence, "confidence", "float64")
    fields: list[tuple[str, Any, Any]] = [
        ("sync_id", values["sync_id"], False),
        ("source_id", values["source_id"], False),
        ("target_id", values["target_id"], False),
        ("relation", values["relation"], False),
        ("reason", _optional_text(body, "reason"), POINTER),
        ("evidence", _optional_text(body, "evidence"), POINTER),
        ("confidence", confidence, POINTER),
        ("judgment_status", values["judgment_status"], False),
        ("marked_by_actor", actor, POINTER),
        ("marked_by_kind", kind, POINTER),
        ("marked_by_model", _optional_text(body, "marked_by_model"), POINTER),
        ("session_id", _optional_text(body, "session_id"), POINTER),
        ("project", project, False),
        ("created_at", _text(body, "created_at"), True),
        ("updated_at", _text(body, "updated_at"), True),
    ]
    return _go_struct(fields), values["sync_id"]
