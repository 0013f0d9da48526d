"""Chunk canonicalization as engram v1.20's server does it, so chunk ids match the real client's.

The client and the server both rewrite a pushed chunk for its project and hash the result; the chunk id
is the first 8 hex digits of that sha256. Go's encoding/json sorts map keys, writes compact JSON and
escapes <, > and & as \\u003c, \\u003e and \\u0026, which ``engram_contract.go_json`` reproduces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_json, go_kind
from engram_sync_kit.engram_contract.names import normalize_project
from engram_sync_kit.engram_contract.push_rules import (
    DELETE,
    OBSERVATION,
    PROMPT,
    RELATION,
    SESSION,
    SUPPORTED_OPS,
    UPSERT,
    decode_mutation_payload,
    normalize_mutation_payload,
)

# The payload rules themselves live in engram_contract.push_rules, shared with inbox triage.
ChunkError = ContractError


def chunk_id(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()[:8]


def _normalize_chunk_mutation(row: Mapping[str, Any], project: str) -> dict[str, Any]:
    def field(name: str) -> str:
        value = row.get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ChunkError(f"decode mutation: json: cannot unmarshal {go_kind(value)} into field {name}")
        return value

    entity, entity_key, op = field("entity").strip(), field("entity_key").strip(), field("op").strip()
    payload = field("payload").strip()
    for name in ("target_key", "source", "occurred_at"):
        field(name)
    if op not in SUPPORTED_OPS.get(entity, ()):
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
        raise ChunkError(
            f"decode chunk data: json: cannot unmarshal {go_kind(data)} into Go value of type "
            "map[string]interface {}"
        )
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


__all__ = [
    "DELETE",
    "OBSERVATION",
    "PROMPT",
    "RELATION",
    "SESSION",
    "UPSERT",
    "ChunkError",
    "canonical_document",
    "canonicalize_for_project",
    "chunk_id",
    "decode_mutation_payload",
    "go_json",
    "normalize_mutation_payload",
    "normalize_project",
]
