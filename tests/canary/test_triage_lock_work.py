"""What triage --apply does while it holds engram's write lock (engram v1.20 retries a busy write ~85 ms).

A claim's per-row Python work and the WAL checkpoint its commit triggers must happen outside the
BEGIN IMMEDIATE ... COMMIT window; the revalidation and the writes stay inside it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import engram_sync_kit.canary.triage.plan as triage
import engram_sync_kit.canary.triage.sync_bookkeeping as sync_bookkeeping
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.lanes import lane_row, with_project
from engram_sync_kit.canary.triage.plan import Copy, Plan, apply

V120_SCHEMA = Path(__file__).parents[1] / "fixtures" / "engram_schemas" / "v1.20.0.sql"
ROWS = 3000


def _engram_database(path: Path) -> Path:
    """The v1.20 schema in WAL mode (as engram opens it), with ROWS unacked inbox rows of 'side-project'."""
    with sqlite3.connect(path, isolation_level=None) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.executescript(V120_SCHEMA.read_text(encoding="utf-8"))
        connection.execute(
            "INSERT OR IGNORE INTO sync_state (target_key, lifecycle) VALUES ('cloud', 'idle')"
        )
        connection.execute("INSERT INTO sync_enrolled_projects (project) VALUES ('main-proj')")
        connection.executemany(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES ('cloud', 'observation', ?, 'upsert', ?, 'side-project')",
            [
                (f"obs-{number}", json.dumps({"title": f"t{number}", "content": "x" * 1500}))
                for number in range(ROWS)
            ],
        )
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return path


def _rows(connection: sqlite3.Connection, limit: int) -> list[Any]:
    columns = "seq, target_key, entity, entity_key, op, payload, project, occurred_at, acked_at"
    return connection.execute(
        f"SELECT {columns} FROM sync_mutations WHERE acked_at IS NULL ORDER BY seq LIMIT ?", (limit,)
    ).fetchall()


@dataclass
class ClaimOfRows:
    """A claim of the first `limit` rows into main-proj; `revalidated_limit` re-plans under the lock."""

    limit: int = ROWS
    revalidated_limit: int | None = None
    inside_lock: Callable[[sqlite3.Connection], None] = lambda _: None
    revalidations: list[int] = field(default_factory=list)

    def _plan(self, connection: sqlite3.Connection, limit: int) -> Plan:
        plan = Plan("claim", project="main-proj", enrolled=frozenset({"main-proj"}))
        for values in _rows(connection, limit):
            row = lane_row(values)
            plan.copies.append(Copy(row, "main-proj", with_project(row.payload, "main-proj")))
            plan.acks.append(row)
        return plan

    def plan(self, db: EngramDb) -> Plan:
        return self._plan(db.connection, self.limit)

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        self.inside_lock(db.connection)
        if self.revalidated_limit is None:
            return plan
        self.revalidations.append(self.revalidated_limit)
        return self._plan(db.connection, self.revalidated_limit)


@contextmanager
def _watch_lock(monkeypatch: pytest.MonkeyPatch, on_release: Callable[[], None]) -> Iterator[list[bool]]:
    """triage's BEGIN IMMEDIATE ... COMMIT, with `on_release` called right after COMMIT returns."""
    held = [False]
    original = triage.immediate_transaction

    @contextmanager
    def watched(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        with original(connection) as locked:
            held[0] = True
            try:
                yield locked
            finally:
                held[0] = False
        on_release()

    monkeypatch.setattr(triage, "immediate_transaction", watched)
    yield held


def test_the_commit_leaves_the_wal_checkpoint_until_after_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 3,000-row claim writes more than engram's 1,000-page auto-checkpoint threshold to the WAL;
    # before the fix the checkpoint ran inside COMMIT, so the database file changed before COMMIT returned.
    db = _engram_database(tmp_path / "engram.db")
    size_before = db.stat().st_size
    sizes_at_release: list[int] = []
    with _watch_lock(monkeypatch, lambda: sizes_at_release.append(db.stat().st_size)):
        result = apply(db, ClaimOfRows(), backup_dir=tmp_path / "backups")
    assert len(result.new_seqs) == ROWS
    assert sizes_at_release == [size_before]
    assert db.stat().st_size > size_before  # checkpointed after the lock, as engram would have
    with sqlite3.connect(db) as reader:
        assert reader.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0] == 0
        assert reader.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE project = 'main-proj' AND acked_at IS NULL"
        ).fetchone() == (ROWS,)
        assert reader.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE project = 'side-project' AND acked_at IS NULL"
        ).fetchone() == (0,)
    reader.close()


def test_per_row_python_work_is_done_before_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the fix, enqueue_all and ack built their parameters row by row under the lock (~10 ms per 5,000 rows).
    db = _engram_database(tmp_path / "engram.db")
    calls_inside_lock: list[str] = []
    with _watch_lock(monkeypatch, lambda: None) as held:
        # triage and the sync_state bookkeeping it writes through (canary.sync_bookkeeping)
        for module, name in (
            (triage, "normalize_project"),
            (triage, "project_target"),
            (sync_bookkeeping, "project_target"),
        ):
            original = getattr(module, name)

            def counted(*args: Any, _original: Any = original, _name: str = name) -> Any:
                if held[0]:
                    calls_inside_lock.append(_name)
                return _original(*args)

            monkeypatch.setattr(module, name, counted)
        apply(db, ClaimOfRows(), backup_dir=tmp_path / "backups")
    assert len(calls_inside_lock) <= 5, f"{len(calls_inside_lock)} per-row calls under the write lock"


def test_a_plan_changed_by_the_revalidation_writes_the_new_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _engram_database(tmp_path / "engram.db")
    planner = ClaimOfRows(limit=ROWS, revalidated_limit=10)
    result = apply(db, planner, backup_dir=tmp_path / "backups")
    assert planner.revalidations == [10]
    assert len(result.new_seqs) == 10
    with sqlite3.connect(db) as reader:
        assert reader.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE project = 'main-proj'"
        ).fetchone() == (10,)
        assert reader.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE acked_at IS NOT NULL"
        ).fetchone() == (10,)
        assert reader.execute(
            "SELECT last_enqueued_seq FROM sync_state WHERE target_key = 'cloud:main-proj'"
        ).fetchone() == (result.new_seqs[-1],)
    reader.close()
