"""The v1.20 worker's push selection, written once in engram_contract.worker_selection: the rows it pushes
and the canary's inbox split every unacked legacy-lane row between them, and the Python answer is the SQL's."""

from __future__ import annotations

import sqlite3

import pytest

from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.worker_selection import (
    legacy_unacked,
    worker_lists,
    worker_pushes,
    worker_pushes_row,
    worker_skips,
)

ROWS = [
    # seq, target_key, project, acked_at
    (1, LEGACY_TARGET, "", None),
    (2, LEGACY_TARGET, "enrolled", None),
    (3, LEGACY_TARGET, "stranger", None),
    (4, LEGACY_TARGET, "enrolled", "2026-01-01T00:00:00Z"),
    (5, "cloud:enrolled", "enrolled", None),
    (6, LEGACY_TARGET, "Enrolled", None),  # engram compares names as stored
    (7, LEGACY_TARGET, "stranger", "2026-01-01T00:00:00Z"),
]


@pytest.fixture(params=[True, False], ids=["enrollment-table", "no-enrollment-table"])
def journal(request: pytest.FixtureRequest) -> tuple[sqlite3.Connection, bool]:
    connection = sqlite3.connect(":memory:")
    connection.execute(
        "CREATE TABLE sync_mutations (seq INTEGER, target_key TEXT, project TEXT, acked_at TEXT)"
    )
    connection.executemany("INSERT INTO sync_mutations VALUES (?, ?, ?, ?)", ROWS)
    if request.param:
        connection.execute("CREATE TABLE sync_enrolled_projects (project TEXT)")
        connection.execute("INSERT INTO sync_enrolled_projects VALUES ('enrolled')")
    return connection, bool(request.param)


def _seqs(connection: sqlite3.Connection, where: str) -> list[int]:
    return [
        seq
        for (seq,) in connection.execute(f"SELECT seq FROM sync_mutations AS m WHERE {where} ORDER BY seq")
    ]


def test_the_worker_pushes_empty_or_enrolled_unacked_legacy_rows(
    journal: tuple[sqlite3.Connection, bool],
) -> None:
    connection, table = journal
    assert _seqs(connection, worker_pushes("m.", enrollment_table=table)) == ([1, 2] if table else [1])


def test_pushed_and_skipped_split_the_unacked_legacy_lane(journal: tuple[sqlite3.Connection, bool]) -> None:
    connection, table = journal
    pushed = _seqs(connection, f"{legacy_unacked()} AND {worker_lists(enrollment_table=table)}")
    skipped = _seqs(connection, f"{legacy_unacked('m.')} AND {worker_skips('m.', enrollment_table=table)}")
    assert set(pushed).isdisjoint(skipped)
    assert sorted(pushed + skipped) == _seqs(connection, legacy_unacked()) == [1, 2, 3, 6]


def test_the_python_rule_is_the_sql_rule(journal: tuple[sqlite3.Connection, bool]) -> None:
    connection, table = journal
    enrolled = frozenset({"enrolled"}) if table else frozenset()
    assert [
        seq for seq, target, project, acked in ROWS if worker_pushes_row(target, acked, project, enrolled)
    ] == _seqs(connection, worker_pushes(enrollment_table=table))


def test_the_sql_text_is_what_the_canary_used_before() -> None:
    # Same text, same query plan on the 1M-row benchmark database.
    assert worker_lists() == "(project = '' OR project IN (SELECT project FROM sync_enrolled_projects))"
    assert (
        worker_skips("m.")
        == "m.project != '' AND m.project NOT IN (SELECT project FROM sync_enrolled_projects)"
    )
    assert legacy_unacked("m.") == f"m.target_key = '{LEGACY_TARGET}' AND m.acked_at IS NULL"
