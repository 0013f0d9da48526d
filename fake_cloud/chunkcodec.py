"""Chunk canonicalization as engram v1.20's server does it, so chunk ids match the real client's.

The client and the server both rewrite a pushed chunk for its project and hash the result; the chunk id
is the first 8 hex digits of that sha256. Go's encoding/json sorts map keys, writes compact JSON and
escapes <, > and & as \\u003c, \\u003e and \\u0026, which ``go_json`` reproduces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

SESSION = "session"
OBSERVATION = "observation"
PROMPT = "prompt"
RELATION = "relation"
UPSERT = "upsert"
DELETE = "delete"

POINTER = object()  # marks a Go pointer field with omitempty: omitted only when nil
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


class ChunkError(ValueError):
    """A chunk or mutation payload the real server would refuse, with the server's wording."""


def go_json(value: Any, *, sort_keys: bool = True) -> str:
    text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    # Structural JSON never contains these characters, so replacing them escapes string contents only.
    for raw, escaped in _GO_ESCAPES.items():
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def chunk_id(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()[:8]


def normalize_project(project: str) -> str:
    """engram's store.NormalizeProject: trim, lowercase, collapse repeated '-' and '_'."""
    normalized = project.strip().lower()
    while "--" in normalized:
        normalized = normalized.replace("--", "-")
    while "__" in normalized:
        normalized = normalized.replace("__", "_")
    return normalized


def decode_mutation_payload(payload: Any) -> Any:
    """chunkcodec.DecodeSyncMutationPayload: a JSON text, or a JSON string holding one."""
    if isinstance(payload, str):
        text = payload.strip()
        if not text:
            raise ChunkError("empty payload")
        try:
            decoded = json.loads(text)
            if isinstance(decoded, str):
                decoded = json.loads(decoded)
        except json.JSONDecodeError as error:
            raise ChunkError(str(error)) from None
        return decoded
    return payload


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ChunkError(f"json: cannot unmarshal {type(value).__name__} into field {key} of type string")
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
        raise ChunkError(f"json: cannot unmarshal {type(value).__name__} into field {key} of type bool")
    return value


def _count(body: Mapping[str, Any], key: str) -> int:
    value = body.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ChunkError(f"json: cannot unmarshal {value!r} into field {key} of type int")
    return int(value)


def _object(payload: str) -> Mapping[str, Any]:
    body = decode_mutation_payload(payload)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ChunkError(f"decode mutation payload: json: cannot unmarshal {type(body).__name__} into object")
    return body


def _normalize_session(op: str, body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    session_id = _text(body, "id").strip()
    directory = _text(body, "directory").strip()
    if not session_id:
        raise ChunkError("session payload id is required")
    if op == UPSERT and not directory:
        raise ChunkError("session payload directory is required for upsert")
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


def _row_ids(entity: str, op: str, body: Mapping[str, Any]) -> tuple[str, str]:
    """An observation's or prompt's sync_id and session_id, both required for an upsert."""
    sync_id, session_id = _text(body, "sync_id").strip(), _text(body, "session_id").strip()
    if not sync_id:
        raise ChunkError(f"{entity} payload sync_id is required")
    if op == UPSERT and not session_id:
        raise ChunkError(f"{entity} payload session_id is required for upsert")
    return sync_id, session_id


def _normalize_observation(op: str, body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    sync_id, session_id = _row_ids(OBSERVATION, op, body)
    kind, title = _text(body, "type"), _text(body, "title")
    content, scope = _text(body, "content"), _text(body, "scope")
    if op == UPSERT:
        kind, title, content, scope = kind.strip(), title.strip(), content.strip(), scope.strip()
        for name, value in (("type", kind), ("title", title), ("content", content), ("scope", scope)):
            if not value:
                raise ChunkError(f"observation payload {name} is required for upsert")
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
            raise ChunkError("prompt payload content is required for upsert")
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


_RELATION_REQUIRED = ("sync_id", "source_id", "target_id", "relation", "judgment_status")


def _normalize_relation(body: Mapping[str, Any], project: str) -> tuple[dict[str, Any], str]:
    values = {name: _text(body, name).strip() for name in _RELATION_REQUIRED}
    actor, kind = _optional_text(body, "marked_by_actor"), _optional_text(body, "marked_by_kind")
    actor = actor.strip() if actor is not None else None
    kind = kind.strip() if kind is not None else None
    for name in _RELATION_REQUIRED:
        if not values[name]:
            raise ChunkError(f"relation payload {name} is required for upsert")
    if not actor:
        raise ChunkError("relation payload marked_by_actor is required for upsert")
    if not kind:
        raise ChunkError("relation payload marked_by_kind is required for upsert")
    confidence = body.get("confidence")
    if confidence is not None and (isinstance(confidence, bool) or not isinstance(confidence, int | float)):
        raise ChunkError("json: cannot unmarshal confidence into float64")
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


_SUPPORTED_OPS = {
    SESSION: (UPSERT, DELETE),
    OBSERVATION: (UPSERT, DELETE),
    PROMPT: (UPSERT, DELETE),
    RELATION: (UPSERT,),
}


def normalize_mutation_payload(entity: str, op: str, payload: str, project: str) -> tuple[str, str]:
    """Return the canonical payload text and the entity key it implies."""
    try:
        body = _object(payload)
    except ChunkError as error:
        message = str(error)
        if not message.startswith("decode mutation payload"):
            message = f"decode mutation payload: {message}"
        raise ChunkError(message) from None
    if entity == SESSION:
        normalized, key = _normalize_session(op, body, project)
    elif entity == OBSERVATION:
        normalized, key = _normalize_observation(op, body, project)
    elif entity == PROMPT:
        normalized, key = _normalize_prompt(op, body, project)
    elif entity == RELATION:
        normalized, key = _normalize_relation(body, project)
    else:
        raise ChunkError(f'unsupported mutation "{entity}"/"{op}"')
    return go_json(normalized, sort_keys=False), key


def _normalize_chunk_mutation(row: Mapping[str, Any], project: str) -> dict[str, Any]:
    def field(name: str) -> str:
        value = row.get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ChunkError(
                f"decode mutation: json: cannot unmarshal {type(value).__name__} into field {name}"
            )
        return value

    entity, entity_key, op = field("entity").strip(), field("entity_key").strip(), field("op").strip()
    payload = field("payload").strip()
    for name in ("target_key", "source", "occurred_at"):
        field(name)
    if op not in _SUPPORTED_OPS.get(entity, ()):
        raise ChunkError(f'unsupported mutation "{entity}"/"{op}"')
    if not payload:
        raise ChunkError("payload is required")
    normalized_payload, expected_key = normalize_mutation_payload(entity, op, payload, project)
    if not entity_key:
        entity_key = expected_key
    if entity_key != expected_key:
        raise ChunkError(f'entity_key "{entity_key}" does not match payload key "{expected_key}"')
    seq = row.get("seq") or 0
    out: dict[str, Any] = {
        "seq": seq,
        "target_key": field("target_key"),
        "entity": entity,
        "entity_key": entity_key,
        "op": op,
        "payload": normalized_payload,
        "source": field("source"),
        "project": project,
        "occurred_at": field("occurred_at"),
    }
    if row.get("acked_at") is not None:
        out["acked_at"] = row["acked_at"]
    return out


def _session_keys(mutations: list[Any]) -> set[str]:
    keys: set[str] = set()
    for row in mutations:
        if not isinstance(row, dict):
            continue
        entity, op = str(row.get("entity") or "").strip(), str(row.get("op") or "").strip()
        if entity != SESSION or op not in (UPSERT, DELETE):
            continue
        key = str(row.get("entity_key") or "").strip()
        if key:
            keys.add(key)
        try:
            body = decode_mutation_payload(str(row.get("payload") or ""))
        except ChunkError:
            continue
        if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"].strip():
            keys.add(body["id"].strip())
    return keys


def _required_session_keys(doc: Mapping[str, Any], mutations: list[Any]) -> set[str]:
    keys: set[str] = set()
    for name in ("observations", "prompts"):
        for row in doc.get(name) or []:
            if isinstance(row, dict) and isinstance(row.get("session_id"), str) and row["session_id"].strip():
                keys.add(row["session_id"].strip())
    for row in mutations:
        if not isinstance(row, dict) or str(row.get("op") or "").strip() != UPSERT:
            continue
        if str(row.get("entity") or "").strip() not in (OBSERVATION, PROMPT):
            continue
        try:
            body = decode_mutation_payload(str(row.get("payload") or ""))
        except ChunkError:
            continue
        if isinstance(body, dict) and isinstance(body.get("session_id"), str) and body["session_id"].strip():
            keys.add(body["session_id"].strip())
    return keys


def canonicalize_for_project(data: Any, project: str) -> bytes:
    """chunkcodec.CanonicalizeForProject, returning the canonical bytes the chunk id is hashed from."""
    return go_json(canonical_document(data, project)).encode()


def canonical_document(data: Any, project: str) -> dict[str, Any] | None:
    """The chunk ``canonicalize_for_project`` serializes, for callers that also read it."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ChunkError(f"decode chunk data: json: cannot unmarshal {type(data).__name__} into map")
    doc = dict(data)
    has_mutations = "mutations" in doc
    owned: set[str] = set()
    required: set[str] = set()
    if has_mutations and doc["mutations"] is not None:
        if not isinstance(doc["mutations"], list):
            raise ChunkError("mutations must be an array")
        for index, row in enumerate(doc["mutations"]):
            if not isinstance(row, dict):
                raise ChunkError(f"mutations[{index}] must be an object")
        for name in ("observations", "prompts"):
            rows = doc.get(name)
            if rows is not None and not isinstance(rows, list):
                raise ChunkError(f"{name} must be an array")
        owned = _session_keys(doc["mutations"])
        required = _required_session_keys(doc, doc["mutations"])
    for name in ("sessions", "observations", "prompts"):
        if name not in doc:
            continue
        rows = doc[name]
        if rows is None:
            doc[name] = []
            continue
        if not isinstance(rows, list):
            raise ChunkError(f"{name} must be an array")
        rewritten = []
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ChunkError(f"{name}[{index}] must be an object")
            row = dict(row)
            if name == "sessions":
                raw_id = row.get("id")
                session_id = raw_id.strip() if isinstance(raw_id, str) else ""
                if not has_mutations or not session_id or session_id in owned or session_id in required:
                    row["project"] = project
            else:
                row["project"] = project
            rewritten.append(row)
        doc[name] = rewritten
    if has_mutations:
        rows = doc["mutations"] or []
        normalized = []
        for index, row in enumerate(rows):
            try:
                normalized.append(_normalize_chunk_mutation(row, project))
            except ChunkError as error:
                raise ChunkError(f"mutations[{index}]: {error}") from None
        doc["mutations"] = normalized
    return doc
