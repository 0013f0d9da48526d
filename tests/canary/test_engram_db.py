"""EngramDb: one open discovers the schema once, every reader of that open reuses it, and its typed queries
answer from rows the real engram v1.20 wrote."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from inbox_support import engram_ok, query, save

import engram_sync_kit.canary.db
import engram_sync_kit.canary.triage.plan
from engram_sync_kit.canary.checks import run_check
from engram_sync_kit.canary.cli import cli
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import DatabaseUnavailable, EngramDb, Schema, SyncStateRow
from engram_sync_kit.harness.engram.env import EngramEnvironment

V120_SCHEMA = Path(__file__).parents[1] / "fixtures" / "engram_schemas" / "v1.20.0.sql"


@pytest.fixture
def world(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> EngramEnvironment:
    """`side` saved twice from a scratch dir (not enrolled: a foreign target), `main` enrolled."""
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, "side", "one", cwd=scratch)
    save(engram_world, "side", "two", cwd=scratch)
    engram_ok(engram_world, "cloud", "enroll", "main")
    return engram_world


@pytest.fixture
def discoveries(monkeypatch: pytest.MonkeyPatch) -> list[Schema]:
    """Every schema discovered from now on (the read side's EngramDb.open and triage's write connection)."""
    found: list[Schema] = []
    real = engram_sync_kit.canary.db.discover_schema

    def counting(connection: sqlite3.Connection, path: Path) -> Schema:
        schema = real(connection, path)
        found.append(schema)
        return schema

    monkeypatch.setattr(engram_sync_kit.canary.db, "discover_schema", counting)
    monkeypatch.setattr(engram_sync_kit.canary.triage.plan, "discover_schema", counting)
    return found


def run_cli(world: EngramEnvironment, *args: str) -> tuple[int, str]:
    result = CliRunner(mix_stderr=False).invoke(
        cli, [*args, "--db", str(world.db_path)], prog_name="engram-canary", catch_exceptions=False
    )
    return result.exit_code, result.stdout


@pytest.mark.engram
def test_a_check_discovers_the_schema_once(world: EngramEnvironment, discoveries: list[Schema]) -> None:
    # Before EngramDb: open_read_only discovered it, then run_check discovered it again (2).
    result = run_check(world.db_path, CanaryConfig(), None)
    assert [finding.target_key for finding in result.findings if finding.check == "foreign_sync_target"] == [
        "cloud:side"
    ]
    assert len(discoveries) == 1


@pytest.mark.engram
@pytest.mark.parametrize(
    ("args", "opens"),
    [
        (("check",), 1),
        (("inbox", "list"), 1),
        (("inbox", "export-keys"), 1),
        (("cleanup-phantoms",), 1),
        (("repair",), 1),
        # the dry-run snapshot, then triage's own write connection: one discovery per connection
        (("inbox", "drop", "--project", "side", "--apply"), 2),
    ],
    ids=["check", "inbox-list", "export-keys", "cleanup-phantoms", "repair", "drop-apply"],
)
def test_each_command_discovers_once_per_connection(
    world: EngramEnvironment, discoveries: list[Schema], args: tuple[str, ...], opens: int
) -> None:
    code, _ = run_cli(world, *args)
    assert code in {0, 1}
    assert len(discoveries) == opens


@pytest.mark.engram
def test_the_watcher_discovers_the_schema_once_per_file(
    world: EngramEnvironment, discoveries: list[Schema]
) -> None:
    """The watcher opens the file for each check (it holds no connection between checks, see
    test_canary_watch_restore) and reuses the schema it discovered while PRAGMA schema_version is unchanged."""
    from engram_sync_kit.canary.watch import Watcher, WatchOptions

    watcher = Watcher(
        WatchOptions(db_path=world.db_path, config=CanaryConfig(), baseline=None, stream=io.StringIO())
    )
    watcher._full_check(initial=True)
    save(world, "other", "a new foreign target")
    assert watcher._incremental_check()
    watcher._full_check(initial=False)
    assert set(watcher.alerted) == {"cloud:side", "cloud:other"}
    assert discoveries == [watcher.schema]


@pytest.mark.engram
def test_typed_queries_read_what_engram_wrote(world: EngramEnvironment) -> None:
    with EngramDb.open(world.db_path) as db:
        assert db.path == world.db_path
        assert db.enrolled_projects() == frozenset({"main"})
        with db.read_transaction():
            states = db.sync_state(("lifecycle", "no_such_column"))
            high = db.last_seq()
        assert all(isinstance(row, SyncStateRow) and row.target_key == key for key, row in states.items())
        (lifecycle,) = query(
            world.db_path, "SELECT lifecycle FROM sync_state WHERE target_key = 'cloud:side'"
        )[0]
        # a column this engram version lacks is left out, not invented
        assert states["cloud:side"] == SyncStateRow("cloud:side", {"lifecycle": lifecycle})
        assert high == query(world.db_path, "SELECT max(seq) FROM sync_mutations")[0][0] > 0
        assert isinstance(db.data_version(), int)
        with pytest.raises(sqlite3.OperationalError, match="readonly|query_only"):
            db.connection.execute("DELETE FROM sync_state")
    with pytest.raises(sqlite3.ProgrammingError):
        db.connection.execute("SELECT 1")  # `with` closed it


def _not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 100)


def _plain_sqlite(path: Path) -> None:
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE sync_state (target_key TEXT)")
    connection.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: None, "{path}: no such file (pass --db or set ENGRAM_DATA_DIR)"),
        (lambda path: path.mkdir(), "{path}: not a regular file; expected engram's engram.db"),
        (
            _not_sqlite,
            "{path}: cannot be read as SQLite (file is not a database)",
        ),
        (_plain_sqlite, "{path}: not an engram database with cloud sync (missing table sync_mutations)"),
    ],
    ids=["missing", "directory", "not-sqlite", "not-engram"],
)
def test_a_file_engram_did_not_write_is_refused_in_one_line(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "engram.db"
    make(path)
    with pytest.raises(DatabaseUnavailable) as refused:
        EngramDb.open(path)
    assert str(refused.value) == message.format(path=path)


def test_the_schema_is_the_files_own(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    connection = sqlite3.connect(path)
    connection.executescript(V120_SCHEMA.read_text(encoding="utf-8"))
    connection.close()
    with EngramDb.open(path) as db:
        assert db.schema.user_version == 0
        assert db.schema.has_column("sync_mutations", "project")
        assert not db.schema.has_column("sync_mutations", "disposition")
        assert db.enrolled_projects() == frozenset()
        assert db.sync_state(("lifecycle",)) == {"cloud": SyncStateRow("cloud", {"lifecycle": "idle"})}
        assert db.last_seq() == 0
