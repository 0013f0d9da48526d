"""legacy_lane_blocked in check (text, JSON, Prometheus) and watch, and `repair`, on rows the real engram v1.20 wrote.

Cases engram v1.20 cannot produce by itself (damaged payloads of engram#299, a degraded state, a live
per-project lane of a later engram) are SIMULATIONS OF LEGACY DATA, written straight into the tables and
labelled where they happen.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from canary_support import WatchProcess
from inbox_support import canary, db_digest, engram_ok, query, save

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.report import TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


@pytest.fixture
def blocked(engram_world: EngramEnvironment) -> EngramEnvironment:
    """`engram save` without a project first, then saves of two enrolled projects behind it."""
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    engram_ok(world, "cloud", "enroll", "other")
    engram_ok(world, "save", "loose", "no --project", cwd=world.home)
    save(world, "main-proj", "held one", cwd=world.home)
    save(world, "main-proj", "held two", cwd=world.home)
    save(world, "other", "held three", cwd=world.home)
    return world


def lane_findings(world: EngramEnvironment) -> tuple[int, list[dict[str, Any]]]:
    result = canary(world, "check", "--format", "json")
    document = json.loads(result.stdout)
    return result.returncode, [f for f in document["findings"] if f["check"].endswith("_lane_blocked")]


def simulate(db: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    """SIMULATION OF LEGACY DATA: the given writes, straight into engram's tables, in one transaction."""
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        connection.execute("BEGIN")
        for sql, parameters in statements:
            connection.execute(sql, parameters)
        connection.execute("COMMIT")


