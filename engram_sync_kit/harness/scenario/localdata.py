"""Read-only looks at one engram database: the sync_state rows, and rows a `local` check asks about."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.db import read_transaction
from engram_sync_kit.harness.engram.read import read_engram, read_with
from engram_sync_kit.harness.scenario import schema as s

SYNC_STATE_COLUMNS = (
    "target_key",
    "lifecycle",
    "last_enqueued_seq",
    "last_acked_seq",
    "last_pulled_seq",
    "consecutive_failures",
    "backoff_until",
    "lease_owner",
    "lease_until",
    "last_error",
    "reason_code",
    "reason_message",
    "updated_at",
)


def read_sync_state_rows(db_path: Path) -> list[dict[str, Any]]:
    """Every sync_state row, with the columns this engram version has (others read as null)."""
    return read_with(db_path, sync_state_rows, [])


def sync_state_rows(connection: sqlite3.Connection) -> list[dict[str, Any]]:
    """read_sync_state_rows on a connection the caller holds (read-only)."""
    have = {row[1] for row in connection.execute("PRAGMA table_info(sync_state)")}
    columns = [column for column in SYNC_STATE_COLUMNS if column in have]
    rows = connection.execute(f"SELECT {', '.join(columns)} FROM sync_state ORDER BY target_key")
    return [
        {column: dict(zip(columns, row, strict=True)).get(column) for column in SYNC_STATE_COLUMNS}
        for row in rows
    ]


@dataclass(frozen=True)
class MachineMemories:
    """One engram home's memories, read-only: its enrolled projects and each project's live observations
    as (sync_id, title, content), the identity and the text a pull carries between machines."""

    enrolled: frozenset[str]
    memories: dict[str, frozenset[tuple[str, str, str]]]
    #: sync_ids of observations whose own journal rows still wait unacked (never delivered by this machine)
    undelivered: frozenset[str] = frozenset()
    #: sync_ids that more than one live observation row carries (one memory held twice)
    repeated: frozenset[str] = frozenset()
    #: sync_ids of observations this machine holds soft-deleted (deleted_at set) or deleted itself (a local
    #: delete in its journal, whatever a later pull did to the row)
    deleted: frozenset[str] = frozenset()
    deleted_here: frozenset[str] = frozenset()


def machine_memories(connection: sqlite3.Connection) -> MachineMemories:
    tables = {
        str(row[0]) for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    enrolled = (
        frozenset(str(row[0]) for row in connection.execute("SELECT project FROM sync_enrolled_projects"))
        if "sync_enrolled_projects" in tables
        else frozenset()
    )
    memories: dict[str, set[tuple[str, str, str]]] = {}
    seen: set[str] = set()
    twice: set[str] = set()
    if "observations" in tables:
        rows = connection.execute(
            "SELECT COALESCE(project, ''), COALESCE(sync_id, ''), COALESCE(title, ''), COALESCE(content, '') "
            "FROM observations WHERE deleted_at IS NULL"
        )
        for project, sync_id, title, content in rows:
            memories.setdefault(str(project), set()).add((str(sync_id), str(title), str(content)))
            (twice if sync_id and sync_id in seen else seen).add(str(sync_id))
    undelivered: frozenset[str] = frozenset()
    deleted_here: frozenset[str] = frozenset()
    deleted = (
        frozenset(
            str(row[0])
            for row in connection.execute(
                "SELECT sync_id FROM observations WHERE deleted_at IS NOT NULL AND sync_id IS NOT NULL"
            )
        )
        if "observations" in tables
        else frozenset()
    )
    if "sync_mutations" in tables:
        columns = {str(row[1]) for row in connection.execute("PRAGMA table_info(sync_mutations)")}
        local = " AND source = 'local'" if "source" in columns else ""
        undelivered = frozenset(
            str(row[0])
            for row in connection.execute(
                f"SELECT entity_key FROM sync_mutations WHERE entity = 'observation' AND acked_at IS NULL{local}"
            )
        )
        deleted_here = frozenset(
            str(row[0])
            for row in connection.execute(
                f"SELECT entity_key FROM sync_mutations WHERE entity = 'observation' AND op = 'delete'{local}"
            )
        )
    return MachineMemories(
        enrolled,
        {project: frozenset(rows) for project, rows in memories.items()},
        undelivered,
        frozenset(twice),
        deleted | deleted_here,
        deleted_here,
    )


def read_machine_memories(db_path: Path) -> MachineMemories:
    """machine_memories of DB_PATH in one short read-only transaction; EngramReadError when unreadable."""
    return read_engram(db_path, _in_one_transaction)


def _in_one_transaction(connection: sqlite3.Connection) -> MachineMemories:
    with read_transaction(connection):
        return machine_memories(connection)


def _query(check: s.LocalCheck) -> tuple[str, list[Any]]:
    where: list[str] = []
    parameters: list[Any] = []

    def equal(column: str, value: str | None) -> None:
        if value is not None:
            where.append(f"COALESCE({column}, '') = ?")
            parameters.append(value)

    if check.entity == "observation":
        table = "observations o"
        where.append("o.deleted_at IS NULL")
        equal("o.title", check.title)
        equal("o.sync_id", check.key)
        equal("o.project", check.project)
        content = "o.content"
    elif check.entity == "session":
        table = "sessions o"
        equal("o.id", check.key)
        equal("o.project", check.project)
        content = ""
    elif check.entity == "prompt":
        table = "user_prompts o"
        equal("o.sync_id", check.key)
        equal("o.project", check.project)
        content = "o.content"
    else:
        table = "memory_relations o LEFT JOIN observations src ON src.sync_id = o.source_id"
        equal("o.sync_id", check.key)
        equal("src.project", check.project)
        content = ""
    if check.content_contains is not None and content:
        where.append(f"instr({content}, ?) > 0")
        parameters.append(check.content_contains)
    sql = f"SELECT COUNT(*) FROM {table}" + (f" WHERE {' AND '.join(where)}" if where else "")
    return sql, parameters


def local_key(check: s.LocalCheck) -> str:
    """What a local check asks, without where and how it judges: the key of its count at an observe point."""
    return check.model_dump_json(exclude={"at", "present", "count"})


def count_local_rows(db_path: Path, check: s.LocalCheck) -> int | None:
    """How many rows match CHECK; None when the database cannot be read."""
    sql, parameters = _query(check)
    return read_with(db_path, lambda connection: int(connection.execute(sql, parameters).fetchone()[0]), None)
