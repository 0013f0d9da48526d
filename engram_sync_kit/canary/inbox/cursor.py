"""The inbox tripwires' incremental cursor, kept in the canary's own state dir (never in engram's files).

A full inbox read of a 1M-row database costs seconds (every inbox row joined to its session and derived).
The cursor keeps the tripwires' inputs (canary.inbox.TripwireInputs) with a fingerprint of what they were
computed from. The next check reads only the fingerprint:

- nothing changed: the kept inputs are the answer;
- rows were only appended (every row the cursor counted is still unacked, nothing else moved): only the
  rows after the cursor's high-water seq are read and added;
- anything else (acks, enrollments, another alias map or key map, a cwd that
  appeared or vanished, another file or another row at the high-water mark, as after a restore, a cursor
  older than MAX_AGE_SECONDS, another canary version): a full read, which is kept (with --full too).

A test compares every path with a full recomputation.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engram_sync_kit.canary.config import CanaryConfig, keep_state, state_file_for
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.aliases import load_aliases
from engram_sync_kit.canary.inbox.key_map import load_key_map, read_key_entries, remembered_keys_path
from engram_sync_kit.canary.inbox.selection import (
    GitRepoResolver,
    InboxSnapshot,
    KeySummary,
    KeyTotals,
    TripwireInputs,
    findings_from,
    select_inbox_rows,
    select_unattributed,
    select_unjournaled_memories,
)
from engram_sync_kit.canary.schema_support import identify, waiting_filter
from engram_sync_kit.canary.targets import INBOX_TARGET
from engram_sync_kit.engram_contract import LEGACY_TARGET

# v2: the fingerprint counts waiting rows only; v3: it names the file and the row at its high-water mark
CURSOR_SCHEMA = "engram-canary/inbox-cursor/v3"
CURSOR_KIND = "inbox-cursor"
# A bound on what the fingerprint cannot see (a session's directory rewritten in place, a remote added,
# a session row inserted after rows that name it).
MAX_AGE_SECONDS = 3600.0


class CursorMode(Enum):
    CACHED = "cached"
    APPENDED = "appended"
    FULL = "full"


class Fingerprint(BaseModel):
    # Which file (st_dev, st_ino: a restore by mv is another file) and the row at the high-water mark (a
    # restore by cp keeps the inode, but another journal has another row there, or none).
    file: list[int]
    mark: str
    high_water: int
    unacked: int  # unacked rows of the inbox lanes up to high_water
    enrolled: list[str]
    aliases: str
    cwds: dict[str, list[str | None]]  # cwd -> [exists, repo root] as this machine answered


class Cursor(BaseModel):
    schema_: str = CURSOR_SCHEMA
    fingerprint: Fingerprint
    computed_at: float
    inputs: dict[str, Any]


def _inbox_unacked(connection: sqlite3.Connection, up_to: int, waiting: str) -> int:
    # Waiting rows only: a v2/v3 engram retires a row (quarantined, superseded) by an UPDATE that moves
    # neither the high-water mark nor the number of unacked rows, and the inbox must drop it at once.
    row = connection.execute(
        "SELECT count(*) FROM sync_mutations WHERE target_key IN (?, ?) AND acked_at IS NULL AND seq <= ?"
        + waiting,
        (LEGACY_TARGET, INBOX_TARGET, up_to),
    ).fetchone()
    return int(row[0])


def _scalar(connection: sqlite3.Connection, sql: str) -> int:
    row = connection.execute(sql).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _file_identity(db: EngramDb) -> list[int]:
    try:
        found = db.path.stat()
    except OSError:
        return []
    return [found.st_dev, found.st_ino]


def _mark_digest(connection: sqlite3.Connection, high_water: int) -> str:
    row = connection.execute(
        "SELECT target_key, entity, entity_key, op, occurred_at, length(CAST(payload AS BLOB)), "
        "CAST(substr(CAST(payload AS BLOB), 1, 512) AS BLOB) FROM sync_mutations WHERE seq = ?",
        (high_water,),
    ).fetchone()
    return hashlib.sha256(repr(row).encode()).hexdigest()


def _aliases_digest(aliases: AliasMap) -> str:
    text = json.dumps(
        [
            sorted(aliases.keys.items()),
            sorted(aliases.cwds.items()),
            sorted(map(list, aliases.recorded.items())),
        ],
        default=list,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _cwd_facts(cwds: set[str], resolver: GitRepoResolver) -> dict[str, list[str | None]]:
    facts: dict[str, list[str | None]] = {}
    for cwd in sorted(cwds):
        root = resolver.repo_root(cwd)
        facts[cwd] = ["1" if resolver.exists(cwd) else "0", str(root) if root is not None else None]
    return facts


def _fingerprint(
    db: EngramDb,
    snapshot_high_water: int,
    enrolled: frozenset[str],
    aliases: AliasMap,
    cwds: dict[str, list[str | None]],
) -> Fingerprint:
    return Fingerprint(
        file=_file_identity(db),
        mark=_mark_digest(db.connection, snapshot_high_water),
        high_water=snapshot_high_water,
        unacked=_inbox_unacked(db.connection, snapshot_high_water, waiting_filter(db.schema)),
        enrolled=sorted(enrolled),
        aliases=_aliases_digest(aliases),
        cwds=cwds,
    )


def _load(path: Path) -> Cursor | None:
    try:
        cursor = Cursor.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None
    return cursor if cursor.schema_ == CURSOR_SCHEMA else None


def _save(path: Path, cursor: Cursor) -> None:
    keep_state(path, cursor.model_dump_json())


def _inputs_to_json(inputs: TripwireInputs) -> dict[str, Any]:
    return {
        "keys": {key: totals.as_json() for key, totals in inputs.keys.items()},
        "unsorted_memories": inputs.unsorted_memories,
    }


def _inputs_from_json(document: dict[str, Any]) -> TripwireInputs:
    return TripwireInputs(
        keys={key: KeyTotals(**totals) for key, totals in document["keys"].items()},
        unsorted_memories=[(epoch, str(cwd)) for epoch, cwd in document["unsorted_memories"]],
    )


def _snapshot_cwds(snapshot: InboxSnapshot) -> set[str]:
    return {row.cwd for row in snapshot.rows if row.cwd is not None}


MEMORIES_CURSOR_KIND = "inbox-memories-cursor"
MEMORIES_CURSOR_SCHEMA = "engram-canary/inbox-memories-cursor/v1"


class MemoriesFingerprint(BaseModel):
    """What the memories engram never journaled (rc.12+, v3) are computed from: a save adds a live
    observation (max id, count), a delete removes one, an enrollment or a journal row of one moves the
    enrolled set or the journal's high-water mark."""

    live_max_id: int
    live: int
    high_water: int
    enrolled: list[str]
    aliases: str


