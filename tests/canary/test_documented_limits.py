"""Documented limits pinned on both sides of their boundary (issue 39: a mutation run left them unguarded):
the inbox age warning at exactly its threshold, and `drop --seq` on a row outside the legacy lane."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from engram_schemas.builder import V120, build

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.inbox.selection import KeyTotals, TripwireInputs, findings_from
from engram_sync_kit.canary.inbox.settings import InboxSettings
from engram_sync_kit.canary.triage.plan import RowSelection, TriageError, select_lane_rows
from engram_sync_kit.engram_contract import LEGACY_TARGET

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
DAY = 86400


def age_findings(waited_seconds: float, settings: InboxSettings) -> list[str]:
    totals = KeyTotals(count=2, oldest=NOW.timestamp() - waited_seconds, projects=[None])
    totals.oldest_memory = totals.oldest
    inputs = TripwireInputs(keys={"side-project": totals})
    return [finding.message for finding in findings_from(inputs, set(), None, NOW, settings)]


@pytest.mark.parametrize("age_days", [7.0, 0.5])
def test_the_inbox_age_warning_starts_just_past_its_threshold(age_days: float) -> None:
    settings = InboxSettings(age_days=age_days)
    assert age_findings(age_days * DAY - 1, settings) == []
    assert age_findings(age_days * DAY, settings) == []
    (message,) = age_findings(age_days * DAY + 1, settings)
    assert message.startswith(f"inbox key 'side-project' has waited {age_days:.1f} days (> {age_days:g}): 2 ")


def test_drop_seq_takes_a_legacy_lane_row_and_refuses_one_on_a_project_lane(tmp_path: Path) -> None:
    # The builder's rows simulate what v1.20 leaves (its cloud:<project> rows are simulated legacy data).
    data = build(V120, tmp_path / "engram.db")
    with sqlite3.connect(tmp_path / "engram.db") as connection:
        lane_seq, legacy_seq = (
            connection.execute(
                "SELECT min(seq) FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL", (target,)
            ).fetchone()[0]
            for target in (f"cloud:{data.enrolled}", LEGACY_TARGET)
        )
    db = EngramDb.open(tmp_path / "engram.db")
    try:
        with pytest.raises(TriageError) as refused:
            select_lane_rows(db, RowSelection(seqs=(lane_seq,)))
        assert str(refused.value) == (
            f"seq {lane_seq} is on lane 'cloud:{data.enrolled}'; drop --seq selects legacy-lane rows only"
        )
        assert [row.seq for row in select_lane_rows(db, RowSelection(seqs=(legacy_seq,)))] == [legacy_seq]
    finally:
        db.close()
