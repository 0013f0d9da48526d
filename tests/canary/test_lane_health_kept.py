"""The lane-health answer `check` keeps in the canary's state dir, and the fingerprint that says when it is
stale (issue 39 item 6: mutmut left kept_lanes, _kept_answer, _keep_answer and lane_fingerprint untested
outside the real-engram tier).

What is pinned: the kept file's exact document; an unchanged database answered from it with no lane read;
each fingerprint input that must move it (and inputs that must not); a kept answer an hour old, of another
canary's schema, or of another fingerprint never served (a stale OK is a false OK); a corrupt, truncated or
wrong-typed kept file recomputed, never a traceback; 0 rows, 1 row and several lanes.

The databases are the fixture builder's simulation of each engram version (tests/engram_schemas); every
row this file adds goes through `simulate`, which says so.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from engram_schemas.builder import ENROLLED, V2, V3, V120, build

from engram_sync_kit.canary import lane_health
from engram_sync_kit.canary.config import state_file_for
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.lane_health import (
    LANE_STATE_SCHEMA,
    ListedRows,
    kept_lane_findings,
    kept_lanes,
    lane_fingerprint,
    read_lanes,
)
from engram_sync_kit.engram_contract.worker_liveness import RESTART_ADVICE

NO_DIRECTORY = "500 session payload directory is required for upsert"
NOW = 1_000_000.0
Answer = tuple[list[Finding], dict[str, ListedRows]]


def simulate(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """SIMULATES LEGACY DATA: rows written straight into engram's tables, as the engram version the file
    was built for leaves them (a journaled row, an enrollment, the worker's sync_state record)."""
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        for sql, parameters in statements:
            connection.execute(sql, parameters)


def journal(
    db: Path, key: str, project: str = ENROLLED, *, directory: str | None = None, lane: str = "cloud"
) -> int:
    """SIMULATES LEGACY DATA: one session upsert journaled as v1.20 writes it (without a directory the cloud
    refuses it); its seq."""
    payload: dict[str, str] = {"id": key, "project": project}
    if directory is not None:
        payload["directory"] = directory
    simulate(
        db,
        (
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES (?, 'session', ?, 'upsert', ?, ?)",
            (lane, key, json.dumps(payload), project),
        ),
    )
    with closing(sqlite3.connect(db)) as connection:
        return int(connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()[0])


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "state"
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(directory))
    return directory


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every full lane read (read_lane_health), by the database it read."""
    seen: list[Path] = []
    full_read = lane_health.read_lane_health

    def counted(db: EngramDb) -> list[lane_health.LaneHealth]:
        seen.append(db.path)
        return full_read(db)

    monkeypatch.setattr(lane_health, "read_lane_health", counted)
    return seen


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """lane_health's clock, set by the test (now[0])."""
    now = [NOW]
    monkeypatch.setattr(lane_health, "time", SimpleNamespace(time=lambda: now[0]))
    yield now


def kept(db: Path, **options: bool) -> Answer:
    with EngramDb.open(db) as engram:
        return kept_lanes(engram, **options)


def full(db: Path) -> Answer:
    with EngramDb.open(db) as engram:
        return read_lanes(engram)


def fingerprint(db: Path) -> dict[str, Any]:
    with EngramDb.open(db) as engram, engram.read_transaction():
        return lane_fingerprint(engram)


def kept_file(db: Path) -> Path:
    return state_file_for(db, "lane-health")


