"""engram v1.20's cloud protocol over the fake's state: each operation returns a ``Reply`` (status and
body) in the order ``internal/cloud/cloudserver`` checks things, so the handlers only parse and
serialize. The per-entry push rules come from ``engram_contract.push_rules``, shared with inbox triage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram_sync_kit.engram_contract import ENTITIES, SESSION_REFERENCING_ENTITIES, payload_digest, push_rules
from engram_sync_kit.engram_contract.envelope import manifest_version
from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_kind
from engram_sync_kit.fake_cloud import chunkcodec
from engram_sync_kit.fake_cloud.chunkcodec import ChunkError
from engram_sync_kit.fake_cloud.raw_json import raw_payloads
from engram_sync_kit.fake_cloud.state import (
    FakeCloudState,
    JournalItem,
    StoredMutation,
    as_object,
    utc_now,
)
from engram_sync_kit.fake_cloud.wire import (
    NO_PRINCIPAL,
    PROJECT_REQUIRED,
    Reply,
    actionable,
    paused_reply,
    payload_invalid,
)

MAX_MUTATION_BATCH = push_rules.MAX_MUTATION_BATCH
DEFAULT_PULL_LIMIT = 100


def push_mutations(
    state: FakeCloudState, body: Any, *, store: bool = True, raw_body: bytes | None = None
) -> tuple[Reply, list[JournalItem]]:
    """POST /sync/mutations/push after auth and the size check, in the real server's order.

    ``store=False`` is the ack_without_store fault: the same answer, nothing kept. ``raw_body``: the
    body as sent, given when it may hold what Postgres refuses (push_rules.insert_refusal)."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        return Reply(
            400, "invalid request body: " + _decode_error(body, "cloudserver.mutationPushEnvelope")
        ), []
    entries = body.get("entries")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        return Reply(
            400,
            f"invalid request body: json: cannot unmarshal {go_kind(entries)} into Go struct field "
            "mutationPushEnvelope.entries of type []cloudstore.MutationEntry",
        ), []
    parsed: list[dict[str, Any]] = []
    for index, raw in enumerate(entries):
        entry, problem = _parse_entry(raw, index)
        if problem:
            return Reply(400, f"invalid request body: {problem}"), []
        parsed.append(entry)
    items = [_item_for(entry) for entry in parsed]
    if len(parsed) > MAX_MUTATION_BATCH:
        return Reply(400, f"batch too large: max {MAX_MUTATION_BATCH} entries per request"), items
    if not parsed:
        return actionable(
            400, "repairable", "empty_batch", "mutation batch must contain at least one entry"
        ), items
    if any(push_rules.project_refusal(entry["project"]) for entry in parsed):
        reply = actionable(400, "invalid_request", "empty_project", push_rules.EMPTY_PROJECT_REASON)
        return reply, items
    seen: set[str] = set()
    for entry in parsed:
        project = entry["project"].strip()
        if project not in seen:
            seen.add(project)
            denied = state.scope_denied(project)
            if denied:
                return denied, items
    primary = parsed[0]["project"].strip()
    for entry in parsed:
        if entry["project"].strip() in state.paused:
            return paused_reply(entry["project"].strip(), primary), items
    if state.server_version in push_rules.CANONICALIZING_SERVER_VERSIONS:
        raw = raw_payloads(raw_body) if raw_body is not None else None
        refused = _canonicalize_entries(parsed, raw or [], state.server_version)
        if refused is not None:
            return refused, items
    invalid = []
    for index, entry in enumerate(parsed):
        relation = push_rules.relation_refusal(entry["entity"], entry["op"], entry["payload"])
        if relation is not None:
            invalid.append({"entity": entry["entity"], "field": relation.field, "index": index})
    if invalid:
        reply_body = {
            "error": push_rules.INVALID_RELATION_REASON,
            "invalid": invalid,
            "reason_code": "validation_error",
        }
        return Reply(400, reply_body), items
    # The fast path materializes once; only a batch that fails asks push_rules entry by entry for the
    # real server's answer (the codec and push_rules share the rules, so they agree).
    try:
        chunks = _materialize_mutation_batch(parsed)
    except ChunkError:
        refused = _materialize_refusal(parsed)
        if refused is None:
            raise
        return refused, items
    if raw_body is not None:
        refused = _insert_refusal(parsed, raw_body, state.server_version)
        if refused is not None:
            return refused, items
    if not store:
        # The seqs a stored batch would have had; the next real push is given them again.
        first = state.next_seq
        return Reply(200, _accepted(list(range(first, first + len(parsed))), primary)), items
    seqs = []
    now = utc_now()  # one batch, one timestamp, like the real server's single transaction
    for entry, item in zip(parsed, items, strict=True):
        stored = state.store_mutation(
            entry["project"].strip(),
            entry["entity"].strip(),
            entry["entity_key"].strip(),
            entry["op"].strip(),
            entry["payload_text"],
            now,
        )
        seqs.append(stored.seq)
        state.receive(
            "mutation",
            stored.project,
            stored.entity,
            stored.entity_key,
            stored.op,
            entry["payload"],
            item.payload_digest or payload_digest({}),
        )
    for project, chunk in chunks:
        payload = chunkcodec.go_json(chunk).encode()
        state.store_chunk(project, chunkcodec.chunk_id(payload), "mutation-push", "", payload, chunk)
    return Reply(200, _accepted(seqs, primary)), items


