"""The canary and triage against every engram schema generation the kit knows: v1.20.0 (from the real
binary), the v1 line's generation 8, v2.0.0-rc.11, v2.0.0-rc.12+ and v3, transcribed from engram's source
(tests/fixtures/engram_schemas/; engram_sync_kit/engram_contract/generations.py).

Everything but v1.20.0 is a prediction from source, not an observation: no such binary builds here.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engram_schemas.builder import (
    ALL_TIME,
    ENROLLED,
    FIXTURE_VERSIONS,
    FRESH_UNJOURNALED,
    PHANTOM_TARGET,
    STRAY,
    build,
    create_database,
)
from engram_schemas.builder import V1_LINE as FIXTURE_V1_LINE
from engram_schemas.builder import V2 as FIXTURE_V2
from engram_schemas.builder import V2_RC12 as FIXTURE_V2_RC12
from engram_schemas.builder import V3 as FIXTURE_V3
from engram_schemas.builder import V120 as FIXTURE_V120

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.report import TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.canary.schema_support import (
    NEWER_THAN_V3,
    V1_LINE,
    V2,
    V2_RC12,
    V3,
    V120,
    LaneModel,
    identify,
)

EXPECTED_VERSION = {
    FIXTURE_V120: V120,
    FIXTURE_V1_LINE: V1_LINE.format(user_version=8),
    FIXTURE_V2: V2,
    FIXTURE_V2_RC12: V2_RC12,
    FIXTURE_V3: V3,
}
EXPECTED_USER_VERSION = {
    FIXTURE_V120: 0,
    FIXTURE_V1_LINE: 8,
    FIXTURE_V2: 1,
    FIXTURE_V2_RC12: 1,
    FIXTURE_V3: 1,
}
SOURCE_FIXTURES = tuple(version for version in FIXTURE_VERSIONS if version != FIXTURE_V120)
# The checks whose semantics depend on the database kind (lane health is pinned in its own tests).
TARGET_CHECKS = {"foreign_sync_target", "foreign_mutation_target", "undelivered_project_lane"}
NO_PROJECT = "(no project)"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture(params=FIXTURE_VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(version: str, tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    build(version, path)
    return path


@pytest.fixture
def design_db(tmp_path: Path) -> Path:
    """A v3 schema whose data follows the design (no engram release does yet): simulated."""
    (tmp_path / "design").mkdir()
    path = tmp_path / "design" / "engram.db"
    build(FIXTURE_V3, path, design_conforming=True)
    return path


def kind_of(path: Path) -> tuple[str, LaneModel, int]:
    with EngramDb.open(path) as engram:
        kind = identify(engram)
    return kind.version, kind.lane_model, kind.user_version


def inbox_entries(path: Path) -> dict[str, dict[str, object]]:
    code, output = run("inbox", "list", "--db", str(path), "--format", "json")
    assert code == 0, output
    return {str(entry["key"]): entry for entry in json.loads(output)}


def stray_key(path: Path) -> str:
    """The inbox key of the unenrolled project's rows (its name is the derivation's business)."""
    (key,) = inbox_entries(path)
    return key


def check_json(path: Path) -> tuple[int, dict[str, Any]]:
    code, output = run("check", "--db", str(path), "--format", "json", "--no-baseline")
    return code, json.loads(output)


def test_each_fixture_reads_as_its_version_with_legacy_only_lanes(version: str, db: Path) -> None:
    assert kind_of(db) == (EXPECTED_VERSION[version], LaneModel.LEGACY_ONLY, EXPECTED_USER_VERSION[version])


def test_design_routing_makes_a_database_design_conforming(design_db: Path) -> None:
    assert kind_of(design_db) == (V3, LaneModel.DESIGN_CONFORMING, 1)


def test_check_flags_the_phantom_and_never_the_inbox_row(version: str, db: Path) -> None:
    code, result = check_json(db)
    findings = result["findings"]
    assert isinstance(findings, list)
    assert code >= 1, result
    assert sorted((f["check"], f["target_key"]) for f in findings if f["check"] in TARGET_CHECKS) == [
        ("foreign_sync_target", PHANTOM_TARGET),
        ("undelivered_project_lane", f"cloud:{ENROLLED}"),
    ]
    assert all(f["target_key"] != "cloud:inbox" for f in findings)
    assert "cloud:inbox" in result["allowed_targets"]


def test_v2_v3_inbox_row_is_seeded_healthy_and_not_a_phantom(tmp_path: Path) -> None:
    """Every fresh fixture reads clean: no finding, nothing to clean up (the v1 line seeds no inbox row)."""
    for version in SOURCE_FIXTURES:
        path = tmp_path / f"{version}.db"
        create_database(version, path)
        with contextlib.closing(sqlite3.connect(path)) as connection:
            rows = connection.execute(
                "SELECT target_key, lifecycle FROM sync_state ORDER BY target_key"
            ).fetchall()
        seeded = [] if version == FIXTURE_V1_LINE else [("cloud:inbox", "inbox")]
        assert rows == [("cloud", "idle"), *seeded]
        code, result = check_json(path)
        assert (code, result["status"], result["findings"]) == (0, "ok", [])
        code, output = run("cleanup-phantoms", "--db", str(path))
        assert code == 0 and "cloud:inbox" not in output, output


def test_quarantined_rows_are_not_counted_as_waiting(version: str, db: Path) -> None:
    _, result = check_json(db)
    summary = result["summary"]
    assert isinstance(summary, dict)
    # legacy lane: 3 stray rows wait (the enrolled rows are acked; v2/v3 add one quarantined row, not waiting);
    # a fresh rc.12+ file journals none of the unenrolled project's saves
    stray = 0 if version in FRESH_UNJOURNALED else 3
    assert summary["unacked_rows_by_target"] == {"cloud": stray, f"cloud:{ENROLLED}": 3}


def test_inbox_list_reads_the_unenrolled_project(version: str, db: Path) -> None:
    """On a fresh rc.12+ file the journal holds nothing of it: its memory is read from observations (its
    session and prompt are telemetry, never inbox debt, and no journal row counts them)."""
    entries = inbox_entries(db)
    expected = [(1, 0)] if version in FRESH_UNJOURNALED else [(1, 2)]
    assert [(entry["count"], entry["telemetry"]) for entry in entries.values()] == expected, entries
    assert ENROLLED not in entries


def test_design_conforming_inbox_reads_cloud_inbox_and_project_lanes_are_live(design_db: Path) -> None:
    entries = inbox_entries(design_db)
    assert [entry["total"] for entry in entries.values()] == [3], entries
    _, result = check_json(design_db)
    checks = {(f["check"], f["target_key"]) for f in result["findings"]}
    assert ("undelivered_project_lane", f"cloud:{ENROLLED}") not in checks
    assert all(target != "cloud:inbox" for _, target in checks)


def test_triage_dry_runs(version: str, db: Path) -> None:
    key = stray_key(db)
    if version in FRESH_UNJOURNALED:
        # No journal row to ack or copy: only enrolling sends these memories (engram's backfill).
        code, output = run("inbox", "drop", "--db", str(db), "--project", key)
        assert (code, output.count("\n")) == (3, 1) and "never journaled" in output, output
        return
    code, output = run("inbox", "drop", "--db", str(db), "--project", key)
    assert code == 0 and output.startswith(f"dry run: drop 3 rows of inbox key '{key}'"), output
    code, output = run("inbox", "claim", "--db", str(db), "--project", key, "--as", ENROLLED)
    assert code == 0 and output.startswith(f"dry run: claim 1 rows of inbox key '{key}'"), output
    code, output = run("cleanup-phantoms", "--db", str(db))
    assert code == 0, output
    assert f"keep: '{PHANTOM_TARGET}' still holds 3 unacked rows" in output
    assert "cloud:inbox" not in output


@pytest.mark.parametrize("version", [v for v in SOURCE_FIXTURES if v not in FRESH_UNJOURNALED])
def test_triage_refuses_to_write_an_untested_schema(version: str, db: Path) -> None:
    before = db.read_bytes()
    code, output = run("inbox", "drop", "--db", str(db), "--project", stray_key(db), "--apply")
    assert code != 0
    assert output.count("\n") == 1, output
    assert f"looks like engram {EXPECTED_VERSION[version]}" in output
    assert "nothing was written" in output
    assert db.read_bytes() == before
    assert not (db.parent / "engram-canary-backups").exists() or not any(
        (db.parent / "engram-canary-backups").iterdir()
    )


def test_triage_refuses_a_design_conforming_database(design_db: Path) -> None:
    code, output = run("cleanup-phantoms", "--db", str(design_db), "--apply")
    assert code != 0 and output.count("\n") == 1, output
    assert "design-conforming lanes" in output


def test_triage_still_writes_v120(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(FIXTURE_V120, path)
    code, output = run("inbox", "drop", "--db", str(path), "--project", stray_key(path), "--apply")
    assert code == 0, output
    with contextlib.closing(sqlite3.connect(path)) as connection:
        waiting = connection.execute(
            "SELECT count(*) FROM sync_mutations WHERE project = ? AND acked_at IS NULL", (STRAY,)
        ).fetchone()[0]
    assert waiting == 0


def test_a_virtual_table_of_an_unknown_module_does_not_block_reading(tmp_path: Path) -> None:
    """A future engram may add e.g. a sqlite-vec table; the canary never reads it, so it must not fail."""
    path = tmp_path / "engram.db"
    build(FIXTURE_V3, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA writable_schema = ON")
        connection.execute(
            "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES "
            "('table', 'obs_vec', 'obs_vec', 0, 'CREATE VIRTUAL TABLE obs_vec USING vec0(embedding float[4])')"
        )
        connection.commit()
    code, result = check_json(path)
    assert code >= 1 and result["error"] is None, result
    assert ("foreign_sync_target", PHANTOM_TARGET) in {
        (f["check"], f["target_key"]) for f in result["findings"]
    }


def test_old_acks_on_a_project_lane_keep_a_v120_database_legacy_only(tmp_path: Path) -> None:
    """v1.14-era databases kept acked rows under cloud:<project>; on a v1.20 file that is history, not a
    live lane, so the inbox, the lane check and triage's writes keep v1.20's semantics."""
    path = tmp_path / "engram.db"
    build(FIXTURE_V120, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(
            "UPDATE sync_mutations SET acked_at = '2026-05-01 00:00:00' WHERE seq = "
            "(SELECT min(seq) FROM sync_mutations WHERE target_key = ?)",
            (f"cloud:{ENROLLED}",),
        )
        connection.commit()
    assert kind_of(path) == (V120, LaneModel.LEGACY_ONLY, 0)
    code, output = run("inbox", "drop", "--db", str(path), "--project", stray_key(path), "--apply")
    assert code == 0, output


def test_baseline_then_check_and_textfile(version: str, db: Path, tmp_path: Path) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text(f"baseline: {tmp_path / 'baseline.json'}\n", encoding="utf-8")
    code, output = run("--config", str(config), "baseline", "--db", str(db), "--reason", "known")
    assert code == 0, output
    prom = tmp_path / "prom"
    prom.mkdir()
    code, output = run("--config", str(config), "check", "--db", str(db), "--textfile-dir", str(prom))
    assert code == 0, output
    assert output.startswith("ENGRAM-CANARY OK - no unacknowledged foreign sync target"), output
    metrics = (prom / textfile_name(TEXTFILE_PREFIX, str(db))).read_text(encoding="utf-8")
    assert "engram_canary_" in metrics and "cloud:inbox" not in metrics


@pytest.mark.parametrize("version", SOURCE_FIXTURES)
def test_a_quarantined_row_neither_blocks_a_lane_nor_is_offered_for_repair(version: str, db: Path) -> None:
    """v2/v3 quarantine a malformed row (disposition 'quarantined') and never send it again, so it cannot
    hold the lane back; the fixture's quarantined row has a payload the cloud would refuse."""
    _, result = check_json(db)
    checks = {f["check"] for f in result["findings"]}
    assert not checks & {"legacy_lane_blocked", "project_lane_blocked"}, result["findings"]
    code, output = run("repair", "--db", str(db))
    assert code == 0, output
    assert "obs-quarantined" not in output, output


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("PRAGMA user_version = 2", NEWER_THAN_V3.format(user_version=2)),
        # v3's columns gone, PR #1157's table kept: read as a v2 rc.12+ file
        ("ALTER TABLE sessions DROP COLUMN runtime_lease_expires_at", V2_RC12),
    ],
)
def test_triage_names_what_it_sees_on_an_unknown_schema(change: str, named: str, tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(FIXTURE_V3, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(change)
        connection.commit()
    code, output = run("inbox", "drop", "--db", str(path), "--project", stray_key(path), "--apply")
    assert code != 0 and output.count("\n") == 1, output
    assert f"looks like engram {named}" in output


def test_a_v1_file_without_per_project_sync_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(FIXTURE_V120, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("DROP INDEX idx_sync_mutations_project")
        connection.execute("ALTER TABLE sync_mutations DROP COLUMN project")
        connection.commit()
    before = path.read_bytes()
    code, output = run("inbox", "drop", "--db", str(path), "--seq", "1", "--apply")
    assert code != 0 and output.count("\n") == 1, output
    assert "predates per-project sync" in output or "v1 before per-project sync" in output, output
    assert path.read_bytes() == before


def test_check_json_names_the_schema_and_lane_model_it_read(version: str, db: Path, design_db: Path) -> None:
    _, result = check_json(db)
    summary = result["summary"]
    assert isinstance(summary, dict)
    assert (summary["engram_schema"], summary["lane_model"]) == (EXPECTED_VERSION[version], "legacy-only")
    _, result = check_json(design_db)
    assert result["summary"]["lane_model"] == "design-conforming"


def test_watch_alerts_on_a_new_phantom_and_never_on_the_inbox_row(
    version: str, db: Path, tmp_path: Path
) -> None:
    from canary_support import WatchProcess, write_settings

    write_settings(tmp_path / "xdg", "watch:\n  full_recheck_seconds: 600\n")
    watcher = WatchProcess(["--db", str(db)], tmp_path / "xdg")
    try:
        watcher.wait_started()
        with contextlib.closing(sqlite3.connect(db)) as connection:
            # SIMULATED DATA: the phantom row a derived key mints (v1.20 observed; v2/v3 predicted from source).
            connection.execute(
                "INSERT INTO sync_state (target_key, lifecycle, updated_at) VALUES ('cloud:later', 'pending', "
                "datetime('now'))"
            )
            connection.commit()
        line = watcher.wait_for(lambda text: "NEW foreign sync target cloud:later " in text, what="the alert")
        assert line.startswith(
            "engram-canary WARNING: NEW foreign sync target cloud:later in sync_state ("
        ), line
        assert watcher.stop() == 0
    finally:
        watcher.kill()
    assert not [text for text in watcher.snapshot() if "cloud:inbox" in text], watcher.snapshot()


@pytest.mark.parametrize("user_version", [-5, 7, 2**31 - 1])
def test_an_odd_user_version_is_read_and_named_never_written(user_version: int, tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(FIXTURE_V120, path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA user_version = {user_version}")
        connection.commit()
    code, result = check_json(path)
    assert (code, result["error"]) == (1, None), result
    named = f"unknown (v1.20 columns, user_version {user_version})"
    assert result["summary"]["engram_schema"] == named
    code, output = run("inbox", "drop", "--db", str(path), "--project", stray_key(path), "--apply")
    assert code != 0 and output.count("\n") == 1 and f"looks like engram {named}" in output, output


# --- per-version wording and counting ---


def add_projectless_rows(db: Path, *, disposition: str | None) -> None:
    """SIMULATED DATA: a save without --project journals an observation with project '' on the legacy
    lane (v1.20 observed); on v2/v3 engram's recovery may quarantine it (disposition, predicted from
    internal/cloud/autosync/manager.go @0cd24e8a)."""
    columns = ", disposition, disposition_reason, disposition_at" if disposition else ""
    values = ", ?, 'payload_invalid', ?" if disposition else ""
    extra: tuple[str, ...] = (disposition, ALL_TIME) if disposition else ()
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
            f"occurred_at{columns}) VALUES ('cloud', 'observation', 'obs-loose', 'upsert', '{{}}', 'local', '', "
            f"?{values})",
            (ALL_TIME, *extra),
        )
        connection.commit()


@pytest.mark.parametrize("version", [v for v in FIXTURE_VERSIONS if v != FIXTURE_V120])
def test_a_quarantined_row_without_a_project_is_not_unattributed(version: str, db: Path) -> None:
    add_projectless_rows(db, disposition="quarantined")
    assert NO_PROJECT not in inbox_entries(db)
    code, output = run("check", "--db", str(db), "--format", "json", "--no-baseline")
    checks = {finding["check"] for finding in json.loads(output)["findings"]}
    assert "unattributed_mutations" not in checks, output


def test_a_waiting_row_without_a_project_is_unattributed(version: str, db: Path) -> None:
    add_projectless_rows(db, disposition=None)
    assert inbox_entries(db)[NO_PROJECT]["count"] == 1


_JOURNALS_ALL = (
    "journals every mutation in the legacy 'cloud' lane with a project column, as v1.20 does; 'cloud:<project>' "
    "is a sync_state row, and its worker reads only 'cloud'; "
)
_JOURNALS_ENROLLED = (
    "journals only enrolled projects, in the legacy 'cloud' lane, and never writes a 'cloud:<project>' row for an "
    "unenrolled one: this target is a legacy row from before the upgrade; "
)
NOTES = {
    "v1.20.0": "note: engram v1.20 journals every mutation in the legacy 'cloud' lane with a project column; ",
    "v1-02544436": f"note: engram {EXPECTED_VERSION[FIXTURE_V1_LINE]} (predicted from source, "
    "internal/store/store.go@02544436 (migration_version_test.go@02544436: generations 2-8)) "
    + _JOURNALS_ALL,
    "v2-1be5d11f": f"note: engram {V2} (predicted from source, internal/store/store.go@1be5d11f, "
    "internal/store/cloud_inbox_test.go@1be5d11f) " + _JOURNALS_ALL,
    "v2-rc12": f"note: engram {V2_RC12} (predicted from source, PR #1157 as store.go@d4397781 has it; the /v2 "
    "worker with StateKey (index file id 71019478362)) " + _JOURNALS_ENROLLED,
    "v3-d4397781": f"note: engram {V3} (predicted from source, internal/store/store.go@d4397781, "
    "internal/server/server.go@d4397781) " + _JOURNALS_ENROLLED,
}


def test_check_text_notes_the_lanes_of_the_version_it_read(version: str, db: Path) -> None:
    code, output = run("check", "--db", str(db), "--no-baseline")
    assert code >= 1, output
    notes = [line for line in output.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, output
    assert notes[0].startswith(NOTES[version]), notes[0]
    assert notes[0].endswith(
        "project_unacked_rows counts unacked rows (any lane) whose project maps to this target"
    )


def test_check_text_notes_design_routing_on_a_design_conforming_database(design_db: Path) -> None:
    code, output = run("check", "--db", str(design_db), "--no-baseline")
    assert code >= 1, output
    notes = [line for line in output.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: engram v3 follows the design's routing here: rows of unenrolled projects wait on 'cloud:inbox' "
        "and each enrolled project's 'cloud:<project>' lane delivers; project_unacked_rows counts unacked rows "
        "(any lane) whose project maps to this target"
    ], output


@pytest.mark.parametrize("version", FIXTURE_VERSIONS)
def test_every_command_on_a_fresh_fixture_names_its_version_and_finds_nothing(
    version: str, tmp_path: Path
) -> None:
    """A database as each generation's own first open leaves it: no false finding anywhere."""
    path = tmp_path / "engram.db"
    create_database(version, path)
    code, result = check_json(path)
    assert (code, result["summary"]["engram_schema"], result["findings"]) == (
        0,
        EXPECTED_VERSION[version],
        [],
    )
    assert run("inbox", "list", "--db", str(path), "--format", "json") == (0, "[]\n")
    code, output = run("repair", "--db", str(path))
    assert code == 0 and output.startswith("nothing to repair"), output
    code, output = run("cleanup-phantoms", "--db", str(path))
    assert code == 0 and output.startswith("dry run: delete 0 phantom sync_state rows"), output
    code, output = run("inbox", "export-keys", "--db", str(path))
    assert code == 0, output


def test_a_filled_fixture_shows_only_the_simulated_true_findings(version: str, db: Path) -> None:
    """The fill's phantom target and its legacy per-project lane rows, on every generation, and nothing else."""
    _, result = check_json(db)
    assert {f["check"] for f in result["findings"]} == {"foreign_sync_target", "undelivered_project_lane"}
    assert {f["target_key"] for f in result["findings"] if f["check"] == "foreign_sync_target"} == {
        PHANTOM_TARGET
    }
