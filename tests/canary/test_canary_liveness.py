"""Liveness findings (sync_stalled, worker_gave_up, degraded_backoff_expired) in `check`, on homes the real
engram v1.20.0 wrote and, for the worker's own failures, with its real autosync worker (`engram serve`)
against the fake cloud.

engram v1.20.0 (commit ba9e46c), internal/cloud/autosync/manager.go: the worker's failure count lives in
memory; at MaxConsecutiveFailures = 10 (DefaultConfig) every later cycle returns before it takes the lease
and writes nothing until the process restarts (cycle). Its backoff is min(2^(n-1) s, 5 min) +-25%
(computeBackoff), stored in sync_state.backoff_until by MarkSyncFailure (internal/store/store.go).

Where a step writes engram's tables it says so: backdated rows and a failure record are SIMULATIONS OF
LEGACY DATA, and "moving backoff_until on a copy" skips a wait of engram's own (up to 5 minutes per
failure) on a copy the canary reads, never on the file engram uses.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from canary_support import WatchProcess
from engram_schemas.builder import V120
from engram_schemas.per_version import current
from inbox_support import canary, engram_ok, engram_serve, query, save
from schema_under_test import copies_opened_as_v2_v3

from engram_sync_kit.engram_contract.worker_liveness import MAX_CONSECUTIVE_FAILURES, RETRY_GRACE_SECONDS
from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, Route
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

TOKEN = "t"
LIVENESS = ("sync_stalled", "worker_gave_up", "degraded_backoff_expired")


def simulate(db: Path, sql: str, *parameters: object) -> None:
    """SIMULATION OF LEGACY DATA (or of time passing): one write straight into engram's tables."""
    with contextlib.closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        connection.execute(sql, parameters)


def checked(world: EngramEnvironment, *args: str) -> tuple[int, dict[str, Any]]:
    result = canary(world, "check", "--format", "json", *args)
    return result.returncode, json.loads(result.stdout)