def pull_mutations(state: FakeCloudState, since_seq: str | None, limit: str | None) -> Reply:
    if state.principal_required:
        return NO_PRINCIPAL
    since = _lenient_int(since_seq, 0)
    size = _lenient_int(limit, DEFAULT_PULL_LIMIT)
    if size <= 0:
        size = DEFAULT_PULL_LIMIT
    size = min(size, DEFAULT_PULL_LIMIT)
    allowed = None if state.allow_all else sorted(state.allowed)
    rows: list[StoredMutation] = []
    has_more = False
    if allowed is None or allowed:
        # A row's seq is its index + 1, so the rows after ``since`` start at index ``since``.
        for index in range(max(since - state.mutations_dropped, 0), len(state.mutations)):
            stored = state.mutations[index]
            if allowed is not None and stored.project not in state.allowed:
                continue
            if len(rows) == size:
                has_more = True
                break
            rows.append(stored)
    body = {
        "has_more": has_more,
        "latest_seq": rows[-1].seq if rows else 0,
        "mutations": [row.to_wire() for row in rows],
        "project": allowed[0] if allowed else "",
        "project_path": "",
        "project_source": "request_body",
    }
    return Reply(200, body)


def push_chunk(
    state: FakeCloudState,
    body: Any,
    query_project: str | None,
    *,
    store: bool = True,
    may_hold_nul: bool = True,
) -> tuple[Reply, list[JournalItem]]:
    """POST /sync/push after auth and the size check; ``store=False`` acknowledges and keeps nothing.
    ``may_hold_nul=False``: the body has no \\u0000 escape, so the chunk's write cannot fail on one."""
    if not isinstance(body, dict):
        return payload_invalid(f"invalid push payload: {_decode_error(body, CHUNK_PUSH_STRUCT)}"), []
    for name in ("chunk_id", "created_by", "client_created_at", "project"):
        if body.get(name) is not None and not isinstance(body[name], str):
            return payload_invalid(
                f"invalid push payload: json: cannot unmarshal {go_kind(body[name])} into Go struct field "
                f".{name} of type string"
            ), []
    if "data" not in body:
        return payload_invalid("data is required"), []
    data = body["data"]
    project = (body.get("project") or "").strip() or (query_project or "").strip()
    unpacked = _unpacked(data)  # digests every entry once; the journal and the store share them
    items = _with_project(unpacked, project or None)
    if not project:
        return PROJECT_REQUIRED, items
    project = chunkcodec.normalize_project(project)
    if not project:
        return PROJECT_REQUIRED, items
    items = _with_project(unpacked, project)
    denied = state.scope_denied(project)
    if denied:
        return denied, items
    if project in state.paused:
        return paused_reply(project, project), items
    try:
        chunk = chunkcodec.canonical_document(data, project)
        canonical = chunkcodec.go_json(chunk).encode()
        _validate_importable(chunk)
        _validate_session_references(chunk, set(state.sessions.get(project, {})))
    except ChunkError as error:
        return payload_invalid(f"invalid push payload: {error}"), items
    created_at = (body.get("client_created_at") or "").strip()
    if created_at and not _is_rfc3339(created_at):
        return payload_invalid("client_created_at must be RFC3339"), items
    chunk_id = chunkcodec.chunk_id(canonical)
    existing = state.chunks.get(project, {}).get(chunk_id)
    if existing is not None:
        if json.loads(existing.payload) != chunk:
            message = f'write chunk: cloudstore: chunk id conflict: existing chunk "{chunk_id}" has different payload'
            return actionable(409, "repairable", "upgrade_repairable_chunk_conflict", message), items
        return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items
    write_error = push_rules.chunk_write_refusal(chunk) if may_hold_nul else None
    if write_error is not None:
        return actionable(500, "blocked", "upgrade_blocked_internal", write_error), items
    if not store:
        return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items
    state.store_chunk(project, chunk_id, (body.get("created_by") or "").strip(), created_at, canonical, chunk)
    now = utc_now()
    for entity, key, op, payload in _materialized_entries(chunk):
        state.store_mutation(project, entity, key, op, chunkcodec.go_json(payload, sort_keys=False), now)
    for item, payload in unpacked:
        state.receive(
            "chunk",
            project,
            item.entity or "",
            item.entity_key or "",
            item.op or "",
            payload,
            item.payload_digest,
        )
    return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items


