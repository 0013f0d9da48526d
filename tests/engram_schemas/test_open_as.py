"""open_as: a home the real v1.20.0 binary wrote, opened as v2/v3 (predicted from store.go, never observed),
has exactly the fixture's schema, stays so when v1.20 writes again, and a second open changes nothing."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from engram_schemas.builder import V2 as FIXTURE_V2
from engram_schemas.builder import V3 as FIXTURE_V3
from engram_schemas.builder import create_database, dump_schema
from engram_schemas.open_as import open_as
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.schema_support import V2, V3, LaneModel, identify
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

NAMED = {FIXTURE_V2: V2, FIXTURE_V3: V3}


def shape(db: Path) -> tuple[dict[str, list[str]], list[str], int]:
    """Every table's columns, every named object (tables, indexes, triggers), and user_version."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        master = connection.execute(
            "SELECT name, type, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        virtual = [str(name) for name, _, sql in master if str(sql).upper().startswith("CREATE VIRTUAL")]
        objects = sorted(
            str(name)
            for name, kind, _ in master
            if kind != "table" or not any(str(name).startswith(f"{table}_") for table in virtual)
        )
        columns = {
            str(name): sorted(str(row[1]) for row in connection.execute(f'PRAGMA table_info("{name}")'))
            for name, kind, _ in master
            if kind == "table" and str(name) not in virtual
        }
        user_version = int(connection.execute("PRAGMA user_version").fetchone()[0])
    return columns, objects, user_version


def saved(world: EngramEnvironment, title: str, project: str) -> None:
    done = world.run(["save", title, f"content of {title}", "--project", project])
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("version", [FIXTURE_V2, FIXTURE_V3])
def test_a_v120_home_opened_as_a_newer_version_has_its_schema_and_keeps_it(
    version: str, engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    saved(engram_world, "before the upgrade", "alpha")
    open_as(version, engram_world.db_path)
    fixture = create_database(version, tmp_path / "fixture.db")
    assert shape(engram_world.db_path) == shape(fixture)
    after_open = dump_schema(engram_world.db_path)

    saved(engram_world, "after the upgrade", "beta")  # the real v1.20 binary writes into the v2/v3 file
    assert dump_schema(engram_world.db_path) == after_open
    open_as(version, engram_world.db_path)
    assert dump_schema(engram_world.db_path) == after_open

    with contextlib.closing(sqlite3.connect(f"file:{engram_world.db_path}?mode=ro", uri=True)) as connection:
        assert connection.execute("SELECT target_key, lifecycle FROM sync_state ORDER BY 1").fetchall() == [
            ("cloud", "pending"),
            ("cloud:alpha", "pending"),
            ("cloud:beta", "pending"),
            ("cloud:inbox", "inbox"),
        ]
        assert connection.execute(
            "SELECT DISTINCT project, disposition FROM sync_mutations ORDER BY 1"
        ).fetchall() == [("alpha", "pending"), ("beta", "pending")]
        # migrateFTS's trigram index holds the rows from before and after the upgrade
        assert connection.execute(
            "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH '\"upgrade\"'"
        ).fetchone() == (2,)
    with EngramDb.open(engram_world.db_path) as engram:
        kind = identify(engram)
    assert (kind.version, kind.lane_model) == (NAMED[version], LaneModel.LEGACY_ONLY)
