"""What the fake cloud remembers, with no HTTP and no protocol rules: the journal, the stores (bounded,
with dropped counters), the allowlist and pause switches, the fault schedule and the reset epoch.

``fake_cloud.protocol`` reads and writes it the way engram v1.20's server handles each request.
"""

from __future__ import annotations

import hmac
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from engram_sync_kit.engram_contract import go_strings, payload_digest
from engram_sync_kit.engram_contract.journal_match import mismatched_fields
from engram_sync_kit.fake_cloud import chunkcodec
from engram_sync_kit.fake_cloud.chunkcodec import ChunkError
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.fake_cloud.faults import Fault, Route
from engram_sync_kit.fake_cloud.httpserver import wire_bytes
from engram_sync_kit.fake_cloud.wire import FORBIDDEN, NO_PRINCIPAL, Reply

DEFAULT_MAX_PUSH_BYTES = 8 * 1024 * 1024
DEFAULT_JOURNAL_LIMIT = 100_000
DEFAULT_STORE_LIMIT = 200_000

Transport = Literal["mutation", "chunk", "other"]
# Which real server the fake answers as (docs/fake-cloud.md, "Server versions"): v1.20 is observed,
# v2 and v3 are predicted from engram's source.
ServerVersion = Literal["v1.20", "v2", "v3"]
SERVER_VERSIONS: tuple[ServerVersion, ...] = ("v1.20", "v2", "v3")
NEWEST_SERVER_VERSION: ServerVersion = "v3"


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
    host: str | None = None  # the Host header's name: tells two machines on one loopback cloud apart

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


