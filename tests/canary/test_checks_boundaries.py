"""Boundaries of canary.checks' rules that `make mutation` found unpinned.

Every database here is the v1.20.0 schema fixture filled by engram_schemas.builder (the simulated v1.20
home: `enrolled-app` delivered on `cloud`, three legacy rows on `cloud:enrolled-app`, the unenrolled
`stray-dir` waiting on `cloud` and its phantom `cloud:stray-dir` sync_state row). Whatever is added on top
is written straight into engram's tables by `simulate_legacy_data`, and SIMULATES LEGACY DATA: rows an
older engram, another writer or a damaged file left behind. The findings, their severity, message and
every evidence field are pinned with exact values, so a changed count, key or boundary shows.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from engram_schemas.builder import ALL_TIME, ENROLLED, PHANTOM_TARGET, STRAY, V3, V120, build

from engram_sync_kit.canary.baseline import Baseline, BaselineEntry, db_key
from engram_sync_kit.canary.checks import (
    PROJECT_QUERIES_BEFORE_ONE_SCAN,
    UNDELIVERED_PROJECT_LANE,
    EvidenceReader,
    TargetSpace,
    check_connection,
    check_snapshot,
    count_findings,
    foreign_target_findings,
    load_evidence,
    mutation_targets_since,
    now_iso,
    orphaned_remote_note,
    read_target_space,
    run_check,
    save_evidence,
    stuck_rows,
    summarize,
    unacked_by_target,
    undelivered_lane_findings,
    unknown_result,
)
from engram_sync_kit.canary.config import CanaryConfig, Thresholds, state_file_for
from engram_sync_kit.canary.db import EngramDb, Schema
from engram_sync_kit.canary.findings import (
    FOREIGN_CHECKS,
    FOREIGN_MUTATION_TARGET,
    FOREIGN_SYNC_TARGET,
    Acknowledgement,
    Finding,
    Status,
)

ORPHAN_KEY = "cloud@" + "d5a7e45acb19"  # a remote's state key; no cloud.json next to the file: orphaned
INERT = "satellite:inert"
GHOST = "cloud:ghost"  # journal rows on a lane sync_state never had
BAD_KEY_BYTES = b"cloud:caf\xff"  # a target key that is not valid UTF-8
BAD_KEY = "cloud:caf\ufffd"  # ... as the canary reads it
UNNORMALIZED = " Stray-Dir "  # a project name that normalizes to `stray-dir`
V120_NOTE = (
    "engram v1.20 journals every mutation in the legacy 'cloud' lane with a project column; "
    "project_unacked_rows counts unacked rows (any lane) whose project maps to this target"
)
ORPHAN_NOTE = (
    "orphaned: no remote in cloud.json has id d5a7e45acb19 (a per-project remote's state key; a removed "
    "remote or a rotated token leaves one behind; engram's doctor warns orphaned remote sync state)"
)

Row = tuple[str | bytes, str | bytes, bool]  # target_key, project (text, maybe not valid UTF-8), acked


def simulate_legacy_data(
    db: Path,
    *,
    enrolled: Iterable[str] = (),
    sync_state: Iterable[tuple[str, str, int, int]] = (),
    rows: Iterable[Row] = (),
) -> None:
    """SIMULATES LEGACY DATA: enrolled projects, sync_state rows (key, lifecycle, last enqueued and acked
    seq) and journal rows, straight into engram's tables in one transaction. Keys and projects given as
    bytes are stored as TEXT with exactly those bytes (a damaged file's), so they need not be UTF-8."""
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("BEGIN IMMEDIATE")
        for name in enrolled:
            connection.execute(
                "INSERT INTO sync_enrolled_projects (project, enrolled_at) VALUES (?, ?)", (name, ALL_TIME)
            )
        for key, lifecycle, enqueued, acked_seq in sync_state:
            connection.execute(
                "INSERT INTO sync_state (target_key, lifecycle, last_enqueued_seq, last_acked_seq, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (key, lifecycle, enqueued, acked_seq, ALL_TIME),
            )
        for number, (target, project, acked) in enumerate(rows):
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project, occurred_at, "
                "acked_at) VALUES (CAST(? AS TEXT), 'observation', ?, 'upsert', '{}', CAST(? AS TEXT), ?, ?)",
                (target, f"obs-legacy-{number}", project, ALL_TIME, ALL_TIME if acked else None),
            )
        connection.execute("COMMIT")


# The builder leaves seq 1-3 on `cloud` (enrolled-app, acked), 4-6 on `cloud:enrolled-app` (unacked) and
# 7-9 on `cloud` (stray-dir, unacked); these follow as seq 10-23.
LEGACY_ROWS: list[Row] = [
    ("cloud:alpha", "alpha", True),  # 10: an enrolled lane with nothing waiting
    ("cloud:zeta", "zeta", True),  # 11
    ("cloud:zeta", "zeta", False),  # 12: an enrolled lane with one row waiting
    ("cloud", UNNORMALIZED, False),  # 13: a second project name that maps to cloud:stray-dir
    ("cloud", UNNORMALIZED, False),  # 14
    ("cloud", UNNORMALIZED, True),  # 15: acked, counted nowhere as waiting
    (GHOST, UNNORMALIZED, False),  # 16: the same project on a second lane
    (PHANTOM_TARGET, "", True),  # 17: the phantom's own lane, a row without a project
    (PHANTOM_TARGET, "", False),  # 18
    (GHOST, "", True),  # 19
    (GHOST, "", False),  # 20
    (BAD_KEY_BYTES, "", False),  # 21
    (BAD_KEY_BYTES, "", False),  # 22
    (PHANTOM_TARGET, STRAY, True),  # 23: acked on the phantom's lane
]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder's v1.20 home plus LEGACY_ROWS: read only, so one file serves the module."""
    db = tmp_path_factory.mktemp("journal") / "engram.db"
    build(V120, db)
    simulate_legacy_data(
        db,
        enrolled=["alpha", "zeta"],
        sync_state=[
            ("cloud:alpha", "healthy", 10, 10),
            ("cloud:zeta", "pending", 12, 11),
            (INERT, "healthy", 5, 5),
            (ORPHAN_KEY, "idle", 0, 0),
        ],
        rows=LEGACY_ROWS,
    )
    return db