def by_check(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {finding["check"]: finding for finding in document["findings"]}


def waiting(db: Path) -> int:
    [(count,)] = query(
        db, "SELECT count(*) FROM sync_mutations WHERE target_key = 'cloud' AND acked_at IS NULL"
    )
    return int(count)


@pytest.fixture
def enrolled(engram_world: EngramEnvironment) -> EngramEnvironment:
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    save(world, "main-proj", "a decision")
    return world


def test_a_silent_stall_is_critical_not_ok(enrolled: EngramEnvironment) -> None:
    """The issue's home: an enrolled project's rows, nothing ever acked, no worker, 10 days old."""
    world, db = enrolled, enrolled.db_path
    rows = waiting(db)
    simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now', '-10 days')")
    status, document = checked(world)
    assert status == 2 and document["status"] == "critical"
    assert [finding["check"] for finding in document["findings"]] == ["sync_stalled"]
    finding = document["findings"][0]
    evidence = finding["evidence"]
    assert (evidence["waiting_rows"], evidence["last_ack_at"], evidence["worker"]) == (
        rows,
        None,
        "no worker",
    )
    assert evidence["oldest_waiting_seconds"] >= 10 * 86400
    assert finding["message"].startswith(
        f"sync on lane 'cloud' has stalled: {rows} rows the worker sends wait, the oldest for 10d (since "
    )
    assert finding["message"].endswith(
        "and nothing on it was ever acked; no worker holds the lease: no engram serve or engram mcp with "
        "ENGRAM_CLOUD_AUTOSYNC=1 runs"
    )
    assert document["summary"]["sync_liveness"]["lanes"]["cloud"]["waiting_rows"] == rows
    text = canary(world, "check")
    assert text.returncode == 2
    assert text.stdout.startswith("ENGRAM-CANARY CRITICAL - ")
    assert "[NEW] critical sync_stalled: sync on lane 'cloud' has stalled" in text.stdout


def test_a_stall_is_reported_by_the_first_check_past_the_threshold(enrolled: EngramEnvironment) -> None:
    world, db = enrolled, enrolled.db_path
    config = world.root / "xdg" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("thresholds:\n  stall_after_seconds: 600\n")
    simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now', '-570 seconds')")
    status, document = checked(world)
    assert (status, document["findings"]) == (0, [])
    simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now', '-601 seconds')")
    status, document = checked(world)
    assert status == 2 and list(by_check(document)) == ["sync_stalled"]
    assert by_check(document)["sync_stalled"]["evidence"]["stall_after_seconds"] == 600


def test_an_acknowledged_stall_alarms_again_when_more_rows_wait(enrolled: EngramEnvironment) -> None:
    world, db = enrolled, enrolled.db_path
    simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now', '-2 hours')")
    acknowledged = canary(world, "baseline", "--reason", "laptop offline this week")
    assert acknowledged.returncode == 0, acknowledged.stdout + acknowledged.stderr
    status, document = checked(world)
    assert status == 0 and by_check(document)["sync_stalled"]["new"] is False
    save(world, "main-proj", "one more decision")
    status, document = checked(world)
    assert status == 2
    assert by_check(document)["sync_stalled"]["realarm"].startswith("grew from ")


def test_a_worker_past_its_give_up_point_says_so_and_how_to_restart_it(enrolled: EngramEnvironment) -> None:
    """The issue's failure record: consecutive_failures = 10 (SIMULATION OF LEGACY DATA; the real worker
    reaching it is test_the_real_worker_gives_up_and_check_says_so)."""
    world, db = enrolled, enrolled.db_path
    simulate(
        db,
        "UPDATE sync_state SET lifecycle = 'degraded', consecutive_failures = 10, last_error = ?, "
        "backoff_until = strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-10 minutes'), lease_owner = 'autosync-1', "
        "lease_until = strftime('%Y-%m-%dT%H:%M:%SZ', 'now', '-9 minutes') WHERE target_key = 'cloud'",
        'push: transport push project "main-proj": 503 Service Unavailable',
    )
    status, document = checked(world)
    assert status == 2
    found = by_check(document)
    blocked = found["legacy_lane_blocked"]["message"]
    assert "retries on its next cycle" not in blocked
    if current() != V120:
        # v2/v3 (predicted from source): the worker retries past 10 failures, so the same record is no
        # worker at all, and the lane's finding promises a retry only from a running worker.
        assert sorted(found) == ["degraded_backoff_expired", "legacy_lane_blocked"]
        assert blocked.endswith(
            "a running worker retries when its backoff ends, at most 5 minutes apart (predicted from source: "
            "v2/v3 keep retrying past 10 failures)"
        )
        assert found["degraded_backoff_expired"]["evidence"]["worker"] == "lease lapsed"
        return
    assert sorted(found) == ["legacy_lane_blocked", "worker_gave_up"]
    assert blocked.endswith(
        "engram does not retry it: after 10 consecutive failures v1.20's worker stops until the process "
        "restarts (10 recorded); once the error is fixed, stop engram serve and start it again "
        "(ENGRAM_CLOUD_AUTOSYNC=1 engram serve), or restart the agent that runs engram mcp"
    )
    gave_up = found["worker_gave_up"]
    assert gave_up["severity"] == "critical"
    assert gave_up["evidence"]["clear_command"] == "ENGRAM_CLOUD_AUTOSYNC=1 engram serve"
    assert gave_up["evidence"]["worker"] == "lease lapsed"
    assert gave_up["message"].startswith(
        "engram's worker has given up on lane 'cloud': 10 consecutive failures (v1.20 stops retrying after 10 "
        "until the process restarts), and no retry came in the 10m since its last backoff ran out at "
    )
    prom = world.root / "prom"
    prom.mkdir()
    assert canary(world, "check", "--textfile-dir", str(prom)).returncode == 2
    (written,) = prom.glob("engram_canary_*.prom")  # one textfile per database (issue 36)
    textfile = written.read_text()
    assert f'engram_canary_worker_consecutive_failures{{db="{db}",lane="cloud"}} 10.0' in textfile
    assert any(
        line.startswith("engram_canary_finding_info{")
        and 'check="worker_gave_up"' in line
        and 'clear_command="ENGRAM_CLOUD_AUTOSYNC=1 engram serve"' in line
        for line in textfile.splitlines()
    ), textfile


def lane_state(world: EngramEnvironment) -> dict[str, Any]:
    names = ("lifecycle", "consecutive_failures", "backoff_until", "lease_owner", "lease_until", "last_error")
    [row] = query(world.db_path, f"SELECT {', '.join(names)} FROM sync_state WHERE target_key = 'cloud'")
    return dict(zip(names, row, strict=True))


def engram_time(text: object) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(UTC)


def copy_of(world: EngramEnvironment, name: str) -> Path:
    """A consistent copy (SQLite's backup API) the canary reads in place of the live file."""
    target = world.root / name
    with (
        contextlib.closing(sqlite3.connect(f"file:{world.db_path}?mode=ro", uri=True)) as source,
        contextlib.closing(sqlite3.connect(str(target))) as copy,
    ):
        source.backup(copy)
    return target


def move_backoff(db: Path, seconds_ago: float) -> None:
    """On a COPY only: backoff_until as if engram's own wait had ended `seconds_ago` seconds ago."""
    simulate(
        db,
        "UPDATE sync_state SET backoff_until = strftime('%Y-%m-%dT%H:%M:%SZ', 'now', ?) WHERE target_key = 'cloud'",
        f"-{int(seconds_ago)} seconds",
    )


def failed_past(world: EngramEnvironment, count: int) -> bool | None:
    return True if int(lane_state(world)["consecutive_failures"] or 0) > count else None


def failing_worker_cycles(world: EngramEnvironment, server: Any, count: int) -> None:
    """Drive the real worker through `count` more failed cycles: each waits out engram's own backoff."""
    for _ in range(count):
        before = int(lane_state(world)["consecutive_failures"] or 0)
        backoff = lane_state(world)["backoff_until"]
        if backoff:
            time.sleep(max(0.0, (engram_time(backoff) - datetime.now(UTC)).total_seconds()) + 1.1)
        server.post("/sessions", {"id": f"s-{before}", "project": "main-proj", "directory": str(world.home)})
        eventually(
            functools.partial(failed_past, world, before),
            timeout=75,
            what="a failed cycle of engram's worker",
            error=AssertionError,
        )


def test_a_degraded_lane_whose_backoff_ran_out_with_no_worker_says_nothing_retries(
    enrolled: EngramEnvironment,
) -> None:
    """One real degraded lane (v1.20's own worker, two failed cycles and a restart, ~90 s), read as is and
    through copies opened as every later generation (per_version.VERSIONS_INSIDE)."""
    world = enrolled
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("main-proj",), server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        cloud.client.add_faults(
            [Fault(route=Route.MUTATIONS_PUSH, action=FaultAction.STATUS, status=503, times=1000)]
        )
        env = {
            "ENGRAM_CLOUD_AUTOSYNC": "1",
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
        }
        with engram_serve(world, **env) as server:
            failing_worker_cycles(world, server, 2)
            live = lane_state(world)
            assert live["lifecycle"] == "degraded" and live["consecutive_failures"] >= 2
            # While engram serve runs and backs off, no liveness finding: it retries on its own.
            assert not set(by_check(checked(world)[1])) & set(LIVENESS)
        stopped = lane_state(world)
        assert stopped["lease_owner"] is None  # a clean stop releases the lease (ReleaseSyncLease)

        at_grace = copy_of(world, "at-grace.db")
        move_backoff(at_grace, RETRY_GRACE_SECONDS - 20)  # a live worker could still be retrying
        past = copy_of(world, "past-grace.db")
        move_backoff(past, RETRY_GRACE_SECONDS + 20)
        says_nothing_retries(world, at_grace, past, stopped)
        grace_copies = dict(copies_opened_as_v2_v3(at_grace, world.root / "at-grace"))
        for version, past_copy in copies_opened_as_v2_v3(past, world.root / "past-grace"):
            with assertion_for(version):
                says_nothing_retries(world, grace_copies[version], past_copy, stopped)

        # Restarted against a cloud that answers again: the worker delivers and check is OK.
        cloud.client.clear_faults()
        with engram_serve(world, **env):
            eventually(
                lambda: True if lane_state(world)["lifecycle"] == "healthy" else None,
                timeout=90,
                what="the restarted worker's first successful cycle",
                error=AssertionError,
            )
            status, document = checked(world)
            assert (status, document["findings"]) == (0, [])


def says_nothing_retries(
    world: EngramEnvironment, at_grace: Path, past: Path, stopped: dict[str, Any]
) -> None:
    assert not set(by_check(checked(world, "--db", str(at_grace))[1])) & set(LIVENESS)
    status, document = checked(world, "--db", str(past))
    assert status == 2  # the lane's degraded finding stays critical
    expired = by_check(document)["degraded_backoff_expired"]
    assert expired["severity"] == "warning"
    assert expired["evidence"]["worker"] == "no worker"
    assert expired["message"].startswith(
        f"lane 'cloud' is degraded ({stopped['consecutive_failures']} consecutive failures; last error: "
    )
    assert (
        "with no retry since (a running worker retries within 120s): no worker holds the lease"
        in (expired["message"])
    )
    assert (
        "a running worker retries when its backoff ends"
        in (by_check(document)["legacy_lane_blocked"]["message"])
    )


@contextlib.contextmanager
def assertion_for(version: str) -> Iterator[None]:
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"on the copy opened as {version}: {error}") from error


