"""The fake cloud's state and rules, with no HTTP: what the handlers in ``app`` call.

Each protocol operation returns a ``Reply`` (status and body) in the order engram v1.20's
``internal/cloud/cloudserver`` checks things, so the handlers only parse and serialize.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Literal, TypeVar

from engram_contract import payload_digest, push_rules
from fake_cloud import chunkcodec
from fake_cloud.chunkcodec import ChunkError
from fake_cloud.errors import FakeCloudError
from fake_cloud.wire import (
    FORBIDDEN,
    NO_PRINCIPAL,
    PROJECT_REQUIRED,
    Reply,
    actionable,
    paused_reply,
    payload_invalid,
    too_large,
)

MAX_MUTATION_BATCH = push_rules.MAX_MUTATION_BATCH
DEFAULT_PULL_LIMIT = 100
DEFAULT_MAX_PUSH_BYTES = 8 * 1024 * 1024
DEFAULT_JOURNAL_LIMIT = 100_000

DEFAULT_STORE_LIMIT = 200_000
BODILESS_STATUSES = frozenset({204, 304})  # and 1xx, below the fault API's range: no final answer

Transport = Literal["mutation", "chunk", "other"]
E = TypeVar("E", bound=Enum)


class Route(str, Enum):
    MUTATIONS_PUSH = "mutations_push"
    MUTATIONS_PULL = "mutations_pull"
    CHUNK_PUSH = "chunk_push"
    CHUNK_PULL = "chunk_pull"
    ANY = "any"


class FaultAction(str, Enum):
    STATUS = "status"
    LATENCY = "latency"
    RESET_AFTER_READ = "reset_after_read"
    SHORT_ACCEPTED = "short_accepted"
    HANG = "hang"
    # Answer 200 exactly as normal, journal it, store nothing: the silent loss of engram #264/#298.
    ACK_WITHOUT_STORE = "ack_without_store"


class InvalidControlRequest(FakeCloudError):
    """A control API request the fake cannot act on; the message says what is allowed."""


@dataclass
class Fault:
    """One scheduled misbehaviour, consumed ``times`` times by the requests it matches."""

    route: Route = Route.ANY
    action: FaultAction = FaultAction.STATUS
    project: str | None = None
    times: int = 1
    status: int = 503
    latency_ms: int = 200
    keep: int = 0
    seconds: float = 5.0

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "fault") -> Fault:
        if not isinstance(raw, Mapping):
            raise InvalidControlRequest(f"{where}: expected an object, got {type(raw).__name__}")
        known = {"route", "action", "project", "times", "status", "latency_ms", "keep", "seconds"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidControlRequest(f"{where}: unknown field(s) {unknown}; allowed: {sorted(known)}")
        route = _member(Route, raw.get("route", "any"), f"{where}.route")
        action = _member(FaultAction, raw.get("action", "status"), f"{where}.action")
        project = raw.get("project")
        if project is not None and not isinstance(project, str):
            raise InvalidControlRequest(f"{where}.project: expected a string or null")
        fault = cls(route=route, action=action, project=project)
        for name, low, high in (("times", 1, 1_000_000), ("status", 200, 599), ("latency_ms", 0, 600_000)):
            if name in raw:
                setattr(fault, name, _int_in(raw[name], low, high, f"{where}.{name}"))
        if fault.status in BODILESS_STATUSES:
            raise InvalidControlRequest(
                f"{where}.status: {fault.status} cannot carry the fault's error body; use 200 or 205-599 "
                "except 304"
            )
        if "keep" in raw:
            fault.keep = _int_in(raw["keep"], 0, MAX_MUTATION_BATCH, f"{where}.keep")
        if "seconds" in raw:
            value = raw["seconds"]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 600:
                raise InvalidControlRequest(
                    f"{where}.seconds: expected a number from 0 to 600, got {value!r}"
                )
            fault.seconds = float(value)
        return fault

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["route"], out["action"] = self.route.value, self.action.value
        return out

    def matches(self, route: Route, projects: Sequence[str]) -> bool:
        if self.route not in (Route.ANY, route):
            return False
        return self.project is None or self.project in projects


def _member(kind: type[E], value: Any, where: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise InvalidControlRequest(f"{where}: {value!r} is not one of {[m.value for m in kind]}") from None


def _int_in(value: Any, low: int, high: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidControlRequest(f"{where}: expected an integer from {low} to {high}, got {value!r}")
    return int(value)


def _shallow_dict(record: JournalEntry | ReceivedMutation) -> dict[str, Any]:
    # Shallow on purpose: asdict's deep copy dominates serializing a big journal.
    return {name: getattr(record, name) for name in record.__slots__}


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int
    time: float
    request_id: str
    transport: Transport
    method: str
    path: str
    status: int
    project: str | None = None
    entity: str | None = None
    entity_key: str | None = None
    op: str | None = None
    payload_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _shallow_dict(self)


@dataclass(frozen=True, slots=True)
class ReceivedMutation:
    """A mutation the fake accepted and stored; ``seq`` is its place in the order of receipt."""

    seq: int
    transport: Transport
    project: str
    entity: str
    entity_key: str
    op: str
    payload: dict[str, Any]
    payload_digest: str

    def to_dict(self) -> dict[str, Any]:
        return _shallow_dict(self)


@dataclass(frozen=True, slots=True)
class JournalItem:
    """What a request carried, before the fake knows the status it answers with."""

    project: str | None = None
    entity: str | None = None
    entity_key: str | None = None
    op: str | None = None
    payload_digest: str | None = None


@dataclass(slots=True)
class StoredMutation:
    seq: int
    project: str
    entity: str
    entity_key: str
    op: str
    payload: str  # raw JSON text, served back verbatim on pull
    occurred_at: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "project": self.project,
            "entity": self.entity,
            "entity_key": self.entity_key,
            "op": self.op,
            "payload": json.loads(self.payload),
            "occurred_at": self.occurred_at,
        }


@dataclass(slots=True)
class StoredChunk:
    chunk_id: str
    created_by: str
    created_at: str
    payload: bytes
    sessions: int
    memories: int
    prompts: int


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCloudState:
    """Everything the fake remembers. Not thread-safe: one event loop owns it."""

    def __init__(
        self,
        *,
        token: str | None,
        allowed_projects: Iterable[str] = ("*",),
        journal_limit: int = DEFAULT_JOURNAL_LIMIT,
        max_push_bytes: int = DEFAULT_MAX_PUSH_BYTES,
        principal_required: bool = False,
        store_limit: int = DEFAULT_STORE_LIMIT,
    ) -> None:
        if journal_limit < 1:
            raise FakeCloudError(f"journal_limit must be at least 1, got {journal_limit}")
        if store_limit < 1:
            raise FakeCloudError(f"store_limit must be at least 1, got {store_limit}")
        self.store_limit = store_limit
        self.epoch = 0
        # Never restarted, not even by reset: a request id names one request for the process's life.
        self._next_request = 1
        if max_push_bytes < 1:
            raise FakeCloudError(f"max_push_bytes must be at least 1, got {max_push_bytes}")
        self.token = token.strip() if token else None
        self.journal_limit = journal_limit
        self.max_push_bytes = max_push_bytes
        # v1.20's insecure no-auth mode still checks for a principal, which no request has: every
        # project-scoped step answers 403 "principal is required".
        self.principal_required = principal_required
        self._initial_allowlist = list(allowed_projects)
        self.reset()

    # ----- state -----

    def reset(self) -> list[Any]:
        """Start over; returns the old containers so the caller can free them off the hot path."""
        garbage = [
            getattr(self, name, None)
            for name in ("mutations", "chunks", "received", "journal", "sessions", "_chunk_order")
        ]
        self.epoch += 1
        self.set_allowlist(self._initial_allowlist)
        self.paused: set[str] = set()
        # Bounded like the journal: past store_limit the oldest go, and the *_dropped counters say how many.
        self.mutations: list[StoredMutation] = []  # mutations[i].seq == mutations_dropped + i + 1
        self.mutations_dropped = 0
        self.received: list[ReceivedMutation] = []  # the same numbering with received_dropped
        self.received_dropped = 0
        self.chunks: dict[str, dict[str, StoredChunk]] = {}
        self._chunk_order: deque[tuple[str, str]] = deque()
        self.chunks_dropped = 0
        self.sessions: dict[str, dict[str, None]] = {}  # per project, oldest first
        self.journal: deque[JournalEntry] = deque(maxlen=self.journal_limit)
        self.faults: list[Fault] = []
        self._next_journal_id = 1
        return garbage

    def stats(self) -> dict[str, Any]:
        """How full each bounded store is and how much it has dropped since the last reset."""
        return {
            "epoch": self.epoch,
            "store_limit": self.store_limit,
            "journal": {"kept": len(self.journal), "dropped": self.overflow, "limit": self.journal_limit},
            "mutations": {"kept": len(self.mutations), "dropped": self.mutations_dropped},
            "received": {"kept": len(self.received), "dropped": self.received_dropped},
            "chunks": {"kept": len(self._chunk_order), "dropped": self.chunks_dropped},
        }

    def received_since(self, since_seq: int) -> list[ReceivedMutation]:
        return self.received[max(since_seq - self.received_dropped, 0) :]

    @property
    def next_seq(self) -> int:
        return self.mutations_dropped + len(self.mutations) + 1

    def _trim(self, name: str) -> None:
        rows: list[Any] = getattr(self, name)
        if len(rows) > self.store_limit:
            # Trim in slices, not one row per append: deleting from a list's head costs its length.
            excess = len(rows) - self.store_limit + self.store_limit // 8
            del rows[:excess]
            setattr(self, f"{name}_dropped", getattr(self, f"{name}_dropped") + excess)

    def set_allowlist(self, projects: Iterable[str]) -> None:
        self.allow_all = False
        self.allowed: set[str] = set()
        for project in projects:
            if project.strip() == "*":
                self.allow_all = True
                self.allowed = set()
                return
            normalized = chunkcodec.normalize_project(project)
            if normalized:
                self.allowed.add(normalized)

    def allowlist(self) -> list[str]:
        return ["*"] if self.allow_all else sorted(self.allowed)

    def set_paused(self, project: str, paused: bool) -> None:
        project = project.strip()
        if paused:
            self.paused.add(project)
        else:
            self.paused.discard(project)

    def scope_denied(self, project: str) -> Reply | None:
        """The real authorizeProjectScope: the 403 for this project, or None when it may pass."""
        if self.principal_required:
            return NO_PRINCIPAL
        normalized = chunkcodec.normalize_project(project)
        if normalized and (self.allow_all or normalized in self.allowed):
            return None
        return FORBIDDEN

    def check_bearer(self, header: str | None) -> str | None:
        """The 401 text the real server answers with, or None when the request may pass."""
        if self.token is None:
            return None
        header = (header or "").strip()
        if not header:
            return "unauthorized: missing authorization header"
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return "unauthorized: authorization must use Bearer token"
        if parts[1] != self.token:
            return "unauthorized: unknown token"
        return None

    def new_request_id(self) -> str:
        request_id = f"r{self._next_request}"
        self._next_request += 1
        return request_id

    # ----- journal -----

    def record(
        self,
        *,
        request_id: str,
        transport: Transport,
        method: str,
        path: str,
        status: int,
        items: Sequence[JournalItem] = (),
    ) -> list[JournalEntry]:
        now = time.time()
        written = []
        for item in items or (JournalItem(),):
            entry = JournalEntry(
                id=self._next_journal_id,
                time=now,
                request_id=request_id,
                transport=transport,
                method=method,
                path=path,
                status=status,
                project=item.project,
                entity=item.entity,
                entity_key=item.entity_key,
                op=item.op,
                payload_digest=item.payload_digest,
            )
            self._next_journal_id += 1
            self.journal.append(entry)
            written.append(entry)
        return written

    @property
    def overflow(self) -> int:
        """How many entries the bounded journal has dropped since the last reset."""
        return self._next_journal_id - 1 - len(self.journal)

    def journal_since(self, since_id: int = 0) -> list[JournalEntry]:
        if not self.journal or self.journal[-1].id <= since_id:
            return []
        if since_id < self.journal[0].id:
            return list(self.journal)
        # Ids are consecutive, so the position of since_id is known without a scan.
        start = since_id - self.journal[0].id + 1
        return [self.journal[i] for i in range(start, len(self.journal))]

    def matching(self, match: Mapping[str, Any], since_id: int = 0) -> list[JournalEntry]:
        return [entry for entry in self.journal_since(since_id) if _mismatches(entry, match) == []]

    def closest(self, match: Mapping[str, Any], since_id: int = 0, limit: int = 5) -> list[dict[str, Any]]:
        ranked = sorted(
            ((len(_mismatches(entry, match)), -entry.id, entry) for entry in self.journal_since(since_id)),
            key=lambda item: (item[0], item[1]),
        )
        return [
            {**entry.to_dict(), "mismatched": _mismatches(entry, match)} for _, _, entry in ranked[:limit]
        ]

    # ----- faults -----

    def add_faults(self, faults: Iterable[Fault]) -> None:
        self.faults.extend(faults)

    def take_fault(self, route: Route, projects: Sequence[str]) -> Fault | None:
        """The first scheduled fault matching this request, consumed once."""
        for fault in self.faults:
            if fault.matches(route, projects):
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    # ----- mutation protocol -----

    def push_mutations(self, body: Any, *, store: bool = True) -> tuple[Reply, list[JournalItem]]:
        """POST /sync/mutations/push after auth and the size check, in the real server's order.

        ``store=False`` is the ack_without_store fault: the same answer, nothing kept."""
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
            return Reply(400, "invalid request body: json: cannot unmarshal entries into a list"), []
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
                denied = self.scope_denied(project)
                if denied:
                    return denied, items
        primary = parsed[0]["project"].strip()
        for entry in parsed:
            if entry["project"].strip() in self.paused:
                return paused_reply(entry["project"].strip(), primary), items
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
        refused = _materialize_refusal(parsed)
        if refused is not None:
            return refused, items
        chunks = _materialize_mutation_batch(parsed)
        if not store:
            # The seqs a stored batch would have had; the next real push is given them again.
            first = self.next_seq
            return Reply(200, _accepted(list(range(first, first + len(parsed))), primary)), items
        seqs = []
        now = _utc_now()  # one batch, one timestamp, like the real server's single transaction
        for entry, item in zip(parsed, items, strict=True):
            stored = self._store_mutation(
                entry["project"].strip(),
                entry["entity"].strip(),
                entry["entity_key"].strip(),
                entry["op"].strip(),
                entry["payload_text"],
                now,
            )
            seqs.append(stored.seq)
            self._receive(
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
            self._store_chunk(project, chunkcodec.chunk_id(payload), "mutation-push", "", payload, chunk)
        return Reply(200, _accepted(seqs, primary)), items

    def pull_mutations(self, since_seq: str | None, limit: str | None) -> Reply:
        if self.principal_required:
            return NO_PRINCIPAL
        since = _lenient_int(since_seq, 0)
        size = _lenient_int(limit, DEFAULT_PULL_LIMIT)
        if size <= 0:
            size = DEFAULT_PULL_LIMIT
        size = min(size, DEFAULT_PULL_LIMIT)
        allowed = None if self.allow_all else sorted(self.allowed)
        rows: list[StoredMutation] = []
        has_more = False
        if allowed is None or allowed:
            # A row's seq is its index + 1, so the rows after ``since`` start at index ``since``.
            for index in range(max(since - self.mutations_dropped, 0), len(self.mutations)):
                stored = self.mutations[index]
                if allowed is not None and stored.project not in self.allowed:
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

    # ----- chunk protocol -----

    def push_chunk(
        self, body: Any, query_project: str | None, *, store: bool = True
    ) -> tuple[Reply, list[JournalItem]]:
        """POST /sync/push after auth and the size check; ``store=False`` acknowledges and keeps nothing."""
        if not isinstance(body, dict):
            return payload_invalid(f"invalid push payload: {_decode_error(body, 'struct')}"), []
        for name in ("chunk_id", "created_by", "client_created_at", "project"):
            if body.get(name) is not None and not isinstance(body[name], str):
                return payload_invalid(
                    f"invalid push payload: json: cannot unmarshal {type(body[name]).__name__} into field {name} of type string"
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
        denied = self.scope_denied(project)
        if denied:
            return denied, items
        if project in self.paused:
            return paused_reply(project, project), items
        try:
            chunk = chunkcodec.canonical_document(data, project)
            canonical = chunkcodec.go_json(chunk).encode()
            _validate_importable(chunk)
            _validate_session_references(chunk, set(self.sessions.get(project, {})))
        except ChunkError as error:
            return payload_invalid(f"invalid push payload: {error}"), items
        created_at = (body.get("client_created_at") or "").strip()
        if created_at and not _is_rfc3339(created_at):
            return payload_invalid("client_created_at must be RFC3339"), items
        chunk_id = chunkcodec.chunk_id(canonical)
        existing = self.chunks.get(project, {}).get(chunk_id)
        if existing is not None:
            if json.loads(existing.payload) != chunk:
                message = f'write chunk: cloudstore: chunk id conflict: existing chunk "{chunk_id}" has different payload'
                return actionable(409, "repairable", "upgrade_repairable_chunk_conflict", message), items
            return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items
        if not store:
            return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items
        self._store_chunk(
            project, chunk_id, (body.get("created_by") or "").strip(), created_at, canonical, chunk
        )
        now = _utc_now()
        for entity, key, op, payload in _materialized_entries(chunk):
            self._store_mutation(project, entity, key, op, chunkcodec.go_json(payload, sort_keys=False), now)
        for item, payload in unpacked:
            self._receive(
                "chunk",
                project,
                item.entity or "",
                item.entity_key or "",
                item.op or "",
                payload,
                item.payload_digest,
            )
        return Reply(200, {"chunk_id": chunk_id, "status": "ok"}), items

    def manifest(self, project: str | None) -> Reply:
        normalized = chunkcodec.normalize_project(project or "")
        if not normalized:
            return PROJECT_REQUIRED
        denied = self.scope_denied(normalized)
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
            for chunk in self.chunks.get(normalized, {}).values()
        ]
        return Reply(200, {"chunks": chunks, "version": 1})

    def read_chunk(self, project: str | None, chunk_id: str) -> Reply:
        normalized = chunkcodec.normalize_project(project or "")
        if not normalized:
            return PROJECT_REQUIRED
        denied = self.scope_denied(normalized)
        if denied:
            return denied
        chunk_id = chunk_id.strip()
        if not chunk_id:
            return Reply(400, "chunkID is required")
        chunk = self.chunks.get(normalized, {}).get(chunk_id)
        if chunk is None:
            return Reply(404, f'read chunk: cloudstore: chunk not found: "{chunk_id}"')
        return Reply(200, chunk.payload)

    # ----- storage -----

    def _store_mutation(
        self, project: str, entity: str, key: str, op: str, payload_text: str, occurred_at: str
    ) -> StoredMutation:
        seq = self.next_seq
        stored = StoredMutation(seq, project, entity, key, op, payload_text or "{}", occurred_at)
        self.mutations.append(stored)
        self._trim("mutations")
        return stored

    def _store_chunk(
        self,
        project: str,
        chunk_id: str,
        created_by: str,
        created_at: str,
        payload: bytes,
        chunk: dict[str, Any] | None,
    ) -> None:
        """Store a chunk given as its canonical bytes and the document they encode."""
        per_project = self.chunks.setdefault(project, {})
        if chunk_id in per_project:
            return
        when = _rfc3339_utc(created_at) if created_at else _utc_now()
        per_project[chunk_id] = StoredChunk(chunk_id, created_by, when, payload, *_chunk_counts(chunk))
        self._chunk_order.append((project, chunk_id))
        while len(self._chunk_order) > self.store_limit:
            old_project, old_id = self._chunk_order.popleft()
            self.chunks[old_project].pop(old_id, None)
            self.chunks_dropped += 1
        known = self.sessions.setdefault(project, {})
        known.update(dict.fromkeys(_session_ids(chunk)))
        while len(known) > self.store_limit:
            del known[next(iter(known))]

    def _receive(
        self,
        transport: Transport,
        project: str,
        entity: str,
        key: str,
        op: str,
        payload: Any,
        digest: str | None,
    ) -> None:
        decoded = _as_object(payload)
        if digest is None:
            digest = payload_digest(decoded)
        self.received.append(
            ReceivedMutation(
                seq=self.received_dropped + len(self.received) + 1,
                transport=transport,
                project=project,
                entity=entity,
                entity_key=key,
                op=op,
                payload=decoded,
                payload_digest=digest,
            )
        )
        self._trim("received")


# ----- helpers (pure functions) -----


def _mismatches(entry: JournalEntry, match: Mapping[str, Any]) -> list[str]:
    # Attribute reads, not to_dict(): /_fake/wait runs this for every new entry while a test waits.
    return sorted(
        name
        for name, wanted in match.items()
        if (getattr(entry, name) if name in MATCH_FIELDS else None) != wanted
    )


MATCH_FIELDS = frozenset(JournalEntry.__dataclass_fields__)


def _decode_error(value: Any, target: str) -> str:
    return f"json: cannot unmarshal {type(value).__name__} into Go value of type {target}"


def _parse_entry(raw: Any, index: int) -> tuple[dict[str, Any], str | None]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return {}, f"json: cannot unmarshal {type(raw).__name__} into entries[{index}]"
    entry: dict[str, Any] = {}
    for name in ("project", "entity", "entity_key", "op"):
        value = raw.get(name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            return (
                {},
                f"json: cannot unmarshal {type(value).__name__} into entries[{index}].{name} of type string",
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


def _as_object(payload: Any) -> dict[str, Any]:
    if payload is None:
        return {}  # stored as "{}", like the real server
    try:
        decoded = chunkcodec.decode_mutation_payload(payload)
    except ChunkError:
        return {"_raw": payload}
    return decoded if isinstance(decoded, dict) else {"_value": decoded}


def _accepted(seqs: list[int], primary: str) -> dict[str, Any]:
    return {"accepted_seqs": seqs, "project": primary, "project_path": "", "project_source": "request_body"}


def _materialize_refusal(entries: Sequence[Mapping[str, Any]]) -> Reply | None:
    """v1.20's 500 for a batch its insert cannot materialize, worded as the real server words it.

    The insert works per project: it decodes each upsert into engram's store struct, then canonicalizes
    the project's chunk, where ``mutations[i]`` counts that project's entries of known entities."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["project"].strip(), []).append(entry)
    insert_error = None
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
            if refusal.reason == push_rules.POSTGRES_JSON_REASON:
                insert_error = insert_error or Reply(
                    refusal.status, f"insert mutations: cloudstore: {refusal.reason}"
                )
                continue
            if canonicalize_error is None:
                canonicalize_error = Reply(
                    refusal.status,
                    "insert mutations: cloudstore: canonicalize materialized mutation batch chunk: "
                    f"mutations[{index}]: {refusal.reason}",
                )
        if canonicalize_error is not None:
            return canonicalize_error
    return insert_error


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
            if entity not in ("session", "observation", "prompt", "relation"):
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
            row = dict(entry["payload"] or {})  # push_rules refused every other non-object
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


