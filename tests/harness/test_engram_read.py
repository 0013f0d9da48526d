"""Every read-only open of an engram database quotes its path (engram_contract.read_only): the real engram
writes a home under a directory named with `#`, `%41`, a space and non-ASCII, then the directory gains a
`?` (engram v1.20 itself cannot live there: it opens the path cut at the `?`), and every harness reader
reads the same rows under both names. Before the quoting, `file:{path}?mode=ro` read `%41` as `A`, took
what follows `?` or `#` as the query or the fragment, and so dropped mode=ro."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from engram_sync_kit.engram_contract.read_only import connect_read_only, read_only_uri
from engram_sync_kit.harness.deployment.digest import canonical_digest
from engram_sync_kit.harness.design.checks import check_inbox_row
from engram_sync_kit.harness.design.schema import InboxRowCheck
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.read import EngramReadError, read_engram, read_with
from engram_sync_kit.harness.lanes import read_local_mutations, read_sync_state_targets
from engram_sync_kit.harness.scenario.localdata import read_sync_state_rows
from engram_sync_kit.harness.scenario.runner import copy_database
from engram_sync_kit.harness.scenario.step_results import SaveResult, StepResults

ENGRAM_CAN_LIVE_THERE = "#1 100%41 ü"
WITH_A_QUESTION_MARK = "what? #1 100%41 ü"


def test_the_read_only_uri_percent_quotes_the_path() -> None:
    uri = read_only_uri(Path("/data/what? #1 100%41 ü/engram.db"))
    assert uri == "file:/data/what%3F%20%231%20100%2541%20%C3%BC/engram.db?mode=ro"


def read_everything(db: Path, home: Path, copy: Path) -> set[str]:
    """Every harness reader on DB; the digests of DB and of its copy."""
    titles = read_engram(
        db, lambda connection: connection.execute("SELECT title FROM observations").fetchall()
    )
    assert titles == [("odd path",)]
    rows = read_local_mutations(db)
    assert sorted((row.lane, row.project, row.entity) for row in rows) == [
        ("cloud", "odd", "observation"),
        ("cloud", "odd", "session"),
    ]
    assert read_sync_state_targets(db) == ["cloud", "cloud:odd"]
    assert [row["target_key"] for row in read_sync_state_rows(db)] == ["cloud", "cloud:odd"]
    sync_id = next(row.entity_key for row in rows if row.entity == "observation")
    saved = StepResults({"save:odd": SaveResult("cli", str(home), sync_id=sync_id)})
    on_the_lane = InboxRowCheck(of="odd", target="cloud", key="odd", payload_cwd=False, acked=False)
    assert check_inbox_row(on_the_lane, saved, db) == []
    with contextlib.closing(connect_read_only(db)) as connection:
        assert connection.execute("SELECT count(*) FROM observations").fetchone() == (1,)
    with contextlib.closing(sqlite3.connect(db)) as holder:  # keeps a -wal beside it: the backup path
        holder.execute("SELECT count(*) FROM sync_mutations").fetchone()
        assert db.with_name("engram.db-wal").exists()
        copy_database(db, copy)
    return {canonical_digest(db), canonical_digest(copy)}


@pytest.mark.engram
def test_every_harness_reader_reads_engram_under_a_path_with_uri_characters(
    engram_bin: Path, tmp_path: Path
) -> None:
    world = EngramEnvironment(binary=engram_bin, root=tmp_path / ENGRAM_CAN_LIVE_THERE).prepare()
    for args in (
        ["cloud", "enroll", "odd"],
        ["save", "odd path", "saved under an odd name", "--project", "odd"],
    ):
        ran = world.run(args)
        assert ran.returncode == 0, ran.stderr
    digests = read_everything(world.db_path, world.home, tmp_path / "copy 1" / "engram.db")
    moved = world.root.rename(tmp_path / WITH_A_QUESTION_MARK)
    digests |= read_everything(
        moved / "engram-data" / "engram.db", world.home, tmp_path / "copy 2" / "engram.db"
    )
    assert len(digests) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["copy 1", "copy 2", WITH_A_QUESTION_MARK]


def test_a_missing_or_foreign_database_is_one_harness_line(tmp_path: Path) -> None:
    foreign = tmp_path / "what? #1 100%41 ü.db"
    with contextlib.closing(sqlite3.connect(foreign)) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    for db in (tmp_path / "missing.db", foreign):
        with pytest.raises(EngramReadError) as failed:
            read_engram(db, lambda connection: connection.execute("SELECT 1").fetchone())
        assert str(db) in str(failed.value) and "\n" not in str(failed.value)
        assert read_with(db, lambda connection: connection.execute("SELECT 1").fetchone(), "empty") == "empty"
    assert sorted(path.name for path in tmp_path.iterdir()) == [foreign.name]
