"""engram's enqueue, written once in engram_contract.enqueue, on v1.20's own schema: the appended row is a
local, unacked journal row, and the target's sync_state is pending at that row's seq."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.enqueue import INSERT_LOCAL_SQL, mark_enqueued

V120_SCHEMA = Path(__file__).parents[1] / "fixtures" / "engram_schemas" / "v1.20.0.sql"


def test_an_enqueue_appends_a_local_row_and_marks_its_target_pending() -> None:
    connection = sqlite3.connect(":memory:")
    connection.executescript(V120_SCHEMA.read_text(encoding="utf-8"))
    connection.execute(
        "INSERT OR REPLACE INTO sync_state (target_key, lifecycle, last_enqueued_seq, updated_at) "
        "VALUES (?, 'idle', 0, '2026-01-01 00:00:00')",
        (LEGACY_TARGET,),
    )
    cursor = connection.execute(
        INSERT_LOCAL_SQL, (LEGACY_TARGET, "observation", "obs-1", "upsert", '{"a":1}', "proj")
    )
    seq = int(cursor.lastrowid or 0)
    mark_enqueued(connection, LEGACY_TARGET, seq)
    assert connection.execute(
        "SELECT target_key, entity, entity_key, op, payload, source, project, acked_at IS NULL, "
        "occurred_at != '' FROM sync_mutations"
    ).fetchall() == [(LEGACY_TARGET, "observation", "obs-1", "upsert", '{"a":1}', "local", "proj", 1, 1)]
    assert connection.execute(
        "SELECT lifecycle, last_enqueued_seq, updated_at > '2026-01-01' FROM sync_state WHERE target_key = ?",
        (LEGACY_TARGET,),
    ).fetchone() == ("pending", seq, 1)
