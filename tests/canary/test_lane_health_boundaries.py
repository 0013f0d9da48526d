"""Lane health's edges: when a lane counts as blocked (a degraded lane with nothing pending is not: a
mutation run turned `pending > 0` into `>= 0` and every other test stayed green), what a degraded lane
says at exactly ten failures, and the clear command's --db."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from engram_schemas.builder import ENROLLED, V120, build

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.lane_health import (
    LaneHealth,
    clear_commands,
    degraded_message,
    lane_findings,
    read_lane_health,
)
from engram_sync_kit.engram_contract.worker_liveness import MAX_CONSECUTIVE_FAILURES, RESTART_ADVICE


@pytest.mark.parametrize(
    ("lifecycle", "last_error", "pending", "blocked"),
    [
        ("degraded", "push failed: 400", 0, False),
        ("degraded", "push failed: 400", 1, True),
        ("degraded", "   ", 1, False),
        ("healthy", "push failed: 400", 1, False),
    ],
)
def test_a_degraded_lane_is_blocked_only_with_rows_waiting(
    lifecycle: str, last_error: str, pending: int, blocked: bool
) -> None:
    lane = LaneHealth("cloud", lifecycle=lifecycle, last_error=last_error, pending=pending)
    assert lane.blocked is blocked


RETRIES_V120 = "a running worker retries when its backoff ends (v1.20 stops after 10 consecutive failures until it restarts)"
RETRIES_LATER = (
    "a running worker retries when its backoff ends, at most 5 minutes apart (predicted from source: v2/v3 keep "
    "retrying past 10 failures)"
)


@pytest.mark.parametrize(
    ("failures", "gives_up", "retry"),
    [
        (9, True, RETRIES_V120),
        (
            10,
            True,
            "engram does not retry it: after 10 consecutive failures v1.20's worker stops until the process "
            f"restarts (10 recorded); once the error is fixed, {RESTART_ADVICE}",
        ),
        (10, False, RETRIES_LATER),
        (0, False, RETRIES_LATER),
    ],
)
def test_a_degraded_lane_says_whether_engram_retries_at_exactly_ten_failures(
    failures: int, gives_up: bool, retry: str
) -> None:
    assert MAX_CONSECUTIVE_FAILURES == 10
    lane = LaneHealth(
        "cloud",
        lifecycle="degraded",
        last_error="push failed: 500",
        consecutive_failures=failures,
        pending=3,
        worker_gives_up=gives_up,
    )
    assert degraded_message(lane) == (
        "lane 'cloud' is degraded with 3 rows pending: the last push failed (push failed: 500); no pending row "
        f"fails the push contract, so fix what the error names; {retry}"
    )


@pytest.mark.parametrize(("pending", "rows"), [(1, "1 row"), (2, "2 rows")])
def test_a_prompt_held_by_the_provenance_preflight_counts_its_rows(pending: int, rows: str) -> None:
    lane = LaneHealth(
        "cloud:p",
        lifecycle="degraded",
        last_error="origin unverified",
        reason_code="prompt_provenance_blocked",
        pending=pending,
        consecutive_failures=10,
    )
    assert degraded_message(lane) == (
        "lane 'cloud:p' holds back a prompt engram's provenance preflight refused (prompt_provenance_blocked: "
        "origin unverified): engram keeps it pending and never sends it until its local origin and session "
        f"owner verify, while the lane's other rows keep delivering; retrying does not clear it ({rows} pending)"
    )


def test_the_clear_command_names_the_database_it_was_read_from(tmp_path: Path) -> None:
    # The builder's rows simulate v1.20's; the refused session row (no directory) is simulated legacy data.
    db = tmp_path / "engram.db"
    build(V120, db)
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES ('cloud', 'session', 's-x', 'upsert', ?, ?)",
            (json.dumps({"id": "s-x", "project": ENROLLED}), ENROLLED),
        )
        (seq,) = connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()
    with EngramDb.open(db) as engram:
        (finding,) = lane_findings(engram)
    assert finding.evidence["clear_commands"] == [f"engram-canary inbox drop --seq {seq} --db {db} --apply"]
    with EngramDb.open(db) as engram, engram.read_transaction():
        (legacy,) = read_lane_health(engram)
    assert clear_commands(legacy) == [f"engram-canary inbox drop --seq {seq} --apply"]


def blocked_legacy_lane(db: Path, rows: list[tuple[str, str, dict[str, str]]]) -> tuple[str, dict[str, Any]]:
    """The legacy lane's finding after these session rows (simulated legacy data, as v1.20 journals them;
    a second enrolled project `other` is simulated the same way)."""
    build(V120, db)
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute(
            "INSERT INTO sync_enrolled_projects (project, enrolled_at) VALUES ('other', '2026-11-01 10:00:00')"
        )
        for key, project, payload in rows:
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
                "VALUES ('cloud', 'session', ?, 'upsert', ?, ?)",
                (key, json.dumps(payload), project),
            )
    with EngramDb.open(db) as engram:
        (finding,) = lane_findings(engram)
    return finding.message, finding.evidence


def test_a_blocked_lane_lists_a_clear_command_per_kind_of_blocker(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    no_directory = "500 session payload directory is required for upsert"
    message, evidence = blocked_legacy_lane(
        db,
        [
            ("sess-enrolled-app", ENROLLED, {"id": "sess-enrolled-app", "project": ENROLLED}),  # repairable
            ("s-u", "", {"id": "s-u", "directory": "/u"}),
            ("s-x", ENROLLED, {"id": "s-x", "project": ENROLLED}),
            ("s-y", "other", {"id": "s-y", "project": "other"}),
            ("s-ok", ENROLLED, {"id": "s-ok", "project": ENROLLED, "directory": "/ok"}),
            ("s-ok2", "other", {"id": "s-ok2", "project": "other", "directory": "/ok"}),
        ],
    )
    first = evidence["blocking_seqs"][0]
    assert evidence["blocking_seqs"] == [first, first + 1, first + 2, first + 3]
    assert evidence["clear_commands"] == [
        f"engram-canary repair --db {db} --apply",
        f"engram-canary inbox drop --unattributed --db {db} --apply",
        f"engram-canary inbox drop --seq {first + 2},{first + 3} --db {db} --apply",
    ]
    assert evidence["reasons"] == {no_directory: 3, "400 mutation entries must specify a project": 1}
    assert message == (
        f"lane 'cloud' is blocked: the cloud refuses seq {first} (session, project {ENROLLED!r}: {no_directory}) "
        f"and 3 more; 2 rows wait behind it ({ENROLLED}: 1, other: 1); clear it with: {evidence['clear_command']}"
    )


def test_a_lane_blocked_by_its_last_row_holds_back_no_project(tmp_path: Path) -> None:
    message, evidence = blocked_legacy_lane(tmp_path / "engram.db", [("s-x", ENROLLED, {"id": "s-x"})])
    assert (evidence["held_back_rows"], evidence["held_back_by_project"]) == (0, {})
    assert "; 0 rows wait behind it (no enrolled project); clear it with: " in message
    assert " and " not in message.split(";")[0]
