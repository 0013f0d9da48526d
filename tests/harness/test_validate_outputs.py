"""validate never writes its report over what it reads, and never blocks on what it cannot read (issue 35
items 2 and 8).

Each failed first: `--html DB` (and --json, a relative spelling, a symlink, a hard link, DB-wal, -shm,
-journal) replaced the tester's database with the report and exited 0; `--db FIFO` hung in its first read.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.engram_contract.files import database_file_written_by
from engram_sync_kit.engram_contract.one_line_cli import USAGE_EXIT
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.validate import cli as validate_cli
from engram_sync_kit.harness.validate.run import ValidateOptions, validate

pytestmark = pytest.mark.unit


def _engram(tmp_path: Path) -> Path:
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")
    binary.chmod(0o755)
    return binary


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "home" / "engram.db"
    path.parent.mkdir()
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE t (x)")
        connection.commit()
    return path


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ValidateOptions]:
    """validate() as called by the CLI: recorded, then stopped before any work."""
    calls: list[ValidateOptions] = []

    def stop(options: ValidateOptions, progress: Any = None) -> None:
        calls.append(options)
        raise HarnessError("stopped after the checks")

    monkeypatch.setattr(validate_cli, "validate", stop)
    return calls


def _invoke(tmp_path: Path, *args: str) -> Any:
    return CliRunner(mix_stderr=False).invoke(
        cli, ["validate", "--engram", str(_engram(tmp_path)), "-q", *args], prog_name="engram-harness"
    )


SPELLINGS: dict[str, Callable[[Path], str]] = {
    "same": str,
    "relative": lambda db: os.path.relpath(db.parent / ".." / db.parent.name / db.name),
    "symlink": lambda db: _link(db, db.parent.parent / "report.html", os.symlink),
    "hard-link": lambda db: _link(db, db.parent.parent / "report.html", os.link),
    "linked-dir": lambda db: _link(db.parent, db.parent.parent / "linked", os.symlink) + "/engram.db",
    "wal": lambda db: f"{db}-wal",
    "shm": lambda db: f"{db}-shm",
    "journal": lambda db: f"{db}-journal",
}


def _link(target: Path, link: Path, make: Callable[[Path, Path], None]) -> str:
    make(target, link)
    return str(link)


@pytest.mark.parametrize("option", ["--html", "--json"])
@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_an_output_that_is_the_database_or_a_side_file_is_refused_before_any_work(
    tmp_path: Path,
    db: Path,
    started: list[ValidateOptions],
    monkeypatch: pytest.MonkeyPatch,
    option: str,
    spelling: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    output = SPELLINGS[spelling](db)
    before = db.read_bytes()
    result = _invoke(tmp_path, "--db", str(db), option, output)
    assert result.exit_code == USAGE_EXIT, result.output + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"{option} {output}: " in lines[0] and "would overwrite" in lines[0] and str(db) in lines[0]
    assert started == []
    assert db.read_bytes() == before
    assert not Path(output).exists() or Path(output).samefile(db) or spelling in ("wal", "shm")


@pytest.mark.parametrize("option", ["--html", "--json"])
@pytest.mark.parametrize("named", ["--plan", "--aliases", "--anonymize-key"])
def test_an_output_that_is_another_input_is_refused(
    tmp_path: Path, db: Path, started: list[ValidateOptions], option: str, named: str
) -> None:
    other = tmp_path / "input.txt"
    other.write_text("# keep me\n")
    extra = ["--anonymize"] if named == "--anonymize-key" else []
    result = _invoke(tmp_path, "--db", str(db), named, str(other), *extra, option, str(other))
    assert result.exit_code == USAGE_EXIT, result.output + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "would overwrite" in result.stderr and f"{named} {other}" in result.stderr
    assert other.read_text() == "# keep me\n"
    assert started == []


def test_html_and_json_on_one_file_are_refused(
    tmp_path: Path, db: Path, started: list[ValidateOptions]
) -> None:
    out = tmp_path / "report"
    result = _invoke(tmp_path, "--db", str(db), "--html", str(out), "--json", str(out))
    assert result.exit_code == USAGE_EXIT
    assert "--json" in result.stderr and "--html" in result.stderr and "would overwrite" in result.stderr
    assert started == []


def test_a_report_beside_the_database_is_fine(
    tmp_path: Path, db: Path, started: list[ValidateOptions]
) -> None:
    for name in ("engram.db.html", "engram.db-walk", "report.json"):
        result = _invoke(tmp_path, "--db", str(db), "--json", str(db.parent / name))
        assert result.stderr.strip() == "Error: stopped after the checks"
    assert len(started) == 3


def test_the_rule_names_the_database_file_an_output_would_replace(tmp_path: Path, db: Path) -> None:
    assert database_file_written_by(db, db) == db
    assert database_file_written_by(Path(f"{db}-wal"), db) == Path(f"{db}-wal")
    assert database_file_written_by(db.parent / "engram.db-wal.html", db) is None
    assert database_file_written_by(db.parent / "other.db", db) is None
    os.link(db, tmp_path / "same-inode")
    assert database_file_written_by(tmp_path / "same-inode", db) == db


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    os.mkfifo(path)
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    path.mkdir()
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    return path


NOT_FILES: dict[str, Callable[[Path], Path]] = {
    "fifo": _fifo,
    "directory": _directory,
    "socket": _socket,
    "dev-zero": lambda _tmp: Path("/dev/zero"),
}


def _without_blocking(db: Path, work: Callable[[], Any]) -> Any:
    """WORK's outcome (its value or its exception); a test failure if it is still blocked after 10 s
    (then a peer is opened on a FIFO so the blocked open lets go and the test ends)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        if stat.S_ISFIFO(db.stat().st_mode):
            peer = os.open(db, os.O_RDWR | os.O_NONBLOCK)  # a reader and a writer: either open lets go
            thread.join(10)
            os.close(peer)
        pytest.fail(f"blocked on {db}")
    return outcome[0]


@pytest.mark.parametrize("kind", sorted(NOT_FILES))
def test_a_database_that_is_not_a_regular_file_is_one_line_without_blocking(
    tmp_path: Path, started: list[ValidateOptions], kind: str
) -> None:
    db = NOT_FILES[kind](tmp_path)
    result = _without_blocking(db, lambda: _invoke(tmp_path, "--db", str(db)))
    assert result.exit_code == USAGE_EXIT, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and "not a regular file" in lines[0], lines
    assert started == []


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_the_library_refuses_a_database_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    db = NOT_FILES[kind](tmp_path)
    options = ValidateOptions(db=db, binary=_engram(tmp_path), work_dir=tmp_path / "work")
    error = _without_blocking(db, lambda: validate(options))
    assert isinstance(error, HarnessError) and "not a regular file" in str(error), error


def test_an_output_fifo_without_a_reader_is_one_line_without_blocking(
    tmp_path: Path, db: Path, started: list[ValidateOptions]
) -> None:
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    result = _without_blocking(fifo, lambda: _invoke(tmp_path, "--db", str(db), "--json", str(fifo)))
    assert result.exit_code == USAGE_EXIT, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: --json {fifo}: cannot write (No such device or address) (see engram-harness validate --help)"
    ]
    assert started == []
