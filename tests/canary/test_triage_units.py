"""Pure parts of triage: the --seq parser against hostile input, and the near-miss name suggestion."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_sync_kit.canary.db import EngramDb, discover_schema
from engram_sync_kit.canary.triage.plan import (
    PhantomTarget,
    Plan,
    TriageError,
    execute_plan,
    near_enrolled_name,
    parse_seqs,
)

V120_SCHEMA = Path(__file__).parents[1] / "fixtures" / "engram_schemas" / "v1.20.0.sql"


def test_a_pasted_list_of_100k_seqs_parses_quickly_in_order_without_duplicates() -> None:
    text = ",".join(str(seq) for seq in [*range(1, 100_001), 5, 7])
    began = time.perf_counter()
    seqs = parse_seqs(text)
    assert time.perf_counter() - began < 2.0
    assert seqs[:3] == (1, 2, 3) and len(seqs) == 100_000


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("9" * 100_000, "'" + "9" * 40 + "...'"),
        ("1,-2", "'-2'"),
        ("1, ,2", "' '"),
        ("١٢", "'١٢'"),  # Arabic-Indic digits are digits to str.isdigit, not to SQLite
        ("0x10", "'0x10'"),
        ("1e3", "'1e3'"),
    ],
    ids=["huge-number", "negative", "blank", "non-ascii-digits", "hex", "exponent"],
)
def test_bad_seq_lists_get_one_line(text: str, shown: str) -> None:
    with pytest.raises(TriageError) as raised:
        parse_seqs(text)
    assert (
        str(raised.value) == f"--seq expects positive row numbers separated by commas (N[,N...]), got {shown}"
    )


@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused_in_one_line(text: str) -> None:
    try:
        seqs = parse_seqs(text)
    except TriageError as error:
        assert "\n" not in str(error)
    else:
        assert seqs and all(seq >= 1 for seq in seqs)


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("client-portal", "client_portal"),
        ("Client_Portal", "client_portal"),
        ("main-prj", "main-proj"),
        ("zzz", None),
    ],
)
def test_near_miss_names(typed: str, expected: str | None) -> None:
    assert near_enrolled_name(typed, frozenset({"client_portal", "main-proj"})) == expected


def test_production_code_reads_no_test_hook_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the fix, this variable made execute_plan write a marker and wait (here: fail on a missing dir).
    monkeypatch.setenv("ENGRAM_CANARY_TEST_PAUSE_MIDWAY", str(tmp_path / "no-such-dir" / "marker"))
    db = tmp_path / "engram.db"
    connection = sqlite3.connect(db, isolation_level=None)
    connection.executescript(V120_SCHEMA.read_text(encoding="utf-8"))
    connection.execute("INSERT INTO sync_state (target_key, lifecycle) VALUES ('cloud:phantom', 'idle')")
    writer = EngramDb(db, connection, discover_schema(connection, db))
    plan = Plan("cleanup-phantoms", phantoms=[PhantomTarget("cloud:phantom", "idle")])
    connection.execute("BEGIN IMMEDIATE")
    assert execute_plan(writer, plan) == ()
    connection.execute("COMMIT")
    assert connection.execute("SELECT target_key FROM sync_state ORDER BY 1").fetchall() == [("cloud",)]
    assert not (tmp_path / "no-such-dir").exists()
    connection.close()
