"""Bad input to `engram-harness validate`, caught early and named as the tester named it (issue 22).

Each test failed first: outputs were checked only after the rehearsal, errors named validate's own copy,
a locked rollback-journal database was copied without a word, ENGRAM_BIN beat --engram-version, and an
empty -wal left by a reader made a closed database "live".
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.validate import cli as validate_cli
from engram_sync_kit.harness.validate.run import ValidateOptions, is_live

pytestmark = pytest.mark.unit


def _engram(tmp_path: Path, output: str = "engram 1.20.0") -> Path:
    binary = tmp_path / "engram"
    binary.write_text(f"#!/bin/sh\necho '{output}'\n")
    binary.chmod(0o755)
    return binary


def _invoke(tmp_path: Path, db: Path, *extra: str) -> Any:
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("")
    args = ["validate", "--db", str(db), "--engram", str(_engram(tmp_path)), "--aliases", str(aliases)]
    return CliRunner().invoke(cli, [*args, "-q", *extra])


@pytest.mark.parametrize(
    ("target", "said"),
    [("a-directory", "is a directory"), ("/proc/version", "cannot write (Invalid argument)")],
    ids=["directory", "unwritable"],
)
def test_every_output_is_checked_before_the_rehearsal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, said: str
) -> None:
    started: list[ValidateOptions] = []
    monkeypatch.setattr(validate_cli, "validate", lambda options, progress=None: started.append(options))
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    (tmp_path / "a-directory").mkdir()
    out = tmp_path / target if not target.startswith("/") else Path(target)
    for option in ("--json", "--html"):
        result = _invoke(tmp_path, db, option, str(out))
        assert result.exit_code == 3, result.output
        last = result.output.strip().splitlines()[-1]
        assert last.startswith("Error: ") and str(out) in last and said in last, last
    assert started == []


def test_a_writable_output_is_probed_without_leaving_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stop(options: ValidateOptions, progress: Any = None) -> None:
        raise HarnessError("stopped after the checks")

    monkeypatch.setattr(validate_cli, "validate", stop)
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    result = _invoke(tmp_path, db, "--json", str(tmp_path / "r.json"))
    assert result.output.strip() == "Error: stopped after the checks"
    assert not (tmp_path / "r.json").exists()


def test_an_error_names_the_testers_file_never_validates_copy(tmp_path: Path) -> None:
    db = tmp_path / "my engram.db"
    with closing(sqlite3.connect(db)) as connection:
        connection.execute("CREATE TABLE notes (x)")
    result = _invoke(tmp_path, db)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert str(db) in lines[0] and "engram-validate-" not in lines[0], lines[0]


def test_a_database_locked_by_another_process_is_one_line_and_not_copied(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    with closing(sqlite3.connect(db)) as setup:
        setup.execute("PRAGMA journal_mode=DELETE")
        setup.execute("CREATE TABLE t (x)")
        setup.commit()
    holder = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO t VALUES (1)")
    keep = tmp_path / "work"
    try:
        began = time.monotonic()
        result = _invoke(tmp_path, db, "--keep", str(keep))
        waited = time.monotonic() - began
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0] == (
        f"Error: --db {db}: locked by another process (waited 5 s); nothing was copied: "
        "run validate again once it lets go"
    )
    assert waited < 30
    assert not (keep / "current" / "engram-data" / "engram.db").exists()


def test_a_lock_let_go_within_the_wait_is_copied(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    with closing(sqlite3.connect(db)) as setup:
        setup.execute("PRAGMA journal_mode=DELETE")
        setup.execute("CREATE TABLE t (x)")
        setup.commit()
    holder = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO t VALUES (1)")

    def let_go() -> None:
        holder.execute("COMMIT")
        holder.close()

    timer = threading.Timer(1.0, let_go)
    timer.start()
    try:
        result = _invoke(tmp_path, db)
    finally:
        timer.join()
    # the copy was taken after the writer committed: it gets as far as engram's own tables
    assert "not an engram database" in result.output, result.output


def test_a_flag_beats_engram_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_BIN", str(_engram(tmp_path)))
    asked: list[str] = []

    def install(version: str) -> Path:
        asked.append(version)
        raise HarnessError(f"engram {version}: no such release")

    monkeypatch.setattr(validate_cli, "install_engram", install)
    monkeypatch.setattr(
        validate_cli, "cached_binary", lambda version: tmp_path / "cache" / version / "engram"
    )
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    result = CliRunner().invoke(cli, ["validate", "--db", str(db), "--engram-version", "v9.9.9", "-q"])
    assert asked == ["v9.9.9"]
    assert (result.exit_code, result.output.strip()) == (1, "Error: engram v9.9.9: no such release")


def test_an_empty_wal_left_by_a_reader_is_not_live(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    assert is_live(db) is False
    (tmp_path / "engram.db-wal").write_bytes(b"")
    (tmp_path / "engram.db-shm").write_bytes(b"\0" * 32768)
    assert is_live(db) is False
    (tmp_path / "engram.db-wal").write_bytes(b"\0" * 32)
    assert is_live(db) is True


def test_a_rollback_journal_file_under_an_odd_directory_is_copied_as_it_is(tmp_path: Path) -> None:
    """'#', '?' and '%41' in the tester's path: an unquoted file: URI opened another file, or none."""
    from engram_sync_kit.harness.validate.run import copy_original

    home = tmp_path / "notes #1 ?draft 100%41 ü"
    home.mkdir()
    db = home / "engram.db"
    with closing(sqlite3.connect(db)) as setup:
        setup.execute("PRAGMA journal_mode=DELETE")
        setup.execute("CREATE TABLE t (x)")
        setup.execute("INSERT INTO t VALUES ('kept')")
        setup.commit()
    target = tmp_path / "copy" / "engram.db"
    copy_original(db, target)
    with closing(sqlite3.connect(target)) as copied:
        assert copied.execute("SELECT x FROM t").fetchall() == [("kept",)]
    # the shared lock was taken on the tester's file, not on a new one made at the path cut at '#'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["copy", home.name]


def test_keep_without_dir_keeps_the_work_in_the_temporary_directory_as_run_keep_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: `validate --keep` required a DIR while `run --keep` took an optional one (issue 37).
    started: list[ValidateOptions] = []
    monkeypatch.setattr(validate_cli, "validate", lambda options, progress=None: started.append(options))
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    _invoke(tmp_path, db, "--keep")
    _invoke(tmp_path, db, "--keep", str(tmp_path / "work"))
    _invoke(tmp_path, db)
    assert [(options.keep, options.work_dir) for options in started] == [
        (True, None),
        (True, tmp_path / "work"),
        (False, None),
    ]
