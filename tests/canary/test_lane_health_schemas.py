"""Lane health on a later engram's schema (v3, transcribed fixture) where per-project lanes are live.

The fill is the fixture builder's SIMULATION of v3 data; the refused row added here is simulated too.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

from engram_schemas.builder import ENROLLED, V3, V120, build

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.lane_health import lane_findings


def findings_after_refused_row(db: Path, target_key: str) -> list[Finding]:
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES (?, 'session', 's-x', 'upsert', ?, ?)",
            (target_key, json.dumps({"id": "s-x", "project": ENROLLED}), ENROLLED),
        )
    with EngramDb.open(db) as engram:
        return lane_findings(engram)


def test_a_live_per_project_lane_gets_the_same_check(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    build(V3, db, design_conforming=True)
    lane = f"cloud:{ENROLLED}"
    [finding] = [f for f in findings_after_refused_row(db, lane) if f.check == "project_lane_blocked"]
    assert (finding.target_key, finding.severity) == (lane, "critical")
    assert finding.evidence["reason"] == "500 session payload directory is required for upsert"
    assert (
        finding.evidence["clear_command"]
        == "engram doctor --check sync_mutation_required_fields (triage writes only v1.20's legacy lane)"
    )


def test_on_v120_a_per_project_lane_blocks_nothing(tmp_path: Path) -> None:
    """v1.20's worker never reads cloud:<p>: rows there are undelivered_project_lane's business."""
    db = tmp_path / "engram.db"
    build(V120, db)
    assert [f.check for f in findings_after_refused_row(db, f"cloud:{ENROLLED}")] == []