def manifest(state: FakeCloudState, project: str | None) -> Reply:
    normalized = chunkcodec.normalize_project(project or "")
    if not normalized:
        return PROJECT_REQUIRED
    denied = state.scope_denied(normalized)
    if denied:
        return denied
    chunks = [
        {
            "created_at": chunk.created_at,
            "created_by": chunk.created_by,
            "id": chunk.chunk_id,
            "memories": chunk.memories,
            "prompts": chunk.prompts,
            "sessions": chunk.sessions,
        }
        for chunk in state.chunks.get(normalized, {}).values()
    ]
    return Reply(200, {"chunks": chunks, "version": manifest_version(state.server_version)})


def read_chunk(state: FakeCloudState, project: str | None, chunk_id: str) -> Reply:
    normalized = chunkcodec.normalize_project(project or "")
    if not normalized:
        return PROJECT_REQUIRED
    denied = state.scope_denied(normalized)
    if denied:
        return denied
    chunk_id = chunk_id.strip()
    if not chunk_id:
        return Reply(400, "chunkID is required")
    chunk = state.chunks.get(normalized, {}).get(chunk_id)
    if chunk is None:
        return Reply(404, f'read chunk: cloudstore: chunk not found: "{chunk_id}"')
    return Reply(200, chunk.payload)


# How Go prints the anonymous struct the chunk push handler decodes its body into.
CHUNK_PUSH_STRUCT = (
    'struct { ChunkID string "json:\\"chunk_id\\""; CreatedBy string "json:\\"created_by\\""; '
    'ClientCreatedAt string "json:\\"client_created_at\\""; Project string "json:\\"project\\""; '
    'Data json.RawMessage "json:\\"data\\"" }'
)


def _decode_error(value: Any, target: str) -> str:
    return f"json: cannot unmarshal {go_kind(value)} into Go value of type {target}"