@contextmanager
def snapshot(db: Path) -> Iterator[EngramDb]:
    with EngramDb.open(db) as engram, engram.read_transaction():
        yield engram


@contextmanager
def statements(engram: EngramDb) -> Iterator[list[str]]:
    """The SQL statements the connection runs inside the block."""
    seen: list[str] = []
    engram.connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        engram.connection.set_trace_callback(None)


def reader_of(engram: EngramDb, space: TargetSpace) -> EvidenceReader:
    # As check_snapshot builds it.
    return EvidenceReader(engram, journal_targets=space.mutation_targets, stored_keys=space.stored_keys)


def config(critical_unacked_rows: int) -> CanaryConfig:
    return CanaryConfig(thresholds=Thresholds(critical_unacked_rows=critical_unacked_rows))


@pytest.mark.parametrize(
    ("evidence", "rows"),
    [
        ({}, 0),
        ({"unacked_rows": None, "project_unacked_rows": None}, 0),
        ({"unacked_rows": 0, "project_unacked_rows": 0}, 0),
        ({"unacked_rows": 2}, 2),
        ({"project_unacked_rows": 3}, 3),
        ({"unacked_rows": 2, "project_unacked_rows": 3}, 5),
        ({"unacked_rows": None, "project_unacked_rows": 1}, 1),
    ],
)
def test_stuck_rows_add_the_targets_own_and_its_projects_unacked_rows(
    evidence: dict[str, Any], rows: int
) -> None:
    assert stuck_rows(evidence) == rows


def test_an_orphaned_remote_key_names_its_id_and_why_it_is_left() -> None:
    assert orphaned_remote_note(ORPHAN_KEY) == ORPHAN_NOTE


def test_the_target_space_of_a_snapshot(journal: Path) -> None:
    with snapshot(journal) as engram:
        space = read_target_space(engram, ["extra:one"])
    assert space.enrolled == ["alpha", ENROLLED, "zeta"]
    assert space.allowed == {
        "cloud",
        "cloud:inbox",
        "local",
        "cloud:alpha",
        f"cloud:{ENROLLED}",
        "cloud:zeta",
        "extra:one",
    }
    assert space.mutation_targets == {
        "cloud",
        "cloud:alpha",
        f"cloud:{ENROLLED}",
        "cloud:zeta",
        PHANTOM_TARGET,
        GHOST,
        BAD_KEY,
    }
    assert sorted(space.sync_state) == sorted(
        ["cloud", "cloud:alpha", f"cloud:{ENROLLED}", PHANTOM_TARGET, "cloud:zeta", ORPHAN_KEY, INERT]
    )
    assert space.last_seq == 23
    # Only the key whose stored bytes differ from its text is kept (valid keys are found by their text).
    assert space.stored_keys == {BAD_KEY: BAD_KEY_BYTES}
    assert space.foreign_sync_targets() == [PHANTOM_TARGET, ORPHAN_KEY, INERT]
    assert space.foreign_mutation_targets() == [BAD_KEY, GHOST, PHANTOM_TARGET]


def test_the_target_space_takes_the_callers_journal_view(journal: Path) -> None:
    """The watcher passes the keys and last seq it already knows: neither is read again."""
    with snapshot(journal) as engram:
        space = read_target_space(engram, mutations=({"cloud", GHOST}, 99))
    assert space.mutation_targets == {"cloud", GHOST}
    assert space.last_seq == 99
    assert space.stored_keys == {}
    assert space.allowed == {
        "cloud",
        "cloud:inbox",
        "local",
        "cloud:alpha",
        f"cloud:{ENROLLED}",
        "cloud:zeta",
    }
    assert space.foreign_mutation_targets() == [GHOST]