def _chunk_counts(chunk: Any) -> tuple[int, int, int]:
    if not isinstance(chunk, dict):
        return (0, 0, 0)
    return tuple(len(chunk.get(name) or []) for name in ("sessions", "observations", "prompts"))  # type: ignore[return-value]


_REQUIRED_CHUNK_FIELDS = {
    "sessions": ("id", "directory"),
    "observations": ("sync_id", "session_id", "type", "title", "content", "scope"),
    "prompts": ("sync_id", "session_id", "content"),
}


def _validate_importable(chunk: Any) -> None:
    if not isinstance(chunk, dict):
        return
    for name, required in _REQUIRED_CHUNK_FIELDS.items():
        for index, row in enumerate(chunk.get(name) or []):
            for field_name in required:
                value = row.get(field_name)
                if value is not None and not isinstance(value, str):
                    raise ChunkError(
                        f"chunk schema: json: cannot unmarshal into {name}[{index}].{field_name}"
                    )
                if not (value or "").strip():
                    raise ChunkError(f"{name}[{index}].{field_name} is required")


def _session_ids(chunk: Any) -> set[str]:
    if not isinstance(chunk, dict):
        return set()
    ids = {
        row["id"].strip()
        for row in chunk.get("sessions") or []
        if isinstance(row.get("id"), str) and row["id"].strip()
    }
    for mutation in chunk.get("mutations") or []:
        if mutation.get("entity") != "session" or mutation.get("op") == "delete":
            continue
        try:
            body = chunkcodec.decode_mutation_payload(mutation.get("payload") or "")
        except ChunkError:
            continue
        if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"].strip():
            ids.add(body["id"].strip())
    return ids


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
        if mutation["entity"] not in ("observation", "prompt") or mutation["op"] != "upsert":
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
            decoded = _as_object(payload)
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


def _rfc3339_utc(value: str) -> str:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    try:
        return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:  # 9999-12-31T23:59:59-23:59 is past year 9999 in UTC, beyond Python's datetime
        return value


__all__ = [
    "MATCH_FIELDS",
    "FakeCloudState",
    "Fault",
    "FaultAction",
    "InvalidControlRequest",
    "JournalEntry",
    "JournalItem",
    "ReceivedMutation",
    "Reply",
    "Route",
    "payload_digest",
    "payload_invalid",
    "too_large",
]
