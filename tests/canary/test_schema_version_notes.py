"""Per-version wording and counting of the canary on the schema fixtures (tests/fixtures/engram_schemas/).

The v2/v3 expectations are predictions from engram's source, never observed (no v2/v3 binary builds here).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from engram_schemas.builder import ALL_TIME, FIXTURE_VERSIONS, build
from engram_schemas.builder import V3 as FIXTURE_V3
from engram_schemas.builder import V120 as FIXTURE_V120

from canary.cli import cli

NO_PROJECT = "(no project)"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture(params=FIXTURE_VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(version: str, tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    build(version, path)
    return path


def add_projectless_rows(db: Path, *, disposition: str | None) -> None:
    """SIMULATED DATA: a save without --project journals an observation with project '' on the legacy
    lane (v1.20 observed); on v2/v3 engram's recovery may quarantine it (disposition, predicted from
    internal/cloud/autosync/manager.go @0cd24e8a)."""
    columns = ", disposition, disposition_reason, disposition_at" if disposition else ""
    values = ", ?, 'payload_invalid', ?" if disposition else ""
    extra: tuple[str, ...] = (disposition, ALL_TIME) if disposition else ()
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
            f"occurred_at{columns}) VALUES ('cloud', 'observation', 'obs-loose', 'upsert', '{{}}', 'local', '', "
            f"?{values})",
            (ALL_TIME, *extra),
        )
        connection.commit()


def inbox_keys(db: Path) -> dict[str, dict[str, object]]:
    code, output = run("inbox", "list", "--db", str(db), "--format", "json")
    assert code == 0, output
    return {str(entry["key"]): entry for entry in json.loads(output)}


@pytest.mark.parametrize("version", [v for v in FIXTURE_VERSIONS if v != FIXTURE_V120])
def test_a_quarantined_row_without_a_project_is_not_unattributed(version: str, db: Path) -> None:
    add_projectless_rows(db, disposition="quarantined")
    assert NO_PROJECT not in inbox_keys(db)
    code, output = run("check", "--db", str(db), "--format", "json", "--no-baseline")
    checks = {finding["check"] for finding in json.loads(output)["findings"]}
    assert "unattributed_mutations" not in checks, output


def test_a_waiting_row_without_a_project_is_unattributed(version: str, db: Path) -> None:
    add_projectless_rows(db, disposition=None)
    assert inbox_keys(db)[NO_PROJECT]["count"] == 1


NOTES = {
    "v1.20.0": "note: engram v1.20 journals every mutation in the legacy 'cloud' lane with a project column; ",
    "v2-1be5d11f": "note: engram v2 (predicted from store.go @1be5d11f) journals an enrolled project's mutations in the legacy "
    "'cloud' lane and in its 'cloud:<project>' lane, and its worker reads only 'cloud'; ",
    "v3-d4397781": "note: engram v3 (predicted from store.go @d4397781) journals an enrolled project's mutations in the legacy "
    "'cloud' lane and in its 'cloud:<project>' lane, and its worker reads only 'cloud'; ",
}


def test_check_text_notes_the_lanes_of_the_version_it_read(version: str, db: Path) -> None:
    code, output = run("check", "--db", str(db), "--no-baseline")
    assert code >= 1, output
    notes = [line for line in output.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, output
    assert notes[0].startswith(NOTES[version]), notes[0]
    assert notes[0].endswith(
        "project_unacked_rows counts unacked rows (any lane) whose project maps to this target"
    )


def test_check_text_notes_design_routing_on_a_design_conforming_database(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(FIXTURE_V3, path, design_conforming=True)
    code, output = run("check", "--db", str(path), "--no-baseline")
    assert code >= 1, output
    notes = [line for line in output.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: engram v3 follows the design's routing here: rows of unenrolled projects wait on 'cloud:inbox' "
        "and each enrolled project's 'cloud:<project>' lane delivers; project_unacked_rows counts unacked rows "
        "(any lane) whose project maps to this target"
    ], output
