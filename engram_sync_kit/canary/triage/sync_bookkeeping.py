"""engram v1.20's sync_state bookkeeping as triage writes it: the enqueue of its copies and the ack of
what it retires, statement for statement, inside triage's one write transaction.

It mirrors enqueueSyncMutationTx and AckSyncMutationSeqs (internal/store/store.go), except that a triage
ack never clears a lane's failure record (SyncBookkeeping.keeps_failure_record). Only triage uses it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.errors import TriageError
from engram_sync_kit.canary.targets import project_target
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.enqueue import INSERT_LOCAL_SQL, mark_enqueued

# Values bound into one IN (...) list; well under SQLite's limit of host parameters.
IN_LIST_CHUNK = 500


@dataclass(frozen=True)
class PreparedWrite:
    """The per-row Python work of a plan's writes, done before the write lock is taken."""

    inserts: list[tuple[str, str, str, str, str, str]]
    last_copy_by_target: dict[str, int]
    ack_seqs: list[int]
    acked_projects: list[str]


def count_rows(connection: sqlite3.Connection, sql: str, *parameters: object) -> int:
    return int(connection.execute(sql, parameters).fetchone()[0])


def seq_chunks(seqs: Sequence[int]) -> Iterator[tuple[Sequence[int], str]]:
    """SEQS in slices that fit SQLite's parameter limit, each with its `?,?,...` list."""
    for start in range(0, len(seqs), IN_LIST_CHUNK):
        chunk = seqs[start : start + IN_LIST_CHUNK]
        yield chunk, ",".join("?" * len(chunk))