class MemoriesCursor(BaseModel):
    schema_: str = MEMORIES_CURSOR_SCHEMA
    fingerprint: MemoriesFingerprint
    computed_at: float
    inputs: dict[str, Any]


def _memories_fingerprint(db: EngramDb, aliases: AliasMap) -> MemoriesFingerprint:
    live_max_id, live = db.connection.execute(
        "SELECT ifnull(max(id), 0), count(*) FROM observations WHERE deleted_at IS NULL"
    ).fetchone()
    return MemoriesFingerprint(
        live_max_id=int(live_max_id),
        live=int(live),
        high_water=_scalar(db.connection, "SELECT max(seq) FROM sync_mutations"),
        enrolled=sorted(db.enrolled_projects()),
        aliases=_aliases_digest(aliases),
    )


def unjournaled_inputs(db: EngramDb, aliases: AliasMap, *, use_cursor: bool = True) -> TripwireInputs:
    """The tripwires' inputs from the memories no journal row stands for (none where every save is
    journaled), kept in a cursor of their own: they move no journal seq, so the journal's cursor cannot
    see them. Call inside a read transaction."""
    if not identify(db).generation.memories_answer_the_inbox or not db.schema.has_column(
        "observations", "id"
    ):
        return TripwireInputs()
    path = state_file_for(db.path, MEMORIES_CURSOR_KIND)
    seen = _memories_fingerprint(db, aliases)
    if use_cursor:
        try:
            kept: MemoriesCursor | None = MemoriesCursor.model_validate(
                json.loads(path.read_text(encoding="utf-8"))
            )
        except (OSError, ValueError, ValidationError):
            kept = None
        if (
            kept is not None
            and kept.schema_ == MEMORIES_CURSOR_SCHEMA
            and kept.fingerprint == seen
            and time.time() - kept.computed_at <= MAX_AGE_SECONDS
        ):
            return _inputs_from_json(kept.inputs)
    inputs = TripwireInputs.from_rows(select_unjournaled_memories(db, aliases))
    if use_cursor:
        cursor = MemoriesCursor(fingerprint=seen, computed_at=time.time(), inputs=_inputs_to_json(inputs))
        keep_state(path, cursor.model_dump_json())
    return inputs


