"""The small defects of issue 12's user trial, each pinned by the output a user sees."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from canary_support import CANARY, canary_env, run_canary
from real_parts import missing

from engram_sync_kit.canary.checks import CheckResult
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.report import render_text
from engram_sync_kit.harness.engram.env import EngramEnvironment

NOBODY = 65534


def wal_database(path: Path) -> Path:
    """An engram-shaped WAL file (two empty sync tables), closed so no -wal/-shm remain."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = wal")
    connection.execute("CREATE TABLE sync_state (target_key TEXT PRIMARY KEY)")
    connection.execute("CREATE TABLE sync_mutations (seq INTEGER PRIMARY KEY, target_key TEXT)")
    connection.commit()
    connection.close()
    return path


def test_a_directory_as_db_is_the_same_unknown_line_and_json(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    text = run_canary(["check", "--db", str(directory)], tmp_path)
    assert (text.returncode, text.stderr) == (3, "")
    assert (
        text.stdout
        == f"ENGRAM-CANARY UNKNOWN - {directory}: not a regular file; expected engram's engram.db\n"
    )
    document = run_canary(["check", "--db", str(directory), "--format", "json"], tmp_path)
    assert document.returncode == 3
    assert (
        json.loads(document.stdout)["error"]
        == f"{directory}: not a regular file; expected engram's engram.db"
    )


@pytest.fixture
def exclusively_locked(tmp_path: Path) -> Iterator[Path]:
    db = wal_database(tmp_path / "engram.db")
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    yield db
    holder.execute("ROLLBACK")
    holder.close()


def test_a_lock_timeout_says_locked(exclusively_locked: Path, tmp_path: Path) -> None:
    result = run_canary(["check", "--db", str(exclusively_locked)], tmp_path)
    assert result.returncode == 3
    assert result.stdout == (
        f"ENGRAM-CANARY UNKNOWN - {exclusively_locked}: locked by another connection "
        "(still busy after 5 s); try again\n"
    )


@pytest.fixture
def read_only_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A WAL database in a directory the (unprivileged) canary cannot write; world-traversable."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        missing("this test needs root and setpriv (util-linux) to run the canary as an unprivileged user")
    base = Path(f"/tmp/canary-ro-{os.getpid()}-{threading.get_ident()}")
    db = wal_database(base / "data" / "engram.db")
    (base / "xdg").mkdir()
    os.chmod(base, 0o755)
    os.chmod(base / "xdg", 0o777)
    os.chmod(db, 0o644)
    os.chmod(db.parent, 0o555)
    yield db
    os.chmod(db.parent, 0o755)
    shutil.rmtree(base)


def as_nobody(*args: str, config_home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(CANARY), *args],
        env=canary_env(config_home, HOME=str(config_home)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_read_only_directory_is_explained(read_only_directory: Path) -> None:
    config_home = read_only_directory.parent.parent / "xdg"
    result = as_nobody("check", "--db", str(read_only_directory), config_home=config_home)
    assert result.returncode == 3, result.stderr
    assert result.stdout == (
        f"ENGRAM-CANARY UNKNOWN - {read_only_directory}: the directory {read_only_directory.parent} is "
        "read-only for this user, and a reader of a WAL database must create engram.db-shm there; "
        "make it writable for this user or check a copy\n"
    )
    assert "attempt to write a readonly database" not in result.stdout


def test_an_unreadable_config_directory_is_one_line_not_a_traceback(read_only_directory: Path) -> None:
    locked_home = read_only_directory.parent.parent / "locked"
    (locked_home / "engram-canary").mkdir(parents=True)
    os.chmod(locked_home, 0o700)
    result = as_nobody("check", "--db", str(read_only_directory), config_home=locked_home)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == (
        f"ENGRAM-CANARY UNKNOWN - {locked_home / 'engram-canary' / 'config.yaml'}: cannot read config "
        "(Permission denied)\n"
    )


def test_text_evidence_keeps_unicode_so_a_cwd_can_be_copied() -> None:
    cwd = "/home/me/Proyectos/año 2026/日本"
    finding = Finding(
        check="unsorted_growth",
        severity="warning",
        message="m",
        target_key="cloud",
        key="unsorted",
        evidence={"cwds": {cwd: 3}},
    )
    result = CheckResult(status="warning", db="/x", checked_at="2026-11-30T00:00:00Z", findings=[finding])
    text = render_text(result, CanaryConfig())
    assert f'cwds={{"{cwd}": 3}}' in text
    assert "\\u" not in text


@pytest.mark.engram
def test_inbox_list_json_carries_a_schema_name(engram_world: EngramEnvironment, tmp_path: Path) -> None:
    project = tmp_path / "síde project"
    project.mkdir()
    result = engram_world.run(["save", "t", "c", "--project", "side"], cwd=project)
    assert result.returncode == 0, result.stderr
    listed = run_canary(["inbox", "list", "--db", str(engram_world.db_path), "--format", "json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert [(entry["schema"], entry["key"]) for entry in entries] == [("engram-canary/inbox/v1", "side")]
