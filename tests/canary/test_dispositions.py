"""Rows a v2/v3 engram retires without acking them: `quarantined` (an irreparable legacy row) and
`superseded` (e.g. reason `local_entity_deleted`, or a legacy prompt discarded, or a session identity
migrated). Both stay unacked with their audit evidence and never reach transport again (predicted from
source: the transport reads `disposition = 'pending'` rows only; the doctor reports both as terminal,
non-blocking findings, internal/diagnostic checks, index file id 70782712360). The inbox tripwires and
lane health must stop counting such a row on the very next check, even though the number of unacked
rows and the journal's high-water mark did not change.

The fixtures are the v2/v3 schemas (tests/fixtures/engram_schemas/); every disposition written here
SIMULATES engram's own UPDATE (store.go: `UPDATE sync_mutations SET disposition=?, disposition_reason=?,
disposition_evidence=?, disposition_at=datetime('now') WHERE seq=? ... AND disposition='pending'`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engram_schemas.builder import ENROLLED, STRAY, V2, V3, build

from engram_sync_kit.canary.cli import cli

RETIRED = [("superseded", "local_entity_deleted"), ("quarantined", "payload_invalid")]
LANE_CHECKS = {"legacy_lane_blocked", "project_lane_blocked"}


def check_json(db: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["check", "--db", str(db), "--format", "json", "--no-baseline"])
    return dict(json.loads(result.output))


def retire(db: Path, entity_key: str, disposition: str, reason: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as connection:
        changed = connection.execute(
            "UPDATE sync_mutations SET disposition = ?, disposition_reason = ?, disposition_evidence = ?, "
            "disposition_at = datetime('now') WHERE entity_key = ? AND acked_at IS NULL AND disposition = 'pending'",
            (disposition, reason, json.dumps({"trigger": reason}), entity_key),
        ).rowcount
        connection.commit()
    assert changed >= 1


def add_refused_row(db: Path, target_key: str) -> None:
    """A session upsert without a directory: the cloud refuses it, so it blocks the lane it waits on."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project) "
            "VALUES (?, 'session', 's-refused', 'upsert', ?, 'local', ?)",
            (target_key, json.dumps({"id": "s-refused", "project": ENROLLED}), ENROLLED),
        )
        connection.commit()


def lane_blocks(result: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((f["check"], f["target_key"]) for f in result["findings"] if f["check"] in LANE_CHECKS)


@pytest.mark.parametrize("version", [V2, V3])
@pytest.mark.parametrize(("disposition", "reason"), RETIRED)
def test_a_retired_inbox_row_leaves_the_inbox_on_the_next_check(
    version: str, disposition: str, reason: str, tmp_path: Path
) -> None:
    db = tmp_path / "engram.db"
    build(version, db)
    before = check_json(db)["summary"]["inbox_keys"]
    assert before["unsorted"]["memories"] == 1, before
    retire(db, f"obs-{STRAY}", disposition, reason)
    after = check_json(db)["summary"]["inbox_keys"]
    assert after.get("unsorted", {}).get("memories", 0) == 0, after


@pytest.mark.parametrize("version", [V2, V3])
@pytest.mark.parametrize(("disposition", "reason"), RETIRED)
def test_a_retired_blocker_no_longer_blocks_the_legacy_lane(
    version: str, disposition: str, reason: str, tmp_path: Path
) -> None:
    db = tmp_path / "engram.db"
    build(version, db)
    add_refused_row(db, "cloud")
    assert lane_blocks(check_json(db)) == [("legacy_lane_blocked", "cloud")]
    retire(db, "s-refused", disposition, reason)
    assert lane_blocks(check_json(db)) == []


@pytest.mark.parametrize("version", [V2, V3])
@pytest.mark.parametrize(("disposition", "reason"), RETIRED)
def test_a_retired_blocker_no_longer_blocks_a_live_project_lane(
    version: str, disposition: str, reason: str, tmp_path: Path
) -> None:
    """Design-conforming data (simulated: no engram release routes so yet), where cloud:<p> is live."""
    db = tmp_path / "engram.db"
    build(version, db, design_conforming=True)
    lane = f"cloud:{ENROLLED}"
    add_refused_row(db, lane)
    assert lane_blocks(check_json(db)) == [("project_lane_blocked", lane)]
    retire(db, "s-refused", disposition, reason)
    result = check_json(db)
    assert lane_blocks(result) == []
    assert not [f for f in result["findings"] if f.get("target_key") == lane], result["findings"]


@pytest.mark.parametrize("version", [V2, V3])
def test_a_prompt_provenance_block_is_named_not_read_as_a_failed_push(version: str, tmp_path: Path) -> None:
    """The newer v2/v3 worker keeps a prompt that carries source_inbox_id pending when its local origin
    does not verify, and marks the lane degraded with reason `prompt_provenance_blocked` and the
    preflight's message (MarkSyncBlocked; engram_contract.prompt_preflight). Retrying does not clear it,
    and the lane's other rows still deliver: lane health must say so, not call it a failed push."""
    db = tmp_path / "engram.db"
    build(version, db)
    with contextlib.closing(sqlite3.connect(db)) as connection:
        payload = {
            "sync_id": "p-keyed",
            "session_id": f"sess-{ENROLLED}",
            "content": "c",
            "project": ENROLLED,
        }
        seq = connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project) "
            "VALUES ('cloud', 'prompt', 'p-keyed', 'upsert', ?, 'local', ?)",
            (json.dumps({**payload, "source_inbox_id": "inbox-1"}), ENROLLED),
        ).lastrowid
        message = f"prompt seq {seq}: unverified keyed prompt origin"
        connection.execute(
            "UPDATE sync_state SET lifecycle = 'degraded', reason_code = 'prompt_provenance_blocked', "
            "reason_message = ?, last_error = ? WHERE target_key = 'cloud'",
            (message, message),
        )
        connection.commit()
    [finding] = [f for f in check_json(db)["findings"] if f["check"] == "legacy_lane_blocked"]
    assert finding["evidence"]["reason_code"] == "prompt_provenance_blocked"
    assert finding["message"] == (
        "lane 'cloud' holds back a prompt engram's provenance preflight refused (prompt_provenance_blocked: "
        f"{message}): engram keeps it pending and never sends it until its local origin and session owner "
        "verify, while the lane's other rows keep delivering; retrying does not clear it (1 row pending)"
    )
