"""The schema generations (engram_sync_kit.engram_contract.generations) as each fixture reads: the rc.12+
prediction pinned (PR #1157: no journal row for an unenrolled save, backfill at enroll, doctor repair).
Everything but v1.20.0 is PREDICTED from the source the fixtures' headers cite."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from engram_schemas.builder import FIXTURE_VERSIONS, V1_LINE, V2, V2_RC12, V3, V120, create_database

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.engram_contract.generations import Generation, identify_generation

# fixture -> (name, journals unenrolled, mints cloud:<unenrolled>, doctor repairs foreign, remotes, observed)
EXPECTED = {
    V120: ("v1.20.0", True, True, False, False, True),
    V1_LINE: ("v1 line after v1.20 (schema generation 8)", True, True, None, False, False),
    V2: ("v2.0.0-rc.11", True, True, False, False, False),
    V2_RC12: ("v2.0.0-rc.12+", False, False, True, True, False),
    V3: ("v3", False, False, True, False, False),
}


def generation_of(version: str, tmp_path: Path, *changes: str) -> Generation:
    path = tmp_path / f"{version}.db"
    create_database(version, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        for change in changes:
            connection.execute(change)
        connection.commit()
    with EngramDb.open(path) as db:
        return identify_generation(db.schema)


@pytest.mark.parametrize("version", FIXTURE_VERSIONS)
def test_each_fixture_is_its_generation(version: str, tmp_path: Path) -> None:
    generation = generation_of(version, tmp_path)
    assert (
        generation.name,
        generation.journals_unenrolled,
        generation.mints_unenrolled_state,
        generation.doctor_repairs_foreign,
        generation.remote_state_keys,
        generation.observed,
    ) == EXPECTED[version]
    assert generation.predicted is not generation.observed
    assert generation.memories_answer_the_inbox is (generation.journals_unenrolled is False)


@pytest.mark.parametrize("version", [V2_RC12, V3])
def test_rc12_and_later_journal_enrolled_projects_only_and_backfill_at_enroll(
    version: str, tmp_path: Path
) -> None:
    generation = generation_of(version, tmp_path)
    assert generation.journals_unenrolled is False and generation.backfills_at_enroll is True
    assert generation.foreign_targets_are_legacy and generation.seeds_inbox
    assert generation.retired_by == ("acked", "quarantined", "superseded")
    assert "sync_delete_tombstones" in generation.pull_tables


def test_v3_needs_expected_project_on_update(tmp_path: Path) -> None:
    assert generation_of(V3, tmp_path).update_needs_expected_project is True
    assert generation_of(V120, tmp_path).update_needs_expected_project is False


@pytest.mark.parametrize(
    ("version", "change", "name"),
    [
        (V1_LINE, "PRAGMA user_version = 2", "v1 line after v1.20 (schema generation 2)"),
        (V1_LINE, "PRAGMA user_version = 9", "v1 line after v1.20, newer than generation 8 (user_version 9)"),
        (V3, "PRAGMA user_version = 2", "newer than the newest source read (user_version 2)"),
        (V2, "PRAGMA user_version = 3", "newer than the newest source read (user_version 3)"),
        (V120, "PRAGMA user_version = 1", "unknown (v1.20 columns, user_version 1)"),
        (V2_RC12, "DROP TABLE sync_delete_tombstones", "v2.0.0-rc.11"),
    ],
)
def test_the_boundaries_between_generations(version: str, change: str, name: str, tmp_path: Path) -> None:
    generation = generation_of(version, tmp_path, change)
    assert generation.name == name
    if "newer" in name or "unknown" in name:
        assert generation.journals_unenrolled is None and generation.memories_answer_the_inbox
