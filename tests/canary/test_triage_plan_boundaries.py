"""Boundaries of canary.triage.plan's rules that `make mutation` found unpinned: which legacy-lane rows
`drop --seq/--unattributed` takes and the one line it refuses the others with, the --seq parser's length
edges, and the near-miss name suggestion where only the name's shape matches."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from engram_schemas.builder import ENROLLED, STRAY, V120, build

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.triage.plan import (
    RowSelection,
    TriageError,
    near_enrolled_name,
    parse_seqs,
    select_lane_rows,
)


@pytest.fixture
def legacy_db(tmp_path: Path) -> Iterator[tuple[EngramDb, dict[str, int]]]:
    """The builder's v1.20 rows, plus a few more as v1.20 leaves them (simulated legacy data): a row
    without a project, an acked one, and a session the cloud refuses (no directory) of the enrolled project."""
    path = tmp_path / "engram.db"
    build(V120, path)
    seqs: dict[str, int] = {}
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        for name, project, payload, acked in [
            ("unattributed", "", {"id": "s-u", "directory": "/u"}, None),
            ("unattributed-acked", "", {"id": "s-v", "directory": "/v"}, "2026-11-02 10:00:00"),
            ("refused", ENROLLED, {"id": "s-r", "project": ENROLLED}, None),
        ]:
            cursor = connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project, acked_at) "
                "VALUES ('cloud', 'session', ?, 'upsert', ?, ?, ?)",
                (payload["id"], json.dumps(payload), project, acked),
            )
            assert cursor.lastrowid is not None
            seqs[name] = cursor.lastrowid
        for name, project, delivered in [("stray", STRAY, False), ("delivered", ENROLLED, True)]:
            seqs[name] = connection.execute(
                "SELECT min(seq) FROM sync_mutations WHERE target_key = 'cloud' AND project = ? "
                "AND (acked_at IS NOT NULL) = ?",
                (project, delivered),
            ).fetchone()[0]
    db = EngramDb.open(path)
    try:
        yield db, seqs
    finally:
        db.close()


def test_drop_unattributed_takes_only_the_unacked_legacy_rows_without_a_project(
    legacy_db: tuple[EngramDb, dict[str, int]],
) -> None:
    db, seqs = legacy_db
    (row,) = select_lane_rows(db, RowSelection(unattributed=True))
    assert (row.seq, row.entity, row.entity_key, row.project) == (seqs["unattributed"], "session", "s-u", "")


def test_drop_unattributed_with_none_left_says_so(tmp_path: Path) -> None:
    build(V120, tmp_path / "engram.db")
    with EngramDb.open(tmp_path / "engram.db") as db, pytest.raises(TriageError) as refused:
        select_lane_rows(db, RowSelection(unattributed=True))
    assert str(refused.value) == "nothing to drop: no unacked legacy-lane rows without a project"


def test_drop_seq_takes_undeliverable_rows_in_the_given_order(
    legacy_db: tuple[EngramDb, dict[str, int]],
) -> None:
    db, seqs = legacy_db
    wanted = (seqs["refused"], seqs["stray"], seqs["unattributed"])
    assert [row.seq for row in select_lane_rows(db, RowSelection(seqs=wanted))] == list(wanted)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing", "seq {seq}: no such row in sync_mutations (nothing was changed)"),
        ("unattributed-acked", "seq {seq} is already acked (at 2026-11-02 10:00:00); nothing was changed"),
        ("delivered", "seq {seq} is already acked (at 2026-11-01 10:00:00); nothing was changed"),
    ],
)
def test_drop_seq_refuses_a_row_it_cannot_take_by_name(
    legacy_db: tuple[EngramDb, dict[str, int]], name: str, message: str
) -> None:
    db, seqs = legacy_db
    seq = seqs.get(name, 10_000)
    with pytest.raises(TriageError) as refused:
        select_lane_rows(db, RowSelection(seqs=(seqs["stray"], seq)))
    assert str(refused.value) == message.format(seq=seq)


def test_drop_seq_refuses_a_row_engram_would_still_deliver(tmp_path: Path) -> None:
    # A row of the enrolled project the cloud accepts, as v1.20 leaves it unacked (simulated legacy data).
    path = tmp_path / "engram.db"
    build(V120, path)
    payload = {"id": "s-d", "project": ENROLLED, "directory": "/d"}
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        seq = connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES ('cloud', 'session', 's-d', 'upsert', ?, ?)",
            (json.dumps(payload), ENROLLED),
        ).lastrowid
    with EngramDb.open(path) as db, pytest.raises(TriageError) as refused:
        select_lane_rows(db, RowSelection(seqs=(seq or 0,)))
    assert str(refused.value) == (
        f"seq {seq} is deliverable (project {ENROLLED!r} is enrolled and the cloud accepts it); "
        "drop selects only rows engram cannot deliver"
    )


def test_the_seq_parser_takes_eighteen_digits_and_refuses_nineteen() -> None:
    assert parse_seqs("9" * 18) == (int("9" * 18),)
    with pytest.raises(TriageError) as refused:
        parse_seqs("1" * 19)
    assert str(refused.value).endswith(f"got {'1' * 19!r}")


@pytest.mark.parametrize(("width", "shown"), [(40, "x" * 40), (41, "x" * 40 + "...")])
def test_a_refused_seq_word_is_shown_whole_up_to_forty_characters(width: int, shown: str) -> None:
    with pytest.raises(TriageError) as refused:
        parse_seqs("x" * width)
    assert (
        str(refused.value)
        == f"--seq expects positive row numbers separated by commas (N[,N...]), got {shown!r}"
    )


@pytest.mark.parametrize(
    ("typed", "enrolled", "expected"),
    [
        ("a-b", {"a_b", "zz"}, "a_b"),  # difflib's ratio for these is 0.67: only the shape matches
        ("a_b", {"a-b", "zz"}, "a-b"),
        ("abcdef", {"abcdxy"}, None),  # a ratio of 0.67 is below the 0.8 cutoff
        ("abcdefghij", {"abcdefghiy", "abcdefghyy"}, "abcdefghiy"),
    ],
)
def test_a_near_miss_is_the_shape_match_or_the_one_closest_name(
    typed: str, enrolled: set[str], expected: str | None
) -> None:
    assert near_enrolled_name(typed, frozenset(enrolled)) == expected