def kept_document(db: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(kept_file(db).read_text(encoding="utf-8"))
    return document


def blocked_v120(tmp_path: Path) -> tuple[Path, int, int]:
    """v1.20 with one refused row (no directory) and one deliverable row behind it: the db, both seqs."""
    db = tmp_path / "engram.db"
    build(V120, db)
    return db, journal(db, "s-x"), journal(db, "s-ok", directory="/ok")


def blocked_message(db: Path, seq: int, held: int, command: str) -> str:
    return (
        f"lane 'cloud' is blocked: the cloud refuses seq {seq} (session, project {ENROLLED!r}: {NO_DIRECTORY}); "
        f"{held} rows wait behind it ({ENROLLED}: {held}); clear it with: {command}"
    )


# The kept document


def test_the_kept_file_holds_exactly_the_answer_and_what_it_was_read_from(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, seq, after = blocked_v120(tmp_path)
    before = time.time()
    findings, listed = kept(db)  # the default: through the state dir
    assert before <= kept_document(db)["computed_at"] <= time.time()
    assert reads == [db]
    command = f"engram-canary inbox drop --seq {seq} --db {db} --apply"
    (finding,) = findings
    assert (finding.check, finding.target_key, finding.size) == ("legacy_lane_blocked", "cloud", 2)
    assert finding.message == blocked_message(db, seq, 1, command)
    assert finding.evidence["clear_commands"] == [command]
    assert listed == {"cloud": ListedRows(2, seq)}
    assert (findings, listed) == full(db)
    assert kept_file(db).parent == state
    assert sorted(path.name for path in state.iterdir()) == [kept_file(db).name]
    document = kept_document(db)
    assert document == {
        "schema": "engram-canary/lane-health/v5",
        "fingerprint": fingerprint(db),
        "computed_at": document["computed_at"],
        "findings": [finding.model_dump(mode="json")],
        "listed_rows": {"cloud": [2, seq]},
    }
    assert LANE_STATE_SCHEMA == "engram-canary/lane-health/v5"
    assert after == seq + 1


def test_an_unchanged_database_is_answered_from_the_kept_file_with_no_lane_read(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    first = kept(db)
    again = kept(db)
    assert reads == [db]
    assert again == first
    assert again[1] == {"cloud": ListedRows(2, seq)}
    assert [finding.model_dump(mode="json") for finding in again[0]] == kept_document(db)["findings"]
    with EngramDb.open(db) as engram:
        assert kept_lane_findings(engram) == first[0]
    assert reads == [db]


def test_an_empty_lane_is_kept_with_no_first_seq(tmp_path: Path, state: Path, reads: list[Path]) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    assert kept(db) == ([], {"cloud": ListedRows(0, None)})
    assert kept_document(db)["listed_rows"] == {"cloud": [0, None]}
    assert kept_document(db)["findings"] == []
    assert kept(db) == ([], {"cloud": ListedRows(0, None)})
    assert reads == [db]


def test_several_live_lanes_are_kept_and_served_each_with_its_own_rows(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V3, db, design_conforming=True)  # a later engram: per-project lanes are live
    lane = f"cloud:{ENROLLED}"
    seq = journal(db, "s-x", lane=lane)
    findings, listed = kept(db)
    assert listed == {"cloud": ListedRows(0, None), lane: ListedRows(1, seq)}
    assert kept_document(db)["listed_rows"] == {"cloud": [0, None], lane: [1, seq]}
    assert [(finding.check, finding.target_key, finding.size) for finding in findings] == [
        ("project_lane_blocked", lane, 1)
    ]
    assert kept(db) == (findings, listed)
    assert reads == [db]
    assert fingerprint(db)["waiting"] == {"cloud": 0, lane: 1}


def test_without_the_cursor_the_state_dir_is_neither_read_nor_written(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    answer = kept(db, use_cursor=False)
    assert answer == full(db) and len(answer[0]) == 1
    assert not state.exists()
    kept(db)
    forged = kept_document(db) | {"findings": [], "listed_rows": {"cloud": [0, None]}}
    kept_file(db).write_text(json.dumps(forged), encoding="utf-8")
    assert kept(db) == ([], {"cloud": ListedRows(0, None)})  # the cursor trusts a kept file that matches
    reads.clear()
    assert kept(db, use_cursor=False) == answer  # a full read, whatever the state dir holds
    with EngramDb.open(db) as engram:
        assert kept_lane_findings(engram, use_cursor=False) == answer[0]
    assert reads == [db, db]
    assert kept_document(db) == forged


# The fingerprint


def test_the_fingerprint_is_every_input_read_exactly(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    assert fingerprint(db) == {
        "db": str(db),
        "schema": schema_of(db),
        "high_water": 9,
        "enrolled": [ENROLLED],
        "waiting": {"cloud": 3},  # the unenrolled project's rows too (the worker lists only enrolled ones)
        "sync_state": [
            ["cloud", "idle", None, 0, None],
            [f"cloud:{ENROLLED}", "pending", None, 0, None],
            ["cloud:stray-dir", "pending", None, 0, None],
        ],
        "derived_from": {"sessions": 2, "observations": 2, "user_prompts": 2},
    }


def test_a_fingerprint_on_a_later_schema_reads_its_lanes_and_retired_rows_as_the_worker_does(
    tmp_path: Path,
) -> None:
    db = tmp_path / "engram.db"
    build(V3, db, design_conforming=True)
    lane = f"cloud:{ENROLLED}"
    journal(db, "s-x", lane=lane)
    assert fingerprint(db) == {
        "db": str(db),
        "schema": schema_of(db),
        "high_water": 12,
        "enrolled": [ENROLLED],
        "waiting": {"cloud": 0, lane: 1},  # the quarantined and superseded rows wait no more
        "sync_state": [
            ["cloud", "idle", None, 0, None],
            [lane, "pending", None, 0, None],
            ["cloud:inbox", "inbox", None, 0, None],
            ["cloud:stray-dir", "pending", None, 0, None],
        ],
        "derived_from": {"sessions": 2, "observations": 2, "user_prompts": 2},
    }


def test_an_empty_journal_has_no_high_water(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    simulate(db, ("DELETE FROM sync_mutations", ()))
    assert (fingerprint(db)["high_water"], fingerprint(db)["waiting"]) == (None, {"cloud": 0})


def test_a_blob_in_sync_state_is_fingerprinted_exactly_and_kept_without_a_traceback(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    simulate(db, ("UPDATE sync_state SET last_error = ? WHERE target_key = 'cloud'", (b"\x00\xff",)))
    assert fingerprint(db)["sync_state"][0] == ["cloud", "idle", "x'00ff'", 0, None]
    first = kept(db)
    assert kept(db) == first and reads == [db]
    simulate(db, ("UPDATE sync_state SET last_error = ? WHERE target_key = 'cloud'", ("x'00ff'",)))
    assert fingerprint(db)["sync_state"][0] == ["cloud", "idle", "x'00ff'", 0, None]  # the text itself
    simulate(db, ("UPDATE sync_state SET last_error = ? WHERE target_key = 'cloud'", (b"\x00\xfe",)))
    assert fingerprint(db)["sync_state"][0][2] == "x'00fe'"


Change = Callable[[Path, int], None]


def _append(db: Path, seq: int) -> None:
    journal(db, "s-y")


def _ack_the_blocker(db: Path, seq: int) -> None:
    simulate(db, ("UPDATE sync_mutations SET acked_at = '2026-11-02 10:00:00' WHERE seq = ?", (seq,)))


def _degrade(db: Path, seq: int) -> None:
    simulate(
        db,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = 'push failed: 500', "
            "consecutive_failures = 3 WHERE target_key = 'cloud'",
            (),
        ),
    )


def _enroll(db: Path, seq: int) -> None:
    simulate(
        db,
        (
            "INSERT INTO sync_enrolled_projects (project, enrolled_at) VALUES ('late', '2026-11-02 10:00:00')",
            (),
        ),
    )


def _session_appears(db: Path, seq: int) -> None:
    simulate(
        db,
        (
            "INSERT INTO sessions (id, project, directory, started_at) "
            "VALUES ('s-x', ?, '/home/u/src/x', '2026-11-02 10:00:00')",
            (ENROLLED,),
        ),
    )


def _observation_appears(db: Path, seq: int) -> None:
    simulate(
        db,
        (
            "INSERT INTO observations (sync_id, session_id, type, title, content, project, created_at, "
            "updated_at) VALUES ('obs-new', 'sess-enrolled-app', 'decision', 't', 'c', ?, ?, ?)",
            (ENROLLED, "2026-11-02 10:00:00", "2026-11-02 10:00:00"),
        ),
    )


def _prompt_appears(db: Path, seq: int) -> None:
    simulate(
        db,
        (
            "INSERT INTO user_prompts (sync_id, session_id, content, project, created_at) "
            "VALUES ('prompt-new', 'sess-enrolled-app', 'p', ?, '2026-11-02 10:00:00')",
            (ENROLLED,),
        ),
    )


def _phantom_state(db: Path, seq: int) -> None:
    simulate(db, ("UPDATE sync_state SET lifecycle = 'degraded' WHERE target_key = 'cloud:stray-dir'", ()))


@pytest.mark.parametrize(
    ("change", "moved"),
    [
        (_append, {"high_water", "waiting"}),
        (_ack_the_blocker, {"waiting"}),
        (_degrade, {"sync_state"}),
        (_phantom_state, {"sync_state"}),
        (_enroll, {"enrolled"}),
        (_session_appears, {"derived_from"}),
        (_observation_appears, {"derived_from"}),
        (_prompt_appears, {"derived_from"}),
    ],
)
def test_each_input_moves_the_fingerprint_and_reads_the_lanes_again(
    tmp_path: Path, state: Path, reads: list[Path], change: Change, moved: set[str]
) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    before = fingerprint(db)
    kept(db)
    change(db, seq)
    after = fingerprint(db)
    assert {key for key in before if before[key] != after[key]} == moved
    assert kept(db) == full(db)
    assert reads == [db, db, db]  # the first check, the moved one, and full()
    assert kept_document(db)["fingerprint"] == after
    assert kept(db) == full(db) and len(reads) == 4  # served again from the new kept answer


def test_what_lane_health_does_not_read_leaves_the_fingerprint_alone(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    before = fingerprint(db)
    first = kept(db)
    simulate(
        db,
        ("UPDATE sync_state SET updated_at = '2026-11-03 10:00:00', last_enqueued_seq = 99", ()),
        (
            "UPDATE observations SET title = 'rewritten in place'",
            (),
        ),  # what LANE_STATE_MAX_AGE_SECONDS bounds
    )
    assert fingerprint(db) == before
    assert kept(db) == first and reads == [db]


# A stale kept answer is never served


def test_a_kept_ok_is_not_served_once_the_lane_degrades(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    journal(db, "s-ok", directory="/ok")  # a row the worker lists, that the cloud accepts
    assert kept(db)[0] == []
    _degrade(db, 0)
    (finding,) = kept(db)[0]
    assert finding.message.startswith("lane 'cloud' is degraded with 1 rows pending: the last push failed ")
    assert reads == [db, db]


def test_a_kept_ok_is_not_served_once_a_refused_rows_project_enrolls(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    seq = journal(db, "s-late", "late")  # not listed while `late` is not enrolled
    assert kept(db) == ([], {"cloud": ListedRows(0, None)})
    _enroll(db, seq)
    findings, listed = kept(db)
    assert [finding.evidence["blocking_seqs"] for finding in findings] == [[seq]]
    assert listed == {"cloud": ListedRows(1, seq)}


def test_a_blocker_that_became_repairable_is_answered_with_repair(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    (before,) = kept(db)[0]
    assert before.evidence["clear_command"] == f"engram-canary inbox drop --seq {seq} --db {db} --apply"
    _session_appears(db, seq)
    (after,) = kept(db)[0]
    assert after.evidence["clear_command"] == f"engram-canary repair --db {db} --apply"


def test_a_kept_answer_is_served_for_exactly_an_hour(
    tmp_path: Path, state: Path, reads: list[Path], clock: list[float]
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    first = kept(db)
    assert kept_document(db)["computed_at"] == NOW
    clock[0] = NOW + 3600.0
    assert kept(db) == first and reads == [db]  # an hour old: still fresh
    clock[0] = NOW + 3600.25
    assert kept(db) == first and reads == [db, db]  # older: read again, kept anew
    assert kept_document(db)["computed_at"] == NOW + 3600.25
    clock[0] = NOW + 7200.25
    assert kept(db) == first and reads == [db, db]


def forge(db: Path, **fields: Any) -> None:
    """Rewrite the kept file of a blocked lane to say OK, with these fields changed."""
    document = kept_document(db) | {"findings": [], "listed_rows": {"cloud": [0, None]}} | fields
    kept_file(db).write_text(json.dumps(document), encoding="utf-8")


@pytest.mark.parametrize(
    "stale",
    [
        {"schema": "engram-canary/lane-health/v3"},
        {"computed_at": NOW - 3601.0},
        {"computed_at": 0.0},
        {"fingerprint": None},
        {"fingerprint": {}},
    ],
    ids=["older-schema", "over-an-hour", "epoch", "null-fingerprint", "empty-fingerprint"],
)
def test_a_kept_ok_of_another_schema_age_or_fingerprint_is_never_served(
    tmp_path: Path, state: Path, reads: list[Path], clock: list[float], stale: dict[str, Any]
) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    answer = kept(db)
    forge(db)
    assert kept(db) == ([], {"cloud": ListedRows(0, None)})  # the forgery is served while it matches
    forge(db, **stale)
    assert kept(db) == answer
    assert len(answer[0]) == 1 and answer[1] == {"cloud": ListedRows(2, seq)}
    assert kept_document(db)["schema"] == LANE_STATE_SCHEMA


@pytest.mark.parametrize("field", ["db", "high_water", "enrolled", "waiting", "sync_state", "derived_from"])
def test_a_kept_ok_whose_fingerprint_differs_in_one_field_is_never_served(
    tmp_path: Path, state: Path, reads: list[Path], field: str
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    answer = kept(db)
    moved = fingerprint(db) | {field: "moved"}
    forge(db, fingerprint=moved)
    assert kept(db) == answer
    assert reads == [db, db]


# A damaged kept file


DAMAGED = {
    "empty": "",
    "truncated": '{"schema": "engram-canary/lane-health/v5", "fingerp',
    "null": "null",
    "a-list": "[]",
    "a-string": '"lane-health"',
    "no-fields": "{}",
}


@pytest.mark.parametrize("text", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_kept_file_is_recomputed_and_replaced(
    tmp_path: Path, state: Path, reads: list[Path], text: str
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    answer = kept(db)
    kept_file(db).write_text(text, encoding="utf-8")
    assert kept(db) == answer and reads == [db, db]
    assert kept_document(db)["fingerprint"] == fingerprint(db)
    assert kept(db) == answer and reads == [db, db]


WRONG_TYPED: dict[str, dict[str, Any]] = {
    "computed-at-text": {"computed_at": "soon"},
    "computed-at-null": {"computed_at": None},
    "no-computed-at": {"computed_at": ...},
    "no-schema": {"schema": ...},
    "no-fingerprint": {"fingerprint": ...},
    "no-findings": {"findings": ...},
    "no-listed-rows": {"listed_rows": ...},
    "findings-null": {"findings": None},
    "finding-invalid": {"findings": [{"check": "legacy_lane_blocked"}]},
    "finding-null": {"findings": [None]},
    "listed-rows-a-list": {"listed_rows": [["cloud", 0, None]]},
    "listed-rows-null": {"listed_rows": None},
    "lane-an-int": {"listed_rows": {"cloud": 5}},
    "lane-one-value": {"listed_rows": {"cloud": [0]}},
    "lane-three-values": {"listed_rows": {"cloud": [0, None, 1]}},
    "count-text": {"listed_rows": {"cloud": ["two", None]}},
    "count-null": {"listed_rows": {"cloud": [None, None]}},
    "first-text": {"listed_rows": {"cloud": [0, "first"]}},
    "first-a-list": {"listed_rows": {"cloud": [0, []]}},
}


@pytest.mark.parametrize("fields", list(WRONG_TYPED.values()), ids=list(WRONG_TYPED))
def test_a_wrong_typed_kept_file_is_recomputed_never_a_traceback(
    tmp_path: Path, state: Path, reads: list[Path], fields: dict[str, Any]
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    answer = kept(db)
    document = kept_document(db) | {"findings": [], "listed_rows": {"cloud": [0, None]}}
    for key, value in fields.items():
        if value is ...:
            del document[key]
        else:
            document[key] = value
    kept_file(db).write_text(json.dumps(document), encoding="utf-8")
    assert kept(db) == answer and reads == [db, db]
    assert kept_document(db)["listed_rows"] == {"cloud": [2, answer[1]["cloud"].first_seq]}


def test_a_kept_file_that_is_not_utf8_or_not_a_file_is_recomputed(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db, _, _ = blocked_v120(tmp_path)
    answer = kept(db)
    kept_file(db).write_bytes(b'{"schema": "\xff\xfe"}')
    assert kept(db) == answer and reads == [db, db]
    kept_file(db).unlink()
    kept_file(db).mkdir()
    assert kept(db) == answer and kept(db) == answer and reads == [db, db, db, db]


def test_kept_numbers_are_read_back_as_ints(tmp_path: Path, state: Path, reads: list[Path]) -> None:
    db, seq, _ = blocked_v120(tmp_path)
    answer = kept(db)
    document = kept_document(db) | {"listed_rows": {"cloud": [2.0, float(seq)]}}
    kept_file(db).write_text(json.dumps(document), encoding="utf-8")
    served = kept(db)
    assert served == answer and reads == [db]
    assert [type(value) for value in (served[1]["cloud"].count, served[1]["cloud"].first_seq)] == [int, int]


# What the worker does next, by engram version (read once, kept, served)

DEGRADED_V2 = (
    "lane 'cloud' is degraded with 1 rows pending: the last push failed (push failed: 500); no pending row "
    "fails the push contract, so fix what the error names; a running worker retries when its backoff ends, "
    "at most 5 minutes apart (predicted from source: v2/v3 keep retrying past 10 failures)"
)


@pytest.mark.parametrize(("version", "retry"), [(V120, "engram does not retry it: after 10"), (V2, None)])
def test_a_degraded_lane_says_whether_this_versions_worker_retries(
    tmp_path: Path, state: Path, reads: list[Path], version: str, retry: str | None
) -> None:
    db = tmp_path / "engram.db"
    build(version, db)
    journal(db, "s-ok", directory="/ok")
    simulate(
        db,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = 'push failed: 500', "
            "consecutive_failures = 10 WHERE target_key = 'cloud'",
            (),
        ),
    )
    (finding,) = kept(db)[0]
    (served,) = kept(db)[0]
    assert served == finding and reads == [db]
    if retry is None:
        assert finding.message == DEGRADED_V2
    else:
        prefix = DEGRADED_V2.split("; a running worker")[0]
        assert finding.message == (
            f"{prefix}; {retry} consecutive failures v1.20's worker stops until the process restarts "
            f"(10 recorded); once the error is fixed, {RESTART_ADVICE}"
        )
    assert (finding.evidence["consecutive_failures"], finding.evidence["lifecycle"]) == (10, "degraded")


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        (("idle", None, 0, None), ("idle", None, 0, None)),
        (("", "", 0, ""), (None, None, 0, None)),
        (("  ", None, 0, "  "), ("  ", None, 0, None)),  # lifecycle is NOT NULL; a blank one is kept as read
        (("degraded", "push failed: 500", 3, "http_500"), ("degraded", "push failed: 500", 3, "http_500")),
    ],
    ids=["idle", "empty-text", "blank-or-null", "degraded"],
)
def test_a_kept_finding_holds_the_lanes_sync_state_as_read(
    tmp_path: Path,
    state: Path,
    reads: list[Path],
    stored: tuple[str, str | None, int, str | None],
    read: tuple[str | None, str | None, int, str | None],
) -> None:
    db, seq, after = blocked_v120(tmp_path)
    simulate(
        db,
        (
            "UPDATE sync_state SET lifecycle = ?, last_error = ?, consecutive_failures = ?, reason_code = ? "
            "WHERE target_key = 'cloud'",
            stored,
        ),
    )
    (finding,) = kept(db)[0]
    lifecycle, last_error, failures, reason_code = read
    assert finding.evidence == {
        "target_key": "cloud",
        "lifecycle": lifecycle,
        "last_error": last_error,
        "consecutive_failures": failures,
        "reason_code": reason_code,
        "pending_rows": 2,
        "held_back_rows": 1,
        "held_back_by_project": {ENROLLED: 1},
        "blocking_seqs": [seq],
        "blocking_rows": 1,
        "reason": NO_DIRECTORY,
        "reasons": {NO_DIRECTORY: 1},
        "clear_command": f"engram-canary inbox drop --seq {seq} --db {db} --apply",
        "clear_commands": [f"engram-canary inbox drop --seq {seq} --db {db} --apply"],
    }
    assert kept(db)[0] == [finding] and reads == [db]


def test_an_engram_upgrade_in_place_reads_the_lanes_again(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    journal(db, "s-ok", directory="/ok")
    simulate(
        db,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = 'push failed: 500', "
            "consecutive_failures = 10 WHERE target_key = 'cloud'",
            (),
        ),
    )
    (v120,) = kept(db)[0]
    assert "engram does not retry it" in v120.message  # v1.20's worker stops at 10 failures
    simulate(  # SIMULATES LEGACY DATA: a later v1.x's migration adds the disposition column, rows untouched
        db,
        ("ALTER TABLE sync_mutations ADD COLUMN disposition TEXT NOT NULL DEFAULT 'pending'", ()),
        ("PRAGMA user_version = 9", ()),
    )
    (upgraded,) = full(db)[0]
    assert "a running worker retries when its backoff ends, at most 5 minutes apart" in upgraded.message
    assert kept(db)[0] == [upgraded]


def test_a_kept_finding_counts_rows_before_between_and_behind_its_blockers(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V120, db)
    first = journal(db, "s-first", directory="/ok")  # delivered before the block: pending, not held back
    x, y = journal(db, "s-x"), journal(db, "s-y")
    journal(db, "s-ok1", directory="/ok")
    journal(db, "s-ok2", directory="/ok")
    findings, listed = kept(db)
    assert listed == {"cloud": ListedRows(5, first)}
    (finding,) = findings
    command = f"engram-canary inbox drop --seq {x},{y} --db {db} --apply"
    assert finding.message == (
        f"lane 'cloud' is blocked: the cloud refuses seq {x} (session, project {ENROLLED!r}: {NO_DIRECTORY}) "
        f"and 1 more; 2 rows wait behind it ({ENROLLED}: 2); clear it with: {command}"
    )
    assert finding.size == 4  # the two blockers and the two rows behind them
    assert {key: finding.evidence[key] for key in ("pending_rows", "held_back_rows", "blocking_rows")} == {
        "pending_rows": 5,
        "held_back_rows": 2,
        "blocking_rows": 2,
    }
    assert (finding.evidence["blocking_seqs"], finding.evidence["reasons"]) == ([x, y], {NO_DIRECTORY: 2})
    assert kept(db) == (findings, listed) and reads == [db]


def test_a_kept_degraded_finding_holds_exactly_its_evidence(
    tmp_path: Path, state: Path, reads: list[Path]
) -> None:
    db = tmp_path / "engram.db"
    build(V2, db)
    first = journal(db, "s-ok", directory="/ok")
    journal(db, "s-ok2", directory="/ok")
    _degrade(db, 0)
    (finding,) = kept(db)[0]
    assert (finding.check, finding.severity, finding.target_key, finding.size) == (
        "legacy_lane_blocked",
        "critical",
        "cloud",
        2,
    )
    assert finding.evidence == {
        "target_key": "cloud",
        "lifecycle": "degraded",
        "last_error": "push failed: 500",
        "consecutive_failures": 3,
        "reason_code": None,
        "pending_rows": 2,
        "held_back_rows": 2,
        "held_back_by_project": {ENROLLED: 2},
        "blocking_seqs": [first],
        "blocking_rows": 0,
        "reason": "push failed: 500",
        "reasons": {},
        "clear_command": None,
        "clear_commands": [],
    }
    assert kept(db)[0] == [finding] and reads == [db]


def schema_of(db: Path) -> dict[str, int]:
    """The file's PRAGMA user_version and schema_version (SQLite's cookie, moved by every schema change)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        return {
            "user_version": int(connection.execute("PRAGMA user_version").fetchone()[0]),
            "cookie": int(connection.execute("PRAGMA schema_version").fetchone()[0]),
        }


def test_a_kept_answer_stamped_in_the_future_is_not_served(
    tmp_path: Path, state: Path, reads: list[Path], clock: list[float]
) -> None:
    """A clock stepped back makes a kept answer's stamp lie in the future: its age is unknown, so the lanes
    are read again (the hour bound holds whichever way the clock moved)."""
    db = tmp_path / "engram.db"
    build(V120, db)
    kept(db)
    kept(db)
    assert reads == [db]  # the second was the kept answer
    clock[0] -= 1  # one second before the kept answer's stamp
    kept(db)
    assert reads == [db, db]
