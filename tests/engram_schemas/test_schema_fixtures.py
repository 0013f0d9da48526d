"""The v1.20.0 schema fixture is what the real binary creates; the v2/v3 fixtures build and say where from."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engram_schemas.builder import FIXTURE_VERSIONS, V120, create_database, dump_schema, fixture_path
from engram_sync_kit.harness.engram.env import EngramEnvironment


def fixture_ddl(version: str) -> str:
    """The fixture without its comment lines and engram's seed rows: what dump_schema prints."""
    text = fixture_path(version).read_text(encoding="utf-8")
    ddl = text.split("-- BEGIN engram seed rows")[0]
    return "\n".join(line for line in ddl.splitlines() if not line.startswith("-- ")) + "\n"


@pytest.mark.engram
def test_v120_fixture_is_the_schema_the_real_binary_creates(engram_world: EngramEnvironment) -> None:
    done = engram_world.run(["stats"])
    assert done.returncode == 0, done.stderr
    assert dump_schema(engram_world.db_path) == fixture_ddl(V120)
    with sqlite3.connect(engram_world.db_path) as connection:
        assert connection.execute("SELECT target_key, lifecycle FROM sync_state").fetchall() == [
            ("cloud", "idle")
        ]


@pytest.mark.parametrize("version", FIXTURE_VERSIONS)
def test_every_fixture_builds_and_names_its_source(version: str, tmp_path: Path) -> None:
    create_database(version, tmp_path / "engram.db")
    header = fixture_path(version).read_text(encoding="utf-8").splitlines()[0]
    if version == V120:
        assert "made by the real v1.20.0 binary" in fixture_path(version).read_text(encoding="utf-8")
    else:
        assert "TRANSCRIBED FROM SOURCE" in header
        assert "internal/store/store.go @ " in fixture_path(version).read_text(encoding="utf-8")
