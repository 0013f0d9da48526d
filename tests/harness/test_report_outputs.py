"""The other harness commands that write a report never write it over what they read (issue 35 item 2,
the same class as validate's): `run --db DB --junit DB` replaced the tester's database with JUnit XML after
the run, `run --json` could replace the scenario it ran, and `make-deployment --out X-wal` planted a fresh
database where SQLite reads X's write-ahead log. Each failed first."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.engram_contract.one_line_cli import USAGE_EXIT
from engram_sync_kit.harness import run_cli
from engram_sync_kit.harness.cli import cli

pytestmark = pytest.mark.unit
SCENARIO = (Path(__file__).resolve().parents[2] / "scenarios" / "auth-failure-401.scenario.yaml").read_text()


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def run_many(*args: Any, **kwargs: Any) -> list[Any]:
        calls.append(args)
        return []

    monkeypatch.setattr(run_cli, "run_many", run_many)
    return calls


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE t (x)")
        connection.commit()
    return path


def _engram(tmp_path: Path) -> Path:
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")
    binary.chmod(0o755)
    return binary


def _invoke(*args: str) -> Any:
    return CliRunner(mix_stderr=False).invoke(cli, list(args), prog_name="engram-harness")


@pytest.mark.parametrize("option", ["--json", "--junit"])
@pytest.mark.parametrize("target", ["db", "db-wal", "scenario", "other-report"])
def test_run_refuses_a_report_over_its_inputs(
    tmp_path: Path, ran: list[Any], option: str, target: str
) -> None:
    db = _db(tmp_path)
    scenario = tmp_path / "x.scenario.yaml"
    scenario.write_text(SCENARIO)
    other = "--junit" if option == "--json" else "--json"
    outputs = {
        "db": [option, str(db)],
        "db-wal": [option, f"{db}-wal"],
        "scenario": [option, str(scenario)],
        "other-report": [option, str(tmp_path / "r"), other, str(tmp_path / "r")],
    }[target]
    before = (db.read_bytes(), scenario.read_text())
    result = _invoke("run", str(scenario), "--db", str(db), "--engram", str(_engram(tmp_path)), *outputs)
    assert result.exit_code == USAGE_EXIT, result.output + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "would overwrite" in lines[0], lines
    assert ran == []
    assert (db.read_bytes(), scenario.read_text()) == before


def test_make_deployment_refuses_a_side_file_of_an_existing_database(tmp_path: Path) -> None:
    db = _db(tmp_path)
    result = _invoke("make-deployment", "--out", f"{db}-wal", "--engram", str(_engram(tmp_path)))
    assert result.exit_code == USAGE_EXIT, result.output + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: --out {db}-wal: is where SQLite keeps the wal of {db}; name another file "
        "(see engram-harness make-deployment --help)"
    ]
    assert not Path(f"{db}-wal").exists()