class SyncBookkeeping:
    """engram v1.20's sync_state bookkeeping, statement for statement, inside the caller's transaction."""

    def __init__(self, db: EngramDb) -> None:
        self.connection = db.connection
        self.has_reason = db.schema.has_column("sync_state", "reason_code")

    def ensure(self, target_key: str) -> None:
        self.connection.execute(
            "INSERT OR IGNORE INTO sync_state (target_key, lifecycle, updated_at) VALUES (?, 'idle', datetime('now'))",
            (target_key,),
        )

    def get(self, target_key: str) -> dict[str, Any]:
        self.ensure(target_key)
        columns = "lifecycle, last_enqueued_seq, last_acked_seq, consecutive_failures"
        row = self.connection.execute(
            f"SELECT {columns} FROM sync_state WHERE target_key = ?", (target_key,)
        ).fetchone()
        names = [name.strip() for name in columns.split(",")]
        return dict(zip(names, row, strict=True))

    def keeps_failure_record(self, state: dict[str, Any]) -> bool:
        """A lane whose worker cycle failed (degraded, or a failure count) keeps that record through a triage
        ack. In engram v1.20 only a cycle's outcome writes it (MarkSyncFailure, MarkSyncHealthy,
        MarkSyncBlocked in internal/store/store.go); AckSyncMutationSeqs clears it because the worker acks
        only what the cloud just accepted, and a triage ack is no such evidence. The worker keeps its own
        count and backoff in memory (internal/cloud/autosync/manager.go), so a cleared record would only
        hide the failure and restart the stored count below the worker's."""
        return state["lifecycle"] == "degraded" or int(state.get("consecutive_failures") or 0) > 0

    def set_cursor(
        self,
        target_key: str,
        lifecycle: str,
        assignments: str,
        values: Sequence[object],
        state: dict[str, Any],
    ) -> None:
        if self.keeps_failure_record(state):
            self.connection.execute(
                f"UPDATE sync_state SET {assignments}, updated_at = datetime('now') WHERE target_key = ?",
                (*values, target_key),
            )
            return
        clear = ", consecutive_failures = 0, backoff_until = NULL, last_error = NULL"
        if self.has_reason:
            clear += ", reason_code = NULL, reason_message = NULL"
        self.connection.execute(
            f"UPDATE sync_state SET {assignments}, lifecycle = ?{clear}, updated_at = datetime('now') "
            "WHERE target_key = ?",
            (*values, lifecycle, target_key),
        )

    def enqueue_all(self, prepared: PreparedWrite) -> tuple[int, ...]:
        """enqueueSyncMutationTx per copy: the legacy-lane row, then 'cloud' and 'cloud:<project>' pending.

        engram updates both cursors after every row; inside one transaction only the last update of
        each is ever visible, so it is made once per target.
        """
        self.ensure(LEGACY_TARGET)
        if not prepared.inserts:
            return ()
        before = count_rows(self.connection, "SELECT ifnull(MAX(seq), 0) FROM sync_mutations")
        self.connection.executemany(INSERT_LOCAL_SQL, prepared.inserts)
        # We hold the write lock, so the rows after `before` are exactly ours, numbered one by one in
        # insertion order (AUTOINCREMENT); their range is checked rather than read row by row.
        first, last, found = self.connection.execute(
            "SELECT MIN(seq), MAX(seq), COUNT(*) FROM sync_mutations WHERE seq > ?", (before,)
        ).fetchone()
        if found != len(prepared.inserts) or int(last) - int(first) + 1 != found:
            raise TriageError(
                f"expected {len(prepared.inserts)} new rows numbered in a row, found {found}; nothing was changed"
            )
        seqs = range(int(first), int(last) + 1)
        for target_key, index in prepared.last_copy_by_target.items():
            self.ensure(target_key)
            mark_enqueued(self.connection, target_key, seqs[index])
        return tuple(seqs)

    def ack(self, prepared: PreparedWrite, *, on_half: Callable[[], None] = lambda: None) -> None:
        """AckSyncMutationSeqs('cloud', seqs), then refreshProjectSyncStateTx for every touched project."""
        state = self.get(LEGACY_TARGET)
        seqs = prepared.ack_seqs
        half = len(seqs) // 2
        acked = self._ack_seqs(seqs[:half])
        on_half()
        acked += self._ack_seqs(seqs[half:])
        if acked != len(seqs):
            raise TriageError("some selected rows were acked by someone else meanwhile; nothing was changed")
        max_seq = max([int(state["last_acked_seq"]), *seqs])
        remaining = count_rows(
            self.connection,
            "SELECT COUNT(*) FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL",
            LEGACY_TARGET,
        )
        lifecycle = "healthy" if remaining == 0 else "pending"
        self.set_cursor(LEGACY_TARGET, lifecycle, "last_acked_seq = ?", (max_seq,), state)
        for project in prepared.acked_projects:
            self.refresh_project(project)

    def _ack_seqs(self, seqs: Sequence[int]) -> int:
        return sum(
            self.connection.execute(
                "UPDATE sync_mutations SET acked_at = datetime('now') "
                f"WHERE target_key = ? AND acked_at IS NULL AND seq IN ({marks})",
                (LEGACY_TARGET, *chunk),
            ).rowcount
            for chunk, marks in seq_chunks(seqs)
        )

    def refresh_project(self, project: str) -> None:
        target_key = project_target(project)
        state = self.get(target_key)
        max_acked = count_rows(
            self.connection,
            "SELECT ifnull(MAX(seq), 0) FROM sync_mutations WHERE target_key = ? AND project = ? AND acked_at IS NOT NULL",
            LEGACY_TARGET,
            project,
        )
        max_enqueued = count_rows(
            self.connection,
            "SELECT ifnull(MAX(seq), 0) FROM sync_mutations WHERE target_key = ? AND project = ?",
            LEGACY_TARGET,
            project,
        )
        pending = count_rows(
            self.connection,
            "SELECT COUNT(*) FROM sync_mutations WHERE target_key = ? AND project = ? AND acked_at IS NULL",
            LEGACY_TARGET,
            project,
        )
        lifecycle = "pending" if pending else "healthy"
        self.set_cursor(
            target_key,
            lifecycle,
            "last_enqueued_seq = ?, last_acked_seq = ?",
            (
                max(max_enqueued, int(state["last_enqueued_seq"])),
                max(max_acked, int(state["last_acked_seq"])),
            ),
            state,
        )