def utc_now() -> str:
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
        server_version: ServerVersion = NEWEST_SERVER_VERSION,
    ) -> None:
        if server_version not in SERVER_VERSIONS:
            raise FakeCloudError(
                f"server_version must be one of {', '.join(SERVER_VERSIONS)}, got {server_version!r}"
            )
        self.server_version = server_version
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
            for name in (
                "mutations",
                "chunks",
                "received",
                "journal",
                "sessions",
                "_chunk_order",
                "session_authorities",
                "prompt_pair_claims",
                "claimed_sync_ids",
            )
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
        # v3's provenance registry: session id -> owner project; (session, source inbox id) -> (sync id,
        # project) and sync id -> (session, source inbox id). Bounded by store_limit, oldest first.
        self.session_authorities: dict[str, str] = {}
        self.prompt_pair_claims: dict[tuple[str, str], tuple[str, str]] = {}
        self.claimed_sync_ids: dict[str, tuple[str, str]] = {}
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

    def newest_journal_id(self) -> int:
        return self.journal[-1].id if self.journal else 0

    def received_count(self) -> int:
        """How many mutations were stored, including those trimmed since (the newest seq)."""
        return self.received_dropped + len(self.received)

    def received_since(self, since_seq: int) -> list[ReceivedMutation]:
        return self.received[max(since_seq - self.received_dropped, 0) :]

    def received_matching(self, match: Mapping[str, Any], since_seq: int = 0) -> list[ReceivedMutation]:
        return [item for item in self.received_since(since_seq) if _received_mismatches(item, match) == []]

    def received_closest(
        self, match: Mapping[str, Any], since_seq: int = 0, limit: int = 5
    ) -> list[dict[str, Any]]:
        """The stored mutations nearest to MATCH (fewest mismatched fields, newest first), without payloads."""
        return _closest(
            self.received_since(since_seq),
            lambda item: _received_mismatches(item, match),
            lambda item: item.seq,
            lambda item: {key: value for key, value in item.to_dict().items() if key != "payload"},
            limit,
        )

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
        if self.server_version == "v3":
            # v3's writeProjectPolicyDenied names the project (cloudserver.go @d4397781).
            return Reply(
                403, {**FORBIDDEN.body, "error": f"forbidden: project {go_quote(normalized)} is not allowed"}
            )
        return FORBIDDEN

    def register_session_authority(self, session_id: str, project: str) -> None:
        self.session_authorities[session_id] = project
        _bound(self.session_authorities, self.store_limit)

    def claim_prompt_pair(self, session_id: str, source_inbox_id: str, sync_id: str, project: str) -> bool:
        """Bind (session, source inbox id) to (sync id, project); False when either side is already
        bound otherwise (a replay of the same binding is True)."""
        pair = (session_id, source_inbox_id)
        bound = self.prompt_pair_claims.get(pair)
        if bound is not None:
            return bound == (sync_id, project)
        if sync_id in self.claimed_sync_ids:
            return False
        self.prompt_pair_claims[pair] = (sync_id, project)
        self.claimed_sync_ids[sync_id] = pair
        _bound(self.prompt_pair_claims, self.store_limit)
        _bound(self.claimed_sync_ids, self.store_limit)
        return True

    def check_bearer(self, header: str | None) -> str | None:
        """The 401 text the real server answers with, or None when the request may pass."""
        if self.token is None:
            return None
        raw = go_strings.trim_space(wire_bytes(header or ""))
        if not raw:
            return "unauthorized: missing authorization header"
        parts = go_strings.fields(raw)
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return "unauthorized: authorization must use Bearer token"
        if not hmac.compare_digest(parts[1], self.token.encode()):
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
        host: str | None = None,
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
                host=host,
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
        return _closest(
            self.journal_since(since_id),
            lambda entry: _mismatches(entry, match),
            lambda entry: entry.id,
            JournalEntry.to_dict,
            limit,
        )

    # ----- faults -----

    def add_faults(self, faults: Iterable[Fault]) -> None:
        self.faults.extend(faults)

    def take_fault(self, route: Route, projects: Sequence[str], host: str = "") -> Fault | None:
        """The first scheduled fault matching this request, consumed once."""
        for fault in self.faults:
            if fault.matches(route, projects, host):
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    # ----- storage -----

    def store_mutation(
        self, project: str, entity: str, key: str, op: str, payload_text: str, occurred_at: str
    ) -> StoredMutation:
        seq = self.next_seq
        stored = StoredMutation(seq, project, entity, key, op, payload_text or "{}", occurred_at)
        self.mutations.append(stored)
        self._trim("mutations")
        return stored

    def store_chunk(
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
        when = _rfc3339_utc(created_at) if created_at else utc_now()
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

    def receive(
        self,
        transport: Transport,
        project: str,
        entity: str,
        key: str,
        op: str,
        payload: Any,
        digest: str | None,
    ) -> None:
        decoded = as_object(payload)
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


def go_quote(text: str) -> str:
    """Go's %q for the printable text a project name is."""
    return json.dumps(text, ensure_ascii=False)


def _bound(store: dict[Any, Any], limit: int) -> None:
    while len(store) > limit:
        del store[next(iter(store))]


Recorded = TypeVar("Recorded")


def _closest(
    items: Iterable[Recorded],
    mismatches: Callable[[Recorded], list[str]],
    newness: Callable[[Recorded], int],
    shown: Callable[[Recorded], dict[str, Any]],
    limit: int,
) -> list[dict[str, Any]]:
    """The LIMIT items nearest a match (fewest mismatched fields, newest first), each with its misses."""
    ranked = sorted(items, key=lambda item: (len(mismatches(item)), -newness(item)))
    return [{**shown(item), "mismatched": mismatches(item)} for item in ranked[:limit]]


def _mismatches(entry: JournalEntry, match: Mapping[str, Any]) -> list[str]:
    # Attribute reads, not to_dict(): /_fake/wait runs this for every new entry while a test waits.
    return mismatched_fields(entry, match, MATCH_FIELDS)


def _received_mismatches(item: ReceivedMutation, match: Mapping[str, Any]) -> list[str]:
    return mismatched_fields(item, match, RECEIVED_MATCH_FIELDS)


def as_object(payload: Any) -> dict[str, Any]:
    if payload is None:
        return {}  # stored as "{}", like the real server
    try:
        decoded = chunkcodec.decode_mutation_payload(payload)
    except ChunkError:
        return {"_raw": payload}
    return decoded if isinstance(decoded, dict) else {"_value": decoded}


def _chunk_counts(chunk: Any) -> tuple[int, int, int]:
    if not isinstance(chunk, dict):
        return (0, 0, 0)
    return tuple(len(chunk.get(name) or []) for name in ("sessions", "observations", "prompts"))  # type: ignore[return-value]


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


def _rfc3339_utc(value: str) -> str:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    try:
        return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OverflowError:  # 9999-12-31T23:59:59-23:59 is past year 9999 in UTC, beyond Python's datetime
        return value


MATCH_FIELDS = frozenset(JournalEntry.__dataclass_fields__)
# A stored mutation is matched on its fields, not its payload (payload_digest stands for it).
RECEIVED_MATCH_FIELDS = frozenset(ReceivedMutation.__dataclass_fields__) - {"payload"}