def tripwire_inputs(
    db: EngramDb, aliases: AliasMap, *, use_cursor: bool = True, now: datetime | None = None
) -> tuple[TripwireInputs, frozenset[str], KeySummary | None, CursorMode]:
    """The tripwires' inputs, the enrolled set and the rows without a project, in one read transaction,
    and the memories no journal row stands for (rc.12+, v3) in a read transaction of their own."""
    inputs, enrolled, unattributed, mode = _journal_tripwire_inputs(
        db, aliases, use_cursor=use_cursor, now=now
    )
    with db.read_transaction():
        inputs.add(unjournaled_inputs(db, aliases, use_cursor=use_cursor))
    return inputs, enrolled, unattributed, mode


def _journal_tripwire_inputs(
    db: EngramDb, aliases: AliasMap, *, use_cursor: bool, now: datetime | None
) -> tuple[TripwireInputs, frozenset[str], KeySummary | None, CursorMode]:
    path = state_file_for(db.path, CURSOR_KIND)
    memory = remembered_keys_path(db)
    with db.read_transaction() as connection:
        high_water = _scalar(connection, "SELECT max(seq) FROM sync_mutations")
        enrolled = db.enrolled_projects()
        unattributed = select_unattributed(db, now or datetime.now(UTC))
        kept = _load(path) if use_cursor else None
        if kept is not None and time.time() - kept.computed_at <= MAX_AGE_SECONDS:
            resolver = GitRepoResolver(read_key_entries(memory) if memory is not None else None)
            seen = kept.fingerprint
            still = _fingerprint(db, seen.high_water, enrolled, aliases, _cwd_facts(set(seen.cwds), resolver))
            if still == seen:
                inputs = _inputs_from_json(kept.inputs)
                if high_water == seen.high_water:
                    return inputs, enrolled, unattributed, CursorMode.CACHED
                later = select_inbox_rows(db, aliases, after_seq=seen.high_water)
                inputs.add(TripwireInputs.from_rows(later.rows))
                cwds = {**seen.cwds, **_cwd_facts(_snapshot_cwds(later), resolver)}
                _save(path, _cursor(db, high_water, enrolled, aliases, cwds, inputs))
                return inputs, enrolled, unattributed, CursorMode.APPENDED
        snapshot = select_inbox_rows(db, aliases)
        inputs = TripwireInputs.from_rows(snapshot.rows)
        # A full read (--full too) leaves its answer for the next check.
        cwds = _cwd_facts(_snapshot_cwds(snapshot), GitRepoResolver())
        _save(path, _cursor(db, snapshot.high_water, enrolled, aliases, cwds, inputs))
    return inputs, enrolled, unattributed, CursorMode.FULL


def _cursor(
    db: EngramDb,
    high_water: int,
    enrolled: frozenset[str],
    aliases: AliasMap,
    cwds: dict[str, list[str | None]],
    inputs: TripwireInputs,
) -> Cursor:
    return Cursor(
        fingerprint=_fingerprint(db, high_water, enrolled, aliases, cwds),
        computed_at=time.time(),
        inputs=_inputs_to_json(inputs),
    )


def cursor_tripwire_findings(
    db: EngramDb,
    config: CanaryConfig,
    *,
    use_cursor: bool = True,
    now: datetime | None = None,
) -> tuple[list[Finding], dict[str, dict[str, Any]]]:
    """The inbox tripwires of `check`, through the cursor (equal to canary.inbox.tripwire_findings), and
    per inbox key its memories, telemetry rows and oldest memory's age (the fleet view's gauges)."""
    settings = config.inbox
    if not db.schema.has_column("sync_mutations", "project"):
        return [], {}
    aliases, _ = load_aliases(settings.aliases)
    if config.key_map is not None:
        aliases = replace(aliases, recorded=load_key_map(config.key_map.expanduser()))
    moment = now or datetime.now(UTC)
    inputs, enrolled, unattributed, _ = tripwire_inputs(db, aliases, use_cursor=use_cursor, now=moment)
    at = moment.timestamp()
    keys = {
        key: {
            "memories": totals.count,
            "telemetry": totals.telemetry,
            "oldest_memory_age_days": (
                round(max(0.0, (at - totals.oldest_memory) / 86400), 3)
                if totals.oldest_memory is not None
                else None
            ),
        }
        for key, totals in sorted(inputs.keys.items())
    }
    return findings_from(inputs, enrolled, unattributed, moment, settings), keys