def expected_foreign_findings(critical_unacked_rows: int) -> list[Finding]:
    def severity(rows: int) -> str:
        return "critical" if rows >= critical_unacked_rows else "warning"

    def mutation_target(
        key: str, *, rows: int, seqs: tuple[int, int], unacked: int, in_sync_state: bool
    ) -> Finding:
        return Finding(
            check=FOREIGN_MUTATION_TARGET,
            severity=severity(unacked),
            message=f"{rows} sync_mutations rows target {key}, outside the closed target space ({unacked} unacked)",
            target_key=key,
            size=unacked,
            evidence={
                "target_key": key,
                "rows": rows,
                "first_seq": seqs[0],
                "last_seq": seqs[1],
                "unacked_rows": unacked,
                "in_sync_state": in_sync_state,
            },
        )

    state = {"last_enqueued_seq": 0, "last_acked_seq": 0, "updated_at": ALL_TIME}
    empty = {"unacked_rows": 0, "projects": [], "project_unacked_rows": 0, "project_unacked_by_lane": {}}
    return [
        Finding(
            check=FOREIGN_SYNC_TARGET,
            severity=severity(7),
            message=f"sync target {PHANTOM_TARGET} is outside the closed target space (7 unacked rows)",
            target_key=PHANTOM_TARGET,
            size=7,
            evidence={
                "target_key": PHANTOM_TARGET,
                "lifecycle": "pending",
                **state,
                "unacked_rows": 1,  # seq 18; 17 and 23 are acked
                "projects": [UNNORMALIZED, STRAY],
                "project_unacked_rows": 6,
                "project_unacked_by_lane": {"cloud": 5, GHOST: 1},  # seq 7-9, 13, 14 and seq 16
                "note": V120_NOTE,
            },
        ),
        Finding(
            check=FOREIGN_SYNC_TARGET,
            severity=severity(0),
            message=f"sync target {ORPHAN_KEY} is outside the closed target space (0 unacked rows)",
            target_key=ORPHAN_KEY,
            size=0,
            evidence={
                "target_key": ORPHAN_KEY,
                "lifecycle": "idle",
                **state,
                **empty,
                "note": V120_NOTE,
                "remote_state": ORPHAN_NOTE,
            },
        ),
        Finding(
            check=FOREIGN_SYNC_TARGET,
            severity=severity(0),
            message=f"sync target {INERT} is outside the closed target space (0 unacked rows)",
            target_key=INERT,
            size=0,
            evidence={
                "target_key": INERT,
                "lifecycle": "healthy",
                "last_enqueued_seq": 5,
                "last_acked_seq": 5,
                "updated_at": ALL_TIME,
                **empty,
                "note": V120_NOTE,
            },
        ),
        mutation_target(BAD_KEY, rows=2, seqs=(21, 22), unacked=2, in_sync_state=False),
        mutation_target(GHOST, rows=3, seqs=(16, 20), unacked=2, in_sync_state=False),
        mutation_target(PHANTOM_TARGET, rows=3, seqs=(17, 23), unacked=1, in_sync_state=True),
    ]


@pytest.mark.parametrize("critical_unacked_rows", [1, 2, 7, 8])
def test_foreign_targets_are_critical_from_exactly_the_threshold(
    journal: Path, critical_unacked_rows: int
) -> None:
    """1: every target with a row waiting is critical (the phantom's journal lane at exactly 1); 2: the
    mutation targets with 2; 7: only the phantom (7 = its 1 own + 6 of its projects); 8: none."""
    with snapshot(journal) as engram:
        space = read_target_space(engram)
        reader = reader_of(engram, space)
        findings = foreign_target_findings(space, reader, config(critical_unacked_rows))
    assert findings == expected_foreign_findings(critical_unacked_rows)
    assert [f.severity for f in findings].count("critical") == {1: 4, 2: 3, 7: 1, 8: 0}[critical_unacked_rows]
    # What a state-dir cache keeps: the one foreign target with projects; targets without any ask nothing.
    assert reader.answered == {f"{UNNORMALIZED}\x1f{STRAY}": {"cloud": 5, GHOST: 1}}


def test_only_the_wanted_foreign_targets_are_reported(journal: Path) -> None:
    """The watcher asks for the targets it has not reported yet; the ones before them in key order are
    skipped, not the end of the list."""
    with snapshot(journal) as engram:
        space = read_target_space(engram)
        wanted = foreign_target_findings(
            space, reader_of(engram, space), config(100), only=[INERT, PHANTOM_TARGET]
        )
        nothing = foreign_target_findings(space, reader_of(engram, space), config(100), only=[])
    assert [(f.check, f.target_key) for f in wanted] == [
        (FOREIGN_SYNC_TARGET, PHANTOM_TARGET),
        (FOREIGN_SYNC_TARGET, INERT),
        (FOREIGN_MUTATION_TARGET, PHANTOM_TARGET),
    ]
    everything = expected_foreign_findings(100)
    assert wanted == [everything[0], everything[2], everything[5]]
    assert nothing == []


def test_an_allowed_project_lane_with_rows_waiting_never_delivers(journal: Path) -> None:
    """cloud:alpha has only acked rows (no finding, and the lanes after it are still read); the legacy,
    inbox and local lanes and every foreign key are never such a lane."""
    with snapshot(journal) as engram:
        space = read_target_space(engram)
        findings = undelivered_lane_findings(space, reader_of(engram, space))
    tail = "; engram's worker delivers only from the legacy lane 'cloud', so they never deliver (design, Problem 6)"
    assert findings == [
        Finding(
            check=UNDELIVERED_PROJECT_LANE,
            severity="warning",
            message=f"3 unacked rows wait on per-project lane cloud:{ENROLLED}{tail}",
            target_key=f"cloud:{ENROLLED}",
            size=3,
            evidence={
                "target_key": f"cloud:{ENROLLED}",
                "rows": 3,
                "first_seq": 4,
                "last_seq": 6,
                "unacked_rows": 3,
            },
        ),
        Finding(
            check=UNDELIVERED_PROJECT_LANE,
            severity="warning",
            message=f"1 unacked rows wait on per-project lane cloud:zeta{tail}",
            target_key="cloud:zeta",
            size=1,
            evidence={
                "target_key": "cloud:zeta",
                "rows": 2,
                "first_seq": 11,
                "last_seq": 12,
                "unacked_rows": 1,
            },
        ),
    ]
    assert UNDELIVERED_PROJECT_LANE == "undelivered_project_lane"