def test_check_names_the_block_the_rows_behind_it_and_the_way_out(blocked: EngramEnvironment) -> None:
    world = blocked
    db = world.db_path
    loose = [row[0] for row in query(db, "SELECT seq FROM sync_mutations WHERE project = '' ORDER BY seq")]
    status, [finding] = lane_findings(world)
    assert status == 2
    assert (finding["check"], finding["severity"], finding["target_key"]) == (
        "legacy_lane_blocked",
        "critical",
        "cloud",
    )
    evidence = finding["evidence"]
    assert evidence["blocking_seqs"] == loose
    assert evidence["reason"] == "400 mutation entries must specify a project"
    assert evidence["held_back_by_project"] == {"main-proj": 4, "other": 2}
    assert evidence["held_back_rows"] == 6
    assert evidence["clear_command"] == f"engram-canary inbox drop --unattributed --db {db} --apply"
    assert finding["message"] == (
        f"lane 'cloud' is blocked: the cloud refuses seq {loose[0]} (session, project '': 400 mutation entries "
        "must specify a project) and 1 more; 6 rows wait behind it (main-proj: 4, other: 2); clear it with: "
        f"engram-canary inbox drop --unattributed --db {db} --apply"
    )
    text = canary(world, "check")
    assert text.returncode == 2 and "legacy_lane_blocked" in text.stdout
    prom_dir = world.root / "prom"
    prom_dir.mkdir()
    assert canary(world, "check", "--textfile-dir", str(prom_dir)).returncode == 2
    prom = (prom_dir / textfile_name(TEXTFILE_PREFIX, str(world.db_path))).read_text()
    assert any(
        line.startswith("engram_canary_findings{")
        and 'check="legacy_lane_blocked"' in line
        and 'severity="critical"' in line
        and line.endswith(" 1.0")
        for line in prom.splitlines()
    ), prom
    assert f'engram_canary_lane_blocked_rows{{db="{db}",kind="held_back",lane="cloud"}} 6.0' in prom
    assert f'engram_canary_lane_blocked_rows{{db="{db}",kind="blocking",lane="cloud"}} 2.0' in prom
    # the way out clears the finding
    assert canary(world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
    assert lane_findings(world)[1] == []


def test_watch_says_when_the_lane_blocks_and_when_it_clears(
    blocked: EngramEnvironment, tmp_path: Path
) -> None:
    world = blocked
    config_home = tmp_path / "config"
    (config_home / "engram-canary").mkdir(parents=True)
    (config_home / "engram-canary" / "config.yaml").write_text(
        "watch:\n  full_recheck_seconds: 0.5\n  poll: true\n"
    )
    watcher = WatchProcess(["--db", str(world.db_path)], config_home)
    try:
        watcher.wait_started()
        watcher.wait_for(
            lambda line: line.startswith(
                "engram-canary CRITICAL: legacy_lane_blocked lane 'cloud' is blocked"
            ),
            what="watch to report the blocked lane",
        )
        assert canary(world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
        watcher.wait_for(
            lambda line: line == f"engram-canary OK: lane 'cloud' is no longer blocked db={world.db_path}",
            what="watch to report the lane clear",
        )
    finally:
        watcher.process.terminate()
        watcher.process.wait(timeout=10)


def test_repair_names_what_it_cannot_derive_and_writes_nothing(blocked: EngramEnvironment) -> None:
    world = blocked
    before = db_digest(world.db_path)
    loose = [
        row[0]
        for row in query(world.db_path, "SELECT seq FROM sync_mutations WHERE project = '' ORDER BY seq")
    ]
    dry = canary(world, "repair")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:2] == [
        "dry run: repair 0 pending rows the cloud refuses (2 more cannot be derived: drop them); nothing was written",
        f"  refuse: seq {loose[0]} session manual-save upsert: the cloud would answer 400 mutation entries must "
        "specify a project; cannot be derived: engram recorded no project for it; drop it "
        "(engram-canary inbox drop --unattributed)",
    ]
    applied = canary(world, "repair", "--apply")
    assert (applied.returncode, applied.stdout) == (3, "")
    assert applied.stderr.startswith(
        "engram-canary: error: nothing to repair: 2 refused rows have no derivable value"
    )
    assert db_digest(world.db_path) == before


def test_nothing_to_repair_on_a_healthy_lane(engram_world: EngramEnvironment) -> None:
    engram_ok(engram_world, "cloud", "enroll", "main-proj")
    save(engram_world, "main-proj", "fine", cwd=engram_world.home)
    result = canary(engram_world, "repair", "--apply")
    assert (result.returncode, result.stdout) == (
        0,
        "nothing to repair: every pending row passes the cloud's push contract; nothing was written\n",
    )
    assert lane_findings(engram_world) == (0, [])


def test_repair_derives_type_and_project_from_engrams_tables(engram_world: EngramEnvironment) -> None:
    """engram#299: rows with an empty project and type, which users fixed by hand in SQLite."""
    world = engram_world
    db = world.db_path
    engram_ok(world, "cloud", "enroll", "main-proj")
    save(world, "main-proj", "damaged", cwd=world.home)
    [(seq, payload)] = query(db, "SELECT seq, payload FROM sync_mutations WHERE entity = 'observation'")
    damaged = {key: value for key, value in json.loads(payload).items() if key not in {"type", "project"}}
    simulate(
        db, ("UPDATE sync_mutations SET payload = ?, project = '' WHERE seq = ?", (json.dumps(damaged), seq))
    )
    repaired = canary(world, "repair", "--apply")
    assert repaired.returncode == 0, repaired.stderr
    assert (
        f"(copy of seq {seq}, project '', repaired: project 'main-proj' from session 'manual-save-main-proj'; "
        "type 'manual' from the observations table)"
    ) in repaired.stdout
    [(copy_payload, project)] = query(
        db, "SELECT payload, project FROM sync_mutations WHERE seq > ? AND entity = 'observation'", seq
    )
    assert project == "main-proj"
    assert json.loads(copy_payload) == {**damaged, "project": "main-proj", "type": "manual"}
    assert query(db, "SELECT acked_at IS NOT NULL FROM sync_mutations WHERE seq = ?", seq) == [(1,)]
    doctor = json.loads(engram_ok(world, "doctor", "--json", "--check", "sync_mutation_required_fields"))
    assert [check["result"] for check in doctor["checks"]] == ["ok"]
    assert lane_findings(world) == (0, [])


def test_a_degraded_lane_without_a_contract_blocker_names_the_last_error(blocked: EngramEnvironment) -> None:
    world = blocked
    assert canary(world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
    simulate(
        world.db_path,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = ?, consecutive_failures = 3 "
            "WHERE target_key = 'cloud'",
            ("push mutations: 403 forbidden: project is not allowed",),
        ),
    )
    status, [finding] = lane_findings(world)
    assert status == 2
    assert finding["evidence"]["blocking_rows"] == 0
    assert finding["evidence"]["reason"] == "push mutations: 403 forbidden: project is not allowed"
    assert finding["evidence"]["held_back_rows"] == 6
    assert finding["message"].startswith(
        "lane 'cloud' is degraded with 6 rows pending: the last push failed ("
    )


def test_lane_health_kept_in_the_state_dir_equals_check_full_across_changes(
    blocked: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unchanged database answers lane health from the state dir; rows appended, a sync_state change
    and an ack each read the lanes again, and every answer equals `check --full`."""
    from engram_sync_kit.canary import lane_health
    from engram_sync_kit.canary.checks import run_check
    from engram_sync_kit.canary.config import CanaryConfig

    world = blocked
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    reads: list[int] = []
    full_read = lane_health.read_lane_health

    def counted(db: EngramDb) -> list[lane_health.LaneHealth]:
        reads.append(1)
        return full_read(db)

    monkeypatch.setattr(lane_health, "read_lane_health", counted)

    def kept_and_full() -> tuple[list[dict[str, Any]], int]:
        """The lane findings through the state dir (equal to --full), and how many lane reads that took."""
        before = len(reads)
        kept = run_check(world.db_path, CanaryConfig(), None).model_dump(mode="json")["findings"]
        used = len(reads) - before
        full = run_check(world.db_path, CanaryConfig(), None, use_cursor=False).model_dump(mode="json")
        assert kept == full["findings"]
        return [f for f in kept if f["check"].endswith("_lane_blocked")], used

    first, used = kept_and_full()
    assert used == 1 and first[0]["evidence"]["held_back_rows"] == 6
    assert list((tmp_path / "state").glob("lane-health-*.json"))
    assert kept_and_full() == (first, 0)  # unchanged: from the state dir, no lane read

    save(world, "other", "held four", cwd=world.home)  # rows appended
    grown, used = kept_and_full()
    assert used == 1 and grown[0]["evidence"]["held_back_by_project"] == {"main-proj": 4, "other": 4}
    assert kept_and_full() == (grown, 0)

    simulate(  # SIMULATION OF LEGACY DATA: the worker's failed push recorded in sync_state
        world.db_path,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = ?, consecutive_failures = 2 "
            "WHERE target_key = 'cloud'",
            ("push mutations: 400 mutation entries must specify a project",),
        ),
    )
    degraded, used = kept_and_full()
    assert used == 1 and degraded[0]["evidence"]["consecutive_failures"] == 2

    # The blockers acked. The failure record stays (only the worker's next cycle changes it, see
    # test_triage_sync_state): the lane is still degraded, now with no row failing the contract.
    assert canary(world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
    [waiting], used = kept_and_full()
    assert used == 1 and waiting["evidence"]["blocking_rows"] == 0
    assert (waiting["evidence"]["lifecycle"], waiting["evidence"]["consecutive_failures"]) == ("degraded", 2)
    assert waiting["evidence"]["last_error"] == "push mutations: 400 mutation entries must specify a project"
    simulate(world.db_path, ("UPDATE sync_state SET lifecycle = 'healthy' WHERE target_key = 'cloud'", ()))
    assert kept_and_full() == ([], 1)  # the worker's next successful cycle
    simulate(  # SIMULATION OF LEGACY DATA: a failure without a contract blocker, rows still pending
        world.db_path,
        (
            "UPDATE sync_state SET lifecycle = 'degraded', last_error = 'push mutations: 503' WHERE target_key = 'cloud'",
            (),
        ),
    )
    [stuck], used = kept_and_full()
    assert used == 1 and (stuck["evidence"]["blocking_rows"], stuck["evidence"]["held_back_rows"]) == (0, 8)
    simulate(world.db_path, ("UPDATE sync_state SET lifecycle = 'healthy' WHERE target_key = 'cloud'", ()))
    assert kept_and_full() == ([], 1)
    assert kept_and_full() == ([], 0)