@pytest.mark.nightly  # about 17 minutes of engram's own backoffs: make test-nightly
def test_the_real_worker_gives_up_and_check_says_so(enrolled: EngramEnvironment) -> None:
    """Ten real failures (engram's own backoffs, about 8 minutes), then the last 5-minute backoff skipped on a
    copy; engram serve still runs, so its lease is the one a worker that gave up leaves behind."""
    world = enrolled
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("main-proj",), server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        cloud.client.add_faults(
            [Fault(route=Route.MUTATIONS_PUSH, action=FaultAction.STATUS, status=503, times=1000)]
        )
        env = {
            "ENGRAM_CLOUD_AUTOSYNC": "1",
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
        }
        with engram_serve(world, **env) as server:
            failing_worker_cycles(world, server, MAX_CONSECUTIVE_FAILURES)
            given_up = lane_state(world)
            assert given_up["consecutive_failures"] == MAX_CONSECUTIVE_FAILURES
            assert given_up["lease_owner"]  # held, not released: the process still runs
            status, document = checked(world)
            assert "worker_gave_up" not in by_check(document)  # its last backoff has not run out yet
            gave_up_copy = copy_of(world, "gave-up.db")
            move_backoff(gave_up_copy, RETRY_GRACE_SECONDS + 20)
            status, document = checked(world, "--db", str(gave_up_copy))
            assert status == 2
            finding = by_check(document)["worker_gave_up"]
            assert finding["evidence"]["consecutive_failures"] == MAX_CONSECUTIVE_FAILURES
            assert finding["evidence"]["clear_command"] == "ENGRAM_CLOUD_AUTOSYNC=1 engram serve"
            # The give-up itself, on the live file: a dirty save after the backoff writes no 11th failure.
            backoff = engram_time(given_up["backoff_until"])
            time.sleep(max(0.0, (backoff - datetime.now(UTC)).total_seconds()) + 1.1)
            server.post("/sessions", {"id": "s-after", "project": "main-proj", "directory": str(world.home)})
            time.sleep(35)  # a debounce and a full 30 s poll tick
            assert lane_state(world)["consecutive_failures"] == MAX_CONSECUTIVE_FAILURES