def test_a_key_outside_the_journal_is_answered_without_a_query(journal: Path) -> None:
    with snapshot(journal) as engram:
        known = EvidenceReader(engram, journal_targets=frozenset({GHOST}))
        with statements(engram) as seen:
            assert known.unacked_on_target(INERT) == 0
            assert seen == []
            assert known.unacked_on_target(GHOST) == 2
            assert known.unacked_on_target(GHOST) == 2  # the memo
        assert len(seen) == 1
        plain = EvidenceReader(engram)  # no journal view: every key is counted
        assert [plain.unacked_on_target(key) for key in (GHOST, INERT, "cloud", PHANTOM_TARGET)] == [
            2,
            0,
            5,
            1,
        ]


def test_a_key_that_is_not_utf8_is_counted_by_its_stored_bytes(journal: Path) -> None:
    with snapshot(journal) as engram:
        told = EvidenceReader(engram, stored_keys={BAD_KEY: BAD_KEY_BYTES})
        assert told.unacked_on_target(BAD_KEY) == 2
        assert told.rows_on_target(BAD_KEY) == {"rows": 2, "first_seq": 21, "last_seq": 22}
        assert told.rows_on_target(GHOST) == {"rows": 3, "first_seq": 16, "last_seq": 20}
        # Without the stored bytes the text (with U+FFFD) matches no row.
        untold = EvidenceReader(engram)
        assert untold.unacked_on_target(BAD_KEY) == 0
        assert untold.rows_on_target(BAD_KEY) == {"rows": 0, "first_seq": None, "last_seq": None}


def test_projects_map_to_a_target_by_their_normalized_name(journal: Path) -> None:
    with snapshot(journal) as engram:
        reader = EvidenceReader(engram)
        assert reader.projects_mapping_to(PHANTOM_TARGET) == [UNNORMALIZED, STRAY]
        assert reader.projects_mapping_to(f"cloud:{ENROLLED}") == [ENROLLED]
        assert reader.projects_mapping_to("cloud:zeta") == ["zeta"]
        assert reader.projects_mapping_to(INERT) == []
        assert reader.projects_mapping_to("cloud") == []  # the empty project maps to no target here


def test_project_counts_per_lane_by_query_and_by_one_scan(journal: Path) -> None:
    """Two names of one project on two lanes, and a project with no row waiting: the same answer from
    one query per target and from the one scan."""
    projects = [UNNORMALIZED, STRAY, "alpha"]
    with snapshot(journal) as engram:
        queried = EvidenceReader(engram)
        assert queried.project_unacked(projects) == {"cloud": 5, GHOST: 1}
        assert queried.project_unacked([STRAY]) == {"cloud": 3}
        assert queried.project_unacked(["alpha"]) == {}
        assert queried.answered == {
            "\x1f".join(projects): {"cloud": 5, GHOST: 1},
            STRAY: {"cloud": 3},
            "alpha": {},
        }
        scanned = EvidenceReader(engram)
        scanned.read_unacked_by_project()
        with statements(engram) as seen:
            assert scanned.project_unacked(projects) == {"cloud": 5, GHOST: 1}
            assert scanned.project_unacked(["zeta", "alpha"]) == {"cloud:zeta": 1}
            assert scanned.project_unacked(["alpha"]) == {}
        assert seen == []


def test_no_projects_ask_nothing(journal: Path) -> None:
    with snapshot(journal) as engram:
        reader = EvidenceReader(engram)
        with statements(engram) as seen:
            assert reader.project_unacked([]) == {}
        assert seen == []
        assert reader.answered == {}


def test_past_the_query_budget_one_scan_answers_the_rest(journal: Path) -> None:
    assert PROJECT_QUERIES_BEFORE_ONE_SCAN == 32
    with snapshot(journal) as engram:
        reader = EvidenceReader(engram)
        with statements(engram) as seen:
            answers = [reader.project_unacked([STRAY]) for _ in range(32)]
            assert len(seen) == 32
            assert all("GROUP BY target_key" in statement for statement in seen)
            answers.append(reader.project_unacked([STRAY]))  # the 33rd: the scan
            assert len(seen) == 33
            assert "GROUP BY project, target_key" in seen[-1]
            answers.append(reader.project_unacked([UNNORMALIZED, STRAY]))
            assert len(seen) == 33
    assert answers == [{"cloud": 3}] * 33 + [{"cloud": 5, GHOST: 1}]


