"""The shortcuts that keep check linear and cheap at 10k targets answer as the plain rules do."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from engram_schemas.builder import V120, create_database
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_sync_kit.canary.checks import EvidenceReader
from engram_sync_kit.canary.db import LENIENT_TEXT, EngramDb, discover_schema, distinct_stored_values
from engram_sync_kit.canary.inbox.selection import KeyTotals
from engram_sync_kit.engram_contract.names import enrolled_name

_names = st.text(alphabet="aA-_ b", max_size=6)
_epochs = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))


@given(project=_names, enrolled=st.frozensets(_names, max_size=6))
def test_enrolled_name_of_a_frozenset_is_the_first_normalized_match(
    project: str, enrolled: frozenset[str]
) -> None:
    assert enrolled_name(project, enrolled) == enrolled_name(project, list(enrolled))


def test_enrolled_name_matches_after_normalizing_both_sides() -> None:
    assert enrolled_name(" My--App ", frozenset({"my-app", "other"})) == "my-app"
    assert enrolled_name("my_app", frozenset({"my-app"})) is None


@given(
    count=st.integers(min_value=0),
    telemetry=st.integers(min_value=0),
    oldest=_epochs,
    oldest_memory=_epochs,
    projects=st.lists(st.one_of(st.none(), _names)),
)
def test_key_totals_as_json_is_asdict(
    count: int, telemetry: int, oldest: float | None, oldest_memory: float | None, projects: list[str | None]
) -> None:
    totals = KeyTotals(count, telemetry, oldest, oldest_memory, projects)
    document = totals.as_json()
    assert document == asdict(totals)
    document["projects"].append("x")
    assert totals.projects == projects


# SIMULATION OF LEGACY DATA: journal rows written straight into v1.20.0's schema (engram_schemas fixture),
# with the byte values and types another writer or a damaged file could leave.
_stored = st.one_of(
    st.sampled_from(
        [b"cloud", b"cloud:a", b"a", b"b", b"", b"caf\xff", b"caf\xfe", b"\xf0", b"\xef\xbf\xbd"]
    ),
    st.binary(max_size=3),
)
_typed = st.tuples(_stored, st.sampled_from(["text", "blob"]))
_rows = st.lists(st.tuples(_typed, _typed, st.booleans()), max_size=40)


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    db = create_database(V120, tmp_path_factory.mktemp("journal") / "engram.db")
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.text_factory = LENIENT_TEXT
        yield connection


def _fill(
    connection: sqlite3.Connection, rows: list[tuple[tuple[bytes, str], tuple[bytes, str], bool]]
) -> None:
    connection.execute("PRAGMA foreign_keys = OFF")
    connection.execute("DELETE FROM sync_mutations")
    for (key, key_type), (project, project_type), acked in rows:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project, acked_at) "
            f"VALUES ({'CAST(? AS TEXT)' if key_type == 'text' else '?'}, 'session', 's', 'upsert', '{{}}', "
            f"{'CAST(? AS TEXT)' if project_type == 'text' else '?'}, ?)",
            (key, project, "2026-11-01 10:00:00" if acked else None),
        )


def _engram_db(connection: sqlite3.Connection) -> EngramDb:
    path = Path(connection.execute("PRAGMA database_list").fetchone()[2])
    return EngramDb(path, connection, discover_schema(connection, path))


def _reference(connection: sqlite3.Connection, column: str) -> set[str]:
    return {
        LENIENT_TEXT(bytes(value))
        for (value,) in connection.execute(f"SELECT CAST({column} AS BLOB) FROM sync_mutations")
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_rows, steps=st.integers(min_value=1, max_value=5))
def test_distinct_values_finish_with_one_scan_as_the_skip_scan_would(
    journal: sqlite3.Connection, rows: list[tuple[tuple[bytes, str], tuple[bytes, str], bool]], steps: int
) -> None:
    """Every value once, whatever its bytes and type; a BLOB hung the skip-scan (failed first: forever)."""
    _fill(journal, rows)
    for column in ("target_key", "project"):
        plain = distinct_stored_values(journal, column, skip_steps=10**9)
        shortened = distinct_stored_values(journal, column, skip_steps=steps)
        assert plain == shortened
        assert set(plain) == _reference(journal, column)
        assert all(LENIENT_TEXT(stored) == name for name, stored in plain.items())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_rows, asked=st.lists(st.lists(_stored, min_size=1, max_size=3), max_size=6))
def test_project_counts_from_one_scan_equal_one_query_per_target(
    journal: sqlite3.Connection,
    rows: list[tuple[tuple[bytes, str], tuple[bytes, str], bool]],
    asked: list[list[bytes]],
) -> None:
    _fill(journal, rows)
    db = _engram_db(journal)
    names = [[LENIENT_TEXT(project) for project in projects] for projects in asked]
    queried, scanned = EvidenceReader(db), EvidenceReader(db)
    scanned.read_unacked_by_project()
    for reader in (queried, scanned):
        reader.projects_mapping_to("cloud")  # reads the stored bytes of the projects
    assert [queried.project_unacked(projects) for projects in names] == [
        scanned.project_unacked(projects) for projects in names
    ]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_rows, asked=st.lists(_stored, max_size=6))
def test_a_key_outside_the_journal_has_no_unacked_rows(
    journal: sqlite3.Connection,
    rows: list[tuple[tuple[bytes, str], tuple[bytes, str], bool]],
    asked: list[bytes],
) -> None:
    _fill(journal, rows)
    db = _engram_db(journal)
    targets = set(distinct_stored_values(journal, "target_key"))
    plain, known = EvidenceReader(db), EvidenceReader(db, journal_targets=targets)
    for reader in (plain, known):
        reader.stored_keys.update(distinct_stored_values(journal, "target_key"))
    for key in [*targets, *(LENIENT_TEXT(value) for value in asked)]:
        assert known.unacked_on_target(key) == plain.unacked_on_target(key)
        assert known.unacked_on_target(key) == plain.unacked_on_target(key)  # the memo answers the same