def relation_from_another_machine(cloud: Any, sync_id: str) -> None:
    """Another device pushes a relation between two memories this machine never had (its own token)."""
    payload = {
        "sync_id": sync_id,
        "source_id": "obs-only-on-the-other-machine-1",
        "target_id": "obs-only-on-the-other-machine-2",
        "relation": "supersedes",
        "judgment_status": "confirmed",
        "marked_by_actor": "other-machine",
        "marked_by_kind": "human",
    }
    entry = {
        "project": "main-proj",
        "entity": "relation",
        "entity_key": sync_id,
        "op": "upsert",
        "payload": payload,
    }
    response = httpx.post(
        f"{cloud.base_url}/sync/mutations/push",
        json={"entries": [entry]},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
        trust_env=False,
    )
    assert response.status_code == 200, response.text


def deferred_status(world: EngramEnvironment, sync_id: str) -> tuple[str, int] | None:
    rows = query(
        world.db_path, "SELECT apply_status, retry_count FROM sync_apply_deferred WHERE sync_id = ?", sync_id
    )
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


@pytest.mark.nightly  # six 30 s pull ticks of engram's own worker, about 3 minutes: make test-nightly
def test_a_pulled_row_engram_discards_on_apply_is_a_finding(enrolled: EngramEnvironment) -> None:
    """The pull side on the real worker: a relation whose memories never arrive is deferred, retried on
    each pull and dead after the fifth try (store.go @ba9e46c, ReplayDeferred); check names it. The
    finding on v2/v3 files: test_a_dead_pulled_row_is_a_finding_on_every_schema."""
    world = enrolled
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("main-proj",), server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        relation_from_another_machine(cloud, "rel-never-applies")
        env = {
            "ENGRAM_CLOUD_AUTOSYNC": "1",
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
        }
        with engram_serve(world, **env):
            eventually(
                lambda: deferred_status(world, "rel-never-applies"),
                timeout=75,
                what="the worker's pull to defer the relation",
                error=AssertionError,
            )
            status, document = checked(world)
            assert "pulled_rows_not_applied" not in by_check(document)  # deferred and young: engram retries
            assert document["summary"]["pull_side"]["deferred_rows"] == 1
            # engram serve's HTTP writes do not wake the worker (only its 30 s poll does): five more pulls.
            eventually(
                lambda: True if deferred_status(world, "rel-never-applies") == ("dead", 5) else None,
                timeout=6 * 30 + 60,
                interval=1.0,
                what="five replays of the deferred relation",
                error=AssertionError,
            )
            assert deferred_status(world, "rel-never-applies") == ("dead", 5)
        status, document = checked(world)
    assert status == 1
    finding = by_check(document)["pulled_rows_not_applied"]
    assert (finding["severity"], finding["size"]) == ("warning", 1)
    assert finding["message"] == (
        "1 pulled rows were discarded on apply (sync_apply_deferred 'dead': a payload engram cannot decode, or a "
        "relation whose memories did not arrive in 5 tries); engram never retries them, so they are in the "
        "cloud and not on this machine"
    )
    assert finding["evidence"]["dead"][0]["sync_id"] == "rel-never-applies"
    assert document["summary"]["pull_side"]["dead_rows"] == 1