def test_kept_answers_are_used_and_reported_as_answered(journal: Path) -> None:
    kept = {f"{UNNORMALIZED}\x1f{STRAY}": {"cloud": 9}}
    with snapshot(journal) as engram:
        reader = EvidenceReader(engram, kept=kept)
        with statements(engram) as seen:
            assert reader.project_unacked([UNNORMALIZED, STRAY]) == {"cloud": 9}
        assert seen == []
        assert reader.answered == kept
        # Another list of the same projects is another question: read, not taken from what was kept.
        assert reader.project_unacked([STRAY]) == {"cloud": 3}
        assert reader.answered == {**kept, STRAY: {"cloud": 3}}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builder's home plus bytes another writer or a damaged file left: two lanes whose stored keys
    differ but read the same, and a project that is not valid UTF-8."""
    db = tmp_path_factory.mktemp("damaged") / "engram.db"
    build(V120, db)
    simulate_legacy_data(
        db,
        rows=[
            (b"cloud:caf\xfe", STRAY, False),
            (b"cloud:caf\xff", STRAY, False),
            (b"cloud:caf\xff", STRAY, True),
            ("cloud", b"b\xe4r", False),
            ("cloud", b"b\xe4r", False),
            ("cloud:other", b"b\xe4r", False),
        ],
    )
    return db


def test_lanes_that_read_the_same_are_added_up(damaged: Path) -> None:
    with snapshot(damaged) as engram:
        queried = EvidenceReader(engram)
        scanned = EvidenceReader(engram)
        scanned.read_unacked_by_project()
        assert queried.project_unacked([STRAY]) == {"cloud": 3, BAD_KEY: 2}
        assert scanned.project_unacked([STRAY]) == {"cloud": 3, BAD_KEY: 2}


def test_a_project_that_is_not_utf8_is_found_by_its_stored_bytes(damaged: Path) -> None:
    project = "b\ufffdr"
    with snapshot(damaged) as engram:
        queried = EvidenceReader(engram)
        assert queried.projects_mapping_to(f"cloud:{project}") == [project]
        assert queried.project_unacked([project]) == {"cloud": 2, "cloud:other": 1}
        scanned = EvidenceReader(engram)
        assert scanned.projects_mapping_to(f"cloud:{project}") == [project]
        scanned.read_unacked_by_project()
        assert scanned.project_unacked([project]) == {"cloud": 2, "cloud:other": 1}
        # Asked before the projects were read, the text is all there is: no row has these bytes.
        assert EvidenceReader(engram).project_unacked([project]) == {}


def without_columns(engram: EngramDb, *columns: str) -> EngramDb:
    """The same file read as one whose sync_mutations lacks these columns (an older engram's)."""
    schema = engram.schema
    reduced = {**schema.columns, "sync_mutations": schema.columns["sync_mutations"] - set(columns)}
    return EngramDb(engram.path, engram.connection, Schema(reduced, schema.user_version, schema.cookie))


def test_without_acked_at_no_unacked_count_is_claimed(journal: Path) -> None:
    with snapshot(journal) as engram:
        reader = EvidenceReader(without_columns(engram, "acked_at"))
        assert reader.unacked_on_target(GHOST) is None
        assert reader.project_unacked([STRAY]) == {}
        reader.read_unacked_by_project()
        assert reader.project_unacked([STRAY]) == {}
        evidence = reader.sync_target_evidence(read_target_space(engram).sync_state[PHANTOM_TARGET])
    assert evidence["unacked_rows"] is None
    assert (evidence["projects"], evidence["project_unacked_rows"], evidence["project_unacked_by_lane"]) == (
        [UNNORMALIZED, STRAY],
        0,
        {},
    )


def test_without_a_project_column_no_project_is_named(journal: Path) -> None:
    with snapshot(journal) as engram:
        space = read_target_space(engram)
        reader = EvidenceReader(without_columns(engram, "project"))
        assert reader.projects_mapping_to(PHANTOM_TARGET) == []
        evidence = reader.sync_target_evidence(space.sync_state[PHANTOM_TARGET])
    assert evidence == {
        "target_key": PHANTOM_TARGET,
        "lifecycle": "pending",
        "last_enqueued_seq": 0,
        "last_acked_seq": 0,
        "updated_at": ALL_TIME,
        "unacked_rows": 1,
    }


def test_a_generation_with_engrams_own_repair_names_it(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    build(V3, db)
    with snapshot(db) as engram:
        space = read_target_space(engram)
        (finding,) = foreign_target_findings(space, reader_of(engram, space), config(3))
    assert (finding.check, finding.severity, finding.size) == (FOREIGN_SYNC_TARGET, "critical", 3)
    assert finding.evidence == {
        "target_key": PHANTOM_TARGET,
        "lifecycle": "pending",
        "last_enqueued_seq": 0,
        "last_acked_seq": 0,
        "updated_at": ALL_TIME,
        "unacked_rows": 0,
        "projects": [STRAY],
        "project_unacked_rows": 3,
        "project_unacked_by_lane": {"cloud": 3},
        "note": (
            "engram v3 (schema of store.go @d4397781) (predicted from source, internal/store/store.go@d4397781, "
            "internal/server/server.go@d4397781) journals only enrolled projects, in the legacy 'cloud' lane, and "
            "never writes a 'cloud:<project>' row for an unenrolled one: this target is a legacy row from before "
            "the upgrade; project_unacked_rows counts unacked rows (any lane) whose project maps to this target"
        ),
        "repair": (
            "engram doctor repair --check sync_target_closed_space (engram's own repair: retargets the pending "
            "rows of enrolled projects to 'cloud' and removes a target that keeps no rows; predicted from "
            "CleanupForeignSyncTargets @d4397781)"
        ),
    }


def test_kept_evidence_is_read_back_while_the_rows_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    db = tmp_path / "engram.db"
    fingerprint: dict[str, Any] = {"last_seq": 9, "unacked": {"cloud": 3}, "waiting": ""}
    answers = {f"{UNNORMALIZED}\x1f{STRAY}": {"cloud": 5, GHOST: 1}}
    before = time.time()
    save_evidence(db, fingerprint, answers)
    path = state_file_for(db, "evidence")
    assert path.parent == tmp_path / "state" and path.name.startswith("evidence-")
    document = json.loads(path.read_text(encoding="utf-8"))
    assert sorted(document) == ["answers", "computed_at", "fingerprint"]
    assert (document["fingerprint"], document["answers"]) == (fingerprint, answers)
    assert before <= document["computed_at"] <= time.time()
    assert load_evidence(db, fingerprint) == answers
    assert load_evidence(db, {**fingerprint, "last_seq": 10}) == {}


def test_a_phantoms_own_rows_of_its_project_are_counted_once(tmp_path: Path) -> None:
    """Legacy rows an older engram left on `cloud:<project>` carry that project (upstream #264, #1013, as
    the builder's `cloud:enrolled-app` rows do); once the project is not enrolled, its 3 rows on `cloud`
    and its 3 rows on the phantom's own lane are 6 rows waiting, not 9."""
    db = tmp_path / "engram.db"
    build(V120, db)
    simulate_legacy_data(db, rows=[(PHANTOM_TARGET, STRAY, False)] * 3)
    with snapshot(db) as engram:
        space = read_target_space(engram)
        sync_findings = foreign_target_findings(
            space, reader_of(engram, space), config(7), only=[PHANTOM_TARGET]
        )
    finding = sync_findings[0]
    assert (finding.evidence["unacked_rows"], finding.evidence["project_unacked_by_lane"]) == (
        3,
        {"cloud": 3, PHANTOM_TARGET: 3},
    )
    assert (
        finding.message == f"sync target {PHANTOM_TARGET} is outside the closed target space (6 unacked rows)"
    )
    assert (finding.size, finding.severity) == (6, "warning")


ALLOWED = ["cloud", "cloud:alpha", f"cloud:{ENROLLED}", "cloud:inbox", "cloud:zeta", "local"]
UNACKED_BY_TARGET = {
    "cloud": 5,
    "cloud:alpha": 0,
    BAD_KEY: 2,
    f"cloud:{ENROLLED}": 3,
    GHOST: 2,
    PHANTOM_TARGET: 1,
    "cloud:zeta": 1,
}
SUMMARY_KEYS = sorted(
    "acknowledged_findings engram_schema enrolled_projects foreign_mutation_targets foreign_sync_targets "
    "foreign_targets inbox_keys known_foreign_targets lane_model last_seq legacy_target "
    "never_acknowledged_foreign_targets new_foreign_targets other_findings pull_side remote_state_keys stage_a "
    "sync_liveness sync_state_targets unacked_rows unacked_rows_by_target unacknowledged_findings "
    "undecodable_payloads".split()
)
CURSOR_KINDS = ["evidence", "inbox-cursor", "lane-health", "stage-a-cursor", "undecodable-cursor"]


def kept_kinds(state_dir: Path) -> list[str]:
    """The kinds of state file a check left in the state dir (each named KIND-<digest of the db>.json)."""
    if not state_dir.exists():
        return []
    return sorted(path.name.rsplit("-", 1)[0] for path in state_dir.iterdir())


CHECKED_AT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def checks_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's fields that canary.checks computes (the other modules' views left out)."""
    names = (
        "foreign_sync_targets foreign_mutation_targets sync_state_targets enrolled_projects last_seq "
        "unacked_rows_by_target unacked_rows legacy_target remote_state_keys engram_schema lane_model "
        "foreign_targets new_foreign_targets known_foreign_targets never_acknowledged_foreign_targets "
        "other_findings unacknowledged_findings acknowledged_findings"
    ).split()
    return {name: summary[name] for name in names}


def test_a_check_reports_the_journal_and_what_it_found(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    result = run_check(journal, config(100), None)
    assert (result.status, result.exit_status, result.db, result.error) == (
        "warning",
        Status.WARNING,
        str(journal),
        None,
    )
    assert re.fullmatch(CHECKED_AT, result.checked_at)
    assert result.allowed_targets == ALLOWED
    foreign = expected_foreign_findings(100)
    assert [f for f in result.findings if f.check != UNDELIVERED_PROJECT_LANE] == foreign
    assert [
        (f.check, f.target_key, f.size) for f in result.findings if f.check == UNDELIVERED_PROJECT_LANE
    ] == [
        (UNDELIVERED_PROJECT_LANE, f"cloud:{ENROLLED}", 3),
        (UNDELIVERED_PROJECT_LANE, "cloud:zeta", 1),
    ]
    assert checks_summary(result.summary) == {
        "foreign_sync_targets": 3,
        "foreign_mutation_targets": 3,
        "sync_state_targets": 7,
        "enrolled_projects": ["alpha", ENROLLED, "zeta"],
        "last_seq": 23,
        "unacked_rows_by_target": UNACKED_BY_TARGET,
        "unacked_rows": 14,
        "legacy_target": "cloud",
        "remote_state_keys": {"cloud_json": "absent", "live": []},
        "engram_schema": "v1.20.0",
        "lane_model": "legacy-only",
        "foreign_targets": 5,
        "new_foreign_targets": 5,
        "known_foreign_targets": 0,
        "never_acknowledged_foreign_targets": 5,
        "other_findings": 2,
        "unacknowledged_findings": 8,
        "acknowledged_findings": 0,
    }
    assert sorted(result.summary) == SUMMARY_KEYS
    # The per-project counts are kept for the next check of the same rows, and every view's cursor.
    assert kept_kinds(tmp_path / "state") == CURSOR_KINDS
    document = json.loads(state_file_for(journal, "evidence").read_text(encoding="utf-8"))
    assert document["fingerprint"] == {"last_seq": 23, "unacked": UNACKED_BY_TARGET, "waiting": ""}
    assert document["answers"] == {f"{UNNORMALIZED}\x1f{STRAY}": {"cloud": 5, GHOST: 1}}


def test_a_check_of_the_same_rows_takes_the_kept_counts(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    kept = state_file_for(journal, "evidence")
    with EngramDb.open(journal) as engram:
        check_connection(engram, config(100), None)
        document = json.loads(kept.read_text(encoding="utf-8"))
        document["answers"] = {f"{UNNORMALIZED}\x1f{STRAY}": {"cloud": 40}}
        kept.write_text(json.dumps(document), encoding="utf-8")
        again = check_connection(engram, config(100), None)
        assert json.loads(kept.read_text(encoding="utf-8")) == document  # answered as kept: not rewritten
        fresh = check_connection(engram, config(100), None, use_cursor=False)
    (phantom, *_) = again.findings
    assert (phantom.size, phantom.evidence["project_unacked_by_lane"]) == (41, {"cloud": 40})
    assert (
        phantom.message
        == f"sync target {PHANTOM_TARGET} is outside the closed target space (41 unacked rows)"
    )
    assert fresh.findings[0] == expected_foreign_findings(100)[0]


def test_without_the_cursor_a_check_keeps_nothing(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    with EngramDb.open(journal) as engram:
        check_connection(engram, config(100), None, use_cursor=False)
    run_check(journal, config(100), None, use_cursor=False)
    # No evidence, lane-health, Stage A or undecodable cursor; the inbox view writes its own file either way
    # (canary.inbox.cursor, not checks).
    assert kept_kinds(tmp_path / "state") == ["inbox-cursor"]


def test_a_snapshot_keeps_its_cursors_by_default(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    with EngramDb.open(journal) as engram:
        result, space = check_snapshot(engram, config(100), None)
    assert kept_kinds(tmp_path / "state") == CURSOR_KINDS
    assert space.last_seq == 23 and result.status == "warning"


def test_configured_extra_targets_are_allowed(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    result = run_check(journal, CanaryConfig(allowed_targets=[INERT, GHOST]), None)
    assert result.allowed_targets == sorted([*ALLOWED, INERT, GHOST])
    assert [(f.check, f.target_key) for f in result.findings if f.check in FOREIGN_CHECKS] == [
        (FOREIGN_SYNC_TARGET, PHANTOM_TARGET),
        (FOREIGN_SYNC_TARGET, ORPHAN_KEY),
        (FOREIGN_MUTATION_TARGET, BAD_KEY),
        (FOREIGN_MUTATION_TARGET, PHANTOM_TARGET),
    ]


def baseline_for(db: Path) -> Baseline:
    return Baseline(
        databases={
            db_key(db): BaselineEntry(
                recorded_at="2026-12-01T00:00:00Z",
                acknowledgements=[
                    Acknowledgement(
                        check=FOREIGN_SYNC_TARGET,
                        target_key=INERT,
                        size=0,
                        acknowledged_at="2026-12-01T00:00:00Z",
                        expires="2099-01-01T00:00:00Z",
                    ),
                    # acknowledged at 1 row, now 2: it alarms again
                    Acknowledgement(
                        check=FOREIGN_MUTATION_TARGET,
                        target_key=GHOST,
                        size=1,
                        acknowledged_at="2026-12-01T00:00:00Z",
                    ),
                ],
            )
        }
    )


@pytest.mark.parametrize(("critical_new", "status"), [(4, "critical"), (5, "warning")])
def test_acknowledged_targets_are_counted_apart(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, critical_new: int, status: str
) -> None:
    """Four foreign targets alarm (GHOST grew past its acknowledgement), INERT is known: at
    critical_new_foreign_targets = 4 that is critical, at 5 a warning."""
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    settings = CanaryConfig(thresholds=Thresholds(critical_new_foreign_targets=critical_new))
    baseline = baseline_for(journal)
    with EngramDb.open(journal) as engram:
        connected = check_connection(engram, settings, baseline)
    result = run_check(journal, settings, baseline)
    for checked in (connected, result):
        assert checked.status == status
        counts = checks_summary(checked.summary)
        assert {name: counts[name] for name in list(counts)[-7:]} == {
            "foreign_targets": 5,
            "new_foreign_targets": 4,
            "known_foreign_targets": 1,
            "never_acknowledged_foreign_targets": 3,
            "other_findings": 2,
            "unacknowledged_findings": 7,
            "acknowledged_findings": 1,
        }
        inert = next(f for f in checked.findings if f.target_key == INERT)
        ghost = next(f for f in checked.findings if f.target_key == GHOST)
        assert (inert.new, inert.acknowledged, inert.realarm) == (False, True, None)
        assert (ghost.new, ghost.realarm) == (True, "grew from 1 to 2 rows since acknowledged")


def test_count_findings_counts_targets_once_whatever_their_checks() -> None:
    ack = Acknowledgement(check=FOREIGN_SYNC_TARGET, target_key="b", acknowledged_at="2026-12-01T00:00:00Z")
    findings = [
        Finding(check=FOREIGN_SYNC_TARGET, severity="warning", message="m", target_key="a"),
        Finding(check=FOREIGN_MUTATION_TARGET, severity="warning", message="m", target_key="a"),
        Finding(
            check=FOREIGN_SYNC_TARGET,
            severity="warning",
            message="m",
            target_key="b",
            new=False,
            acknowledgement=ack,
        ),
        Finding(
            check=FOREIGN_MUTATION_TARGET,
            severity="warning",
            message="m",
            target_key="c",
            acknowledgement=ack,
        ),
        Finding(check=UNDELIVERED_PROJECT_LANE, severity="warning", message="m", target_key="d"),
        Finding(
            check=UNDELIVERED_PROJECT_LANE,
            severity="warning",
            message="m",
            target_key="e",
            new=False,
            acknowledgement=ack,
        ),
    ]
    assert count_findings(findings) == {
        "foreign_targets": 3,
        "new_foreign_targets": 2,
        "known_foreign_targets": 1,
        "never_acknowledged_foreign_targets": 1,
        "other_findings": 1,
        "unacknowledged_findings": 4,
        "acknowledged_findings": 2,
    }
    assert count_findings([]) == dict.fromkeys(count_findings(findings), 0)


def test_the_summary_of_a_snapshot(journal: Path) -> None:
    with snapshot(journal) as engram:
        space = read_target_space(engram)
        reader = reader_of(engram, space)
        assert unacked_by_target(space, reader) == UNACKED_BY_TARGET
        summary = summarize(space, reader)
        given = summarize(space, reader, {"cloud": 4, "cloud:x": None, "cloud:y": 0})
        assert space.foreign_keys() == {PHANTOM_TARGET, ORPHAN_KEY, INERT, BAD_KEY, GHOST}
        assert mutation_targets_since(engram.connection, 20) == ({BAD_KEY, PHANTOM_TARGET}, 23)
        assert mutation_targets_since(engram.connection, 23) == (set(), 23)
    assert summary == {
        "foreign_sync_targets": 3,
        "foreign_mutation_targets": 3,
        "sync_state_targets": 7,
        "enrolled_projects": ["alpha", ENROLLED, "zeta"],
        "last_seq": 23,
        "unacked_rows_by_target": UNACKED_BY_TARGET,
        "unacked_rows": 14,
        "legacy_target": "cloud",
        "remote_state_keys": {"cloud_json": "absent", "live": []},
    }
    assert (given["unacked_rows_by_target"], given["unacked_rows"]) == (
        {"cloud": 4, "cloud:x": None, "cloud:y": 0},
        4,
    )


def test_the_one_scan_is_read_once_and_only_where_it_can_be(journal: Path) -> None:
    with snapshot(journal) as engram:
        reader = EvidenceReader(engram)
        with statements(engram) as seen:
            reader.read_unacked_by_project()
            reader.read_unacked_by_project()
        assert len(seen) == 1
        for missing in ("acked_at", "project"):
            lacking = EvidenceReader(without_columns(engram, missing))
            with statements(engram) as seen:
                lacking.read_unacked_by_project()
            assert seen == []


def test_an_unreadable_file_is_unknown_never_ok(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    result = run_check(missing, config(100), None)
    assert (result.status, result.exit_status, result.db, result.findings) == (
        "unknown",
        Status.UNKNOWN,
        str(missing),
        [],
    )
    assert result.error == f"{missing}: no such file (pass --db or set ENGRAM_DATA_DIR)"
    assert re.fullmatch(CHECKED_AT, result.checked_at)
    assert unknown_result(missing, "boom").model_dump(by_alias=True) == {
        "schema": "engram-canary/check/v1",
        "status": "unknown",
        "db": str(missing),
        "checked_at": unknown_result(missing, "boom").checked_at,
        "allowed_targets": [],
        "findings": [],
        "summary": {},
        "error": "boom",
    }
    assert re.fullmatch(CHECKED_AT, now_iso())


def test_kept_evidence_expires_after_exactly_an_hour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    db = tmp_path / "engram.db"
    fingerprint: dict[str, Any] = {"last_seq": 9}
    answers = {STRAY: {"cloud": 3}}
    save_evidence(db, fingerprint, answers)
    computed_at = json.loads(state_file_for(db, "evidence").read_text(encoding="utf-8"))["computed_at"]
    monkeypatch.setattr(time, "time", lambda: computed_at + 3600.0)
    assert load_evidence(db, fingerprint) == answers
    monkeypatch.setattr(time, "time", lambda: computed_at + 3600.5)
    assert load_evidence(db, fingerprint) == {}


def test_a_file_that_fails_to_read_is_unknown_and_says_why(tmp_path: Path) -> None:
    """Not engram's file: its tables have engram's names and none of its columns, so the read fails."""
    db = tmp_path / "engram.db"
    with closing(sqlite3.connect(db)) as connection:
        connection.execute("CREATE TABLE sync_state (target_key TEXT PRIMARY KEY)")
        connection.execute("CREATE TABLE sync_mutations (target_key TEXT)")
        connection.commit()
    result = run_check(db, config(100), None, use_cursor=False)
    assert (result.status, result.db, result.findings) == ("unknown", str(db), [])
    assert result.error == f"{db}: read failed (no such column: seq)"
