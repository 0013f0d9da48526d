"""engram's enqueue (enqueueSyncMutationTx in v1.20), written once: a journal row appended to
sync_mutations, then the target's sync_state marked pending with the row's seq as last_enqueued_seq.
Triage's copies and the harness's re-enqueue step write through here; the caller holds the transaction."""

from __future__ import annotations

import sqlite3

# The columns engram fills when it journals a local change; seq, occurred_at and acked_at take their defaults.
JOURNAL_COLUMNS = "target_key, entity, entity_key, op, payload, source, project"
INSERT_LOCAL_SQL = f"INSERT INTO sync_mutations ({JOURNAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, 'local', ?)"
MARK_PENDING_SQL = (
    "UPDATE sync_state SET lifecycle = 'pending', last_enqueued_seq = ?, updated_at = datetime('now') "
    "WHERE target_key = ?"
)


def mark_enqueued(connection: sqlite3.Connection, target_key: str, seq: int) -> None:
    """The second half of an enqueue: the target's cursor moves to `seq` and its lifecycle to pending."""
    connection.execute(MARK_PENDING_SQL, (seq, target_key))