def test_a_dead_pulled_row_is_a_finding_on_every_schema(enrolled: EngramEnvironment) -> None:
    """SIMULATION OF LEGACY DATA: the dead row the real worker writes (previous test), and a deferred one
    older than the stall threshold, written straight into sync_apply_deferred."""
    world, db = enrolled, enrolled.db_path
    simulate(
        db,
        "INSERT INTO sync_apply_deferred (sync_id, entity, payload, apply_status, retry_count, last_error, "
        "first_seen_at) VALUES ('rel-dead', 'relation', '{}', 'dead', 5, 'relation FK precondition not met', "
        "datetime('now', '-2 days'))",
    )
    status, document = checked(world)
    assert status == 1 and by_check(document)["pulled_rows_not_applied"]["size"] == 1
    simulate(
        db,
        "INSERT INTO sync_apply_deferred (sync_id, entity, payload, apply_status, retry_count, first_seen_at) "
        "VALUES ('rel-waits', 'relation', '{}', 'deferred', 2, datetime('now', '-3601 seconds'))",
    )
    finding = by_check(checked(world)[1])["pulled_rows_not_applied"]
    assert finding["size"] == 2
    assert finding["message"].endswith(
        "; 1 pulled rows wait 'deferred', the oldest for 60m (retried on every pull, 'dead' after 5 tries): "
        "their memories have not arrived, or nothing pulls"
    )


def test_watch_says_when_sync_stalls_and_when_it_moves_again(
    enrolled: EngramEnvironment, tmp_path: Path
) -> None:
    """watch's full re-check reads liveness too: the stall is said once, and its clearing once."""
    world, db = enrolled, enrolled.db_path
    config_home = tmp_path / "config"
    (config_home / "engram-canary").mkdir(parents=True)
    (config_home / "engram-canary" / "config.yaml").write_text(
        "thresholds:\n  stall_after_seconds: 600\nwatch:\n  full_recheck_seconds: 0.5\n  poll: true\n"
    )
    watcher = WatchProcess(["--db", str(db)], config_home, HOME=str(world.home))
    try:
        watcher.wait_started()
        simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now', '-601 seconds')")
        watcher.wait_for(
            lambda line: line.startswith(
                "engram-canary CRITICAL: sync_stalled sync on lane 'cloud' has stalled"
            ),
            what="watch to report the stall",
        )
        simulate(db, "UPDATE sync_mutations SET occurred_at = datetime('now')")
        watcher.wait_for(
            lambda line: line == f"engram-canary OK: sync_stalled on lane 'cloud' has cleared db={db}",
            what="watch to report the stall cleared",
        )
        assert len(watcher.matching(lambda line: "CRITICAL: sync_stalled" in line)) == 1
    finally:
        watcher.stop()
