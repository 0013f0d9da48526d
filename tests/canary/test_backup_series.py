"""A plan run command by command keeps the backup from before it (issue 35 item 4): validate suggests up to
23 triage commands, each --apply takes a backup, and backups.keep (10) pruned the oldest: by the end of the
plan the state from before it was gone. Backups taken less than an hour apart are one series, and pruning
keeps the first backup of the newest series besides the `keep` newest. This failed first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram_sync_kit.canary.triage.backups import SERIES_GAP, prune_backups, series_start

pytestmark = pytest.mark.unit
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def backup(directory: Path, at: datetime, operation: str = "drop") -> Path:
    path = directory / f"engram.{at.strftime('%Y%m%dT%H%M%S.%fZ')}.{operation}.db"
    path.write_bytes(b"")
    return path


def test_a_23_command_plan_keeps_its_first_backup_and_the_10_newest(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    taken = []
    pruned: list[Path] = []
    for step in range(23):
        taken.append(backup(tmp_path, START + timedelta(seconds=20 * step), "claim" if step % 2 else "drop"))
        pruned += prune_backups(db, tmp_path, 10)
    kept = sorted(tmp_path.glob("*.db"))
    assert kept == [taken[0], *taken[-10:]]
    assert sorted(pruned) == taken[1:13]
    assert series_start(kept) == taken[0]


def test_a_gap_of_an_hour_starts_a_new_series(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    yesterday = [backup(tmp_path, START + timedelta(seconds=step)) for step in range(3)]
    just_under = START + timedelta(seconds=2) + SERIES_GAP - timedelta(microseconds=1)
    same_series = backup(tmp_path, just_under)
    assert series_start(sorted(tmp_path.glob("*.db"))) == yesterday[0]
    new_series = backup(tmp_path, just_under + SERIES_GAP)
    assert series_start(sorted(tmp_path.glob("*.db"))) == new_series
    assert prune_backups(db, tmp_path, 1) == [*yesterday, same_series]
    assert sorted(tmp_path.glob("*.db")) == [new_series]


def test_pruning_keeps_at_most_keep_plus_one_and_never_another_databases(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    other = tmp_path / "other.20261202T090000.000000Z.drop.db"
    other.write_bytes(b"")
    taken = [backup(tmp_path, START + timedelta(minutes=step)) for step in range(5)]
    assert prune_backups(db, tmp_path, 2) == taken[1:3]
    assert sorted(tmp_path.glob("engram.*.db")) == [taken[0], *taken[3:]]
    assert other.exists()
    assert series_start([]) is None