def _parse_entry(raw: Any, index: int) -> tuple[dict[str, Any], str | None]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return {}, (
            f"json: cannot unmarshal {go_kind(raw)} into Go struct field mutationPushEnvelope.entries "
            "of type cloudstore.MutationEntry"
        )
    entry: dict[str, Any] = {}
    for name in ("project", "entity", "entity_key", "op"):
        value = raw.get(name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            return (
                {},
                f"json: cannot unmarshal {go_kind(value)} into Go struct field MutationEntry.entries.{name} "
                "of type string",
            )
        entry[name] = value
    payload = raw.get("payload")
    entry["payload"] = payload
    entry["payload_text"] = "{}" if payload is None else chunkcodec.go_json(payload, sort_keys=False)
    return entry, None


def _item_for(entry: Mapping[str, Any]) -> JournalItem:
    payload = entry["payload"]
    return JournalItem(
        project=entry["project"] or None,
        entity=entry["entity"] or None,
        entity_key=entry["entity_key"] or None,
        op=entry["op"] or None,
        payload_digest=None if payload is None else payload_digest(payload),
    )


def _lenient_int(raw: str | None, default: int) -> int:
    try:
        return int((raw or "").strip())
    except ValueError:
        return default


def _accepted(seqs: list[int], primary: str) -> dict[str, Any]:
    return {"accepted_seqs": seqs, "project": primary, "project_path": "", "project_source": "request_body"}


def _canonicalize_entries(
    entries: list[dict[str, Any]], raw: Sequence[bytes | None], version: str
) -> Reply | None:
    """v2/v3 (predicted from source): every entry canonicalized before the insert, in place (the stored
    payload is the canonical one); the whole batch refused with 400 if any entry cannot be. ``raw``: each
    entry's payload as sent (v3 first refuses one that is not UTF-8)."""
    invalid = []
    for index, entry in enumerate(entries):
        sent = raw[index] if index < len(raw) else None
        if push_rules.payload_is_refused_utf8(sent, version):
            invalid.append({"entity": entry["entity"].strip(), "field": "payload", "index": index})
            continue
        try:
            payload, text = push_rules.canonical_entry(
                project=entry["project"],
                entity=entry["entity"],
                entity_key=entry["entity_key"],
                op=entry["op"],
                payload=entry["payload"],
            )
        except ContractError as error:
            invalid.append({"entity": entry["entity"].strip(), "field": error.field, "index": index})
            continue
        entry["payload"], entry["payload_text"] = payload, text
    if not invalid:
        return None
    body = {
        **payload_invalid(push_rules.INVALID_MUTATION_REASON).body,
        "reason_code": "validation_error",
        "invalid": invalid,
    }
    return Reply(400, body)


def _materialize_refusal(entries: Sequence[Mapping[str, Any]]) -> Reply | None:
    """v1.20's 500 for a batch its insert cannot materialize, worded as the real server words it.

    The insert works per project: it decodes each upsert into engram's store struct, then canonicalizes
    the project's chunk, where ``mutations[i]`` counts that project's entries of known entities."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["project"].strip(), []).append(entry)
    for project, batch in groups.items():
        canonicalize_error = None
        index = -1  # mutations[i] counts only the entities the chunk codec knows
        for entry in batch:
            if entry["entity"].strip() in push_rules.SUPPORTED_OPS:
                index += 1
            refusal = push_rules.payload_refusal(
                project=project,
                entity=entry["entity"],
                entity_key=entry["entity_key"],
                op=entry["op"],
                payload=entry["payload"],
            )
            if refusal is None:
                continue
            if refusal.reason.startswith("materialize mutation batch"):
                return Reply(refusal.status, f"insert mutations: cloudstore: {refusal.reason}")
            if canonicalize_error is None:
                canonicalize_error = Reply(
                    refusal.status,
                    "insert mutations: cloudstore: canonicalize materialized mutation batch chunk: "
                    f"mutations[{index}]: {refusal.reason}",
                )
        if canonicalize_error is not None:
            return canonicalize_error
    return None


def _insert_refusal(entries: Sequence[Mapping[str, Any]], raw_body: bytes, version: str) -> Reply | None:
    """v1.20's 500 for the first entry, in batch order, whose INSERT Postgres refuses: each payload is
    judged on the bytes sent (v2/v3, predicted: a known entity's canonical text; v3 names the entry)."""
    raw = raw_payloads(raw_body) or []
    for index, entry in enumerate(entries):
        sent = raw[index] if index < len(raw) else None
        canonical = version in push_rules.CANONICALIZING_SERVER_VERSIONS
        if canonical and entry["entity"].strip() in push_rules.SUPPORTED_OPS:
            sent = None
        if sent is None:
            sent = entry["payload_text"].encode("utf-8", "surrogatepass")
        refusal = push_rules.insert_refusal(
            project=entry["project"].strip(),
            entity=entry["entity"].strip(),
            entity_key=entry["entity_key"].strip(),
            op=entry["op"].strip(),
            payload=sent,
        )
        if refusal is None:
            continue
        if version in push_rules.NAMING_INSERT_FAILURE_SERVER_VERSIONS:
            reason = push_rules.entry_insert_failure_reason(index, entry["entity"], entry["entity_key"])
            return Reply(refusal.status, reason)
        return Reply(refusal.status, f"insert mutations: cloudstore: {refusal.reason}")
    return None


def _materialize_mutation_batch(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The chunk the real server derives per project from a mutation push (created_by 'mutation-push')."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["project"].strip(), []).append(entry)
    out = []
    for project, batch in groups.items():
        chunk: dict[str, Any] = {"sessions": [], "observations": [], "prompts": [], "mutations": []}
        for entry in batch:
            entity = entry["entity"].strip()
            if entity not in ENTITIES:
                continue
            chunk["mutations"].append(
                {
                    "seq": 0,
                    "target_key": "",
                    "entity": entity,
                    "entity_key": entry["entity_key"].strip(),
                    "op": entry["op"].strip(),
                    "payload": entry["payload_text"],
                    "source": "",
                    "project": project,
                    "occurred_at": "",
                }
            )
            if entry["op"].strip() != "upsert" or entity == "relation":
                continue
            payload = entry["payload"]
            if payload is not None and not isinstance(payload, dict):
                raise ChunkError(f"materialize mutation batch {entity}: payload is not an object")
            if payload:
                push_rules.check_store_fields(entity, entry["entity_key"].strip(), payload)
            row = dict(payload or {})
            id_field = "id" if entity == "session" else "sync_id"
            if not str(row.get(id_field) or "").strip():
                row[id_field] = entry["entity_key"].strip()
            chunk[entity + "s"].append(row)
        if not chunk["mutations"]:
            continue
        canonical = chunkcodec.canonical_document(chunk, project)
        assert canonical is not None
        out.append((project, canonical))
    return out


_CHUNK_ROW_STRUCTS = {"sessions": "session", "observations": "observation", "prompts": "prompt"}
_REQUIRED_CHUNK_FIELDS = {
    "sessions": ("id", "directory"),
    "observations": ("sync_id", "session_id", "type", "title", "content", "scope"),
    "prompts": ("sync_id", "session_id", "content"),
}


_GO_KINDS = {"string": "string", "int": "number", "bool": "bool"}


def _validate_importable(chunk: Any) -> None:
    if not isinstance(chunk, dict):
        return
    for name, entity in _CHUNK_ROW_STRUCTS.items():
        for row in chunk.get(name) or []:
            for field_name, value in row.items():
                go_type = push_rules.STORE_FIELDS[entity].get(field_name)
                if go_type is not None and value is not None and go_kind(value) != _GO_KINDS[go_type]:
                    raise ChunkError(
                        f"chunk schema: json: cannot unmarshal {go_kind(value)} into Go struct field "
                        f"{entity.capitalize()}.{name}.{field_name} of type {go_type}"
                    )
    for name, required in _REQUIRED_CHUNK_FIELDS.items():
        for index, row in enumerate(chunk.get(name) or []):
            for field_name in required:
                value = row.get(field_name)
                if not (value or "").strip():
                    raise ChunkError(f"{name}[{index}].{field_name} is required")


def _validate_session_references(chunk: Any, known: set[str]) -> None:
    if not isinstance(chunk, dict):
        return
    present = set(known) | {str(row.get("id") or "").strip() for row in chunk.get("sessions") or []}
    for index, mutation in enumerate(chunk.get("mutations") or []):
        if mutation["entity"] != "session" or mutation["op"] != "upsert":
            continue
        body = chunkcodec.decode_mutation_payload(mutation["payload"])
        session_id = str(body.get("id") or "").strip() or mutation["entity_key"].strip()
        if not session_id:
            raise ChunkError(f"mutations[{index}].payload.id is required for session upsert")
        present.add(session_id)
    for name in ("observations", "prompts"):
        for index, row in enumerate(chunk.get(name) or []):
            session_id = str(row.get("session_id") or "").strip()
            if session_id not in present:
                raise ChunkError(f'{name}[{index}] references missing session_id "{session_id}"')
    for index, mutation in enumerate(chunk.get("mutations") or []):
        if mutation["entity"] not in SESSION_REFERENCING_ENTITIES or mutation["op"] != "upsert":
            continue
        body = chunkcodec.decode_mutation_payload(mutation["payload"])
        session_id = str(body.get("session_id") or "").strip()
        if not session_id:
            raise ChunkError(f"mutations[{index}].payload.session_id is required for upsert")
        if session_id not in present:
            raise ChunkError(f'mutations[{index}] references missing session_id "{session_id}"')


def _materialized_entries(chunk: Any) -> list[tuple[str, str, str, Any]]:
    """What the real server adds to the pullable mutation log for a pushed chunk."""
    if not isinstance(chunk, dict):
        return []
    out: list[tuple[str, str, str, Any]] = []
    for entity, name, key_field in (
        ("session", "sessions", "id"),
        ("observation", "observations", "sync_id"),
        ("prompt", "prompts", "sync_id"),
    ):
        for row in chunk.get(name) or []:
            out.append((entity, str(row.get(key_field) or "").strip(), "upsert", row))
    for mutation in chunk.get("mutations") or []:
        if mutation["entity"] == "relation":
            payload = json.loads(mutation["payload"]) if mutation["payload"].strip() else {}
            out.append(("relation", mutation["entity_key"], mutation["op"] or "upsert", payload))
    return out


def _unpacked(data: Any) -> list[tuple[JournalItem, Any]]:
    """A chunk's entries for the journal: its ``mutations`` when it has them, else its typed rows."""
    if not isinstance(data, dict):
        return []
    out: list[tuple[JournalItem, Any]] = []
    mutations = data.get("mutations")
    if isinstance(mutations, list) and mutations:
        for row in mutations:
            if not isinstance(row, dict):
                continue
            payload = row.get("payload")
            decoded = as_object(payload)
            item = JournalItem(
                project=None,
                entity=_str_or_none(row.get("entity")),
                entity_key=_str_or_none(row.get("entity_key")),
                op=_str_or_none(row.get("op")),
                payload_digest=payload_digest(decoded),
            )
            out.append((item, decoded))
        return out
    for entity, name, key_field in (
        ("session", "sessions", "id"),
        ("observation", "observations", "sync_id"),
        ("prompt", "prompts", "sync_id"),
    ):
        rows = data.get(name)
        if not isinstance(rows, list):
            continue
        for row in rows:
            if isinstance(row, dict):
                item = JournalItem(
                    None, entity, _str_or_none(row.get(key_field)), "upsert", payload_digest(row)
                )
                out.append((item, row))
    return out


def _with_project(unpacked: list[tuple[JournalItem, Any]], project: str | None) -> list[JournalItem]:
    return [
        JournalItem(project, item.entity, item.entity_key, item.op, item.payload_digest)
        for item, _ in unpacked
    ]


def _str_or_none(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _is_rfc3339(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value and (value.endswith("Z") or (len(value) > 6 and value[-6] in "+-"))
