"""reconcile's pull side (upstream #693, a receiver falling behind), on two real engram v1.20 homes that
share one fake cloud: laptop B pushes, and machine A, whose worker is stopped, has not pulled B's rows.

The status is WARNING once the oldest of B's rows has waited in the cloud longer than
`thresholds.stall_after_seconds`, never for A's own pushes, and OK again after A's real worker pulls.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from reconcile_support import TOKEN, engram, run_reconcile, save_memories

from engram_sync_kit.canary import reconcile as reconcile_module
from engram_sync_kit.canary.cloud_client import CloudMutation
from engram_sync_kit.canary.reconcile import PullLag
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.serve import EngramDaemon
from engram_sync_kit.harness.polling import eventually

PREFIX = "ENGRAM-CANARY-RECONCILE"


@dataclass
class TwoMachines:
    a: EngramEnvironment
    b: EngramEnvironment
    cloud: RunningFakeCloud
    env: dict[str, str]


def pull_cursor(db: Path) -> int:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = connection.execute(
            "SELECT last_pulled_seq FROM sync_state WHERE target_key = 'cloud'"
        ).fetchone()
        return int(row[0]) if row is not None else -1
    finally:
        connection.close()


def threshold(db: Path, seconds: int) -> None:
    """reconcile's config (run_reconcile points XDG_CONFIG_HOME next to the database)."""
    config = db.parent / "xdg" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"thresholds:\n  stall_after_seconds: {seconds}\n")


@pytest.fixture
def two_machines(engram_bin: Path, tmp_path: Path) -> Iterator[TwoMachines]:
    """A saves and pushes alpha with `engram sync --cloud`; B, another home enrolled in alpha, does the
    same with two memories of its own. A's worker never ran, so A has pulled nothing."""
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as cloud:
        env = {
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "SSL_CERT_FILE": str(cloud.ca_file),
        }
        a = EngramEnvironment(binary=engram_bin, root=tmp_path / "machine a").prepare()
        b = EngramEnvironment(binary=engram_bin, root=tmp_path / "laptop b").prepare()
        save_memories(a, "alpha", 2, prefix="from a")
        engram(a, "cloud", "enroll", "alpha")
        engram(a, "sync", "--cloud", "--project", "alpha", env=env)
        save_memories(b, "alpha", 2, prefix="from b ü")
        engram(b, "cloud", "enroll", "alpha")
        engram(b, "sync", "--cloud", "--project", "alpha", env=env)
        yield TwoMachines(a, b, cloud, env)


def test_rows_of_another_device_that_this_machine_never_pulled_warn_then_clear_after_its_worker_pulls(
    two_machines: TwoMachines,
) -> None:
    a = two_machines.a
    assert pull_cursor(a.db_path) == 0
    threshold(a.db_path, 600)

    fresh = run_reconcile(a.db_path, two_machines.env, "--format", "json")

    assert fresh.returncode == 0, fresh.stdout + fresh.stderr  # B's rows are younger than 600 s
    pull = json.loads(fresh.stdout)["pull"]
    assert (pull["lane"], pull["last_pulled_seq"], pull["behind"]) == ("cloud", 0, False)
    assert pull["not_pulled"] == 2  # B's two memories
    # A's own pushes (pulled back some day, never a warning), and B's session: both homes name it
    # manual-save-alpha, and a key this journal wrote counts as this device's
    assert (pull["own_not_pulled"], pull["cloud_newest_seq"]) == (4, 6)

    threshold(a.db_path, 1)
    time.sleep(2.1)
    behind = run_reconcile(a.db_path, two_machines.env)

    assert behind.returncode == 1, behind.stdout + behind.stderr
    lines = behind.stdout.splitlines()
    assert lines[0].startswith(
        f"{PREFIX} WARNING - this machine has not pulled 2 cloud rows of other devices, the oldest stored "
    )
    assert (
        "ago (lane cloud pulled up to seq 0, the cloud holds up to 6): its worker is not pulling; "
        f"all 4 acked rows are in the cloud {two_machines.cloud.base_url} |"
    ) in lines[0]
    assert lines[-1].startswith(
        "[BEHIND] pull: lane cloud pulled up to seq 0, the cloud's newest 6; not pulled yet: "
        "2 rows of other devices, the oldest "
    )
    assert lines[-1].endswith(", 4 of this device's own")

    daemon = EngramDaemon(a, dict(two_machines.env), a.root / "serve.log")
    try:
        daemon.start(autosync=True)
        eventually(
            lambda: True if pull_cursor(a.db_path) >= 6 else None,
            timeout=90,
            interval=0.5,
            what=f"A's worker to pull the cloud's 6 rows (log: {daemon.log_text()[-400:]})",
        )
    finally:
        daemon.close()
    caught_up = run_reconcile(a.db_path, two_machines.env)

    assert caught_up.returncode == 0, caught_up.stdout
    assert caught_up.stdout.splitlines()[-1] == (
        "pull: lane cloud pulled up to seq 6, the cloud's newest 6; not pulled yet: 0 rows of other devices, "
        "0 of this device's own"
    )


def test_the_pull_side_is_read_with_a_since_window_that_needs_no_pull(two_machines: TwoMachines) -> None:
    threshold(two_machines.a.db_path, 1)
    time.sleep(2.1)

    ran = run_reconcile(two_machines.a.db_path, two_machines.env, "--since", "1h", "--format", "json")

    document = json.loads(ran.stdout)
    assert (ran.returncode, document["status"]) == (1, "warning")
    assert (document["pull"]["not_pulled"], document["pull"]["behind"]) == (2, True)
    assert document["summary"]["lost"] == 0


def holding(*keys: tuple[str, str]) -> Callable[[Sequence[tuple[str, str]]], set[tuple[str, str]]]:
    """What this machine holds, as reconcile's lookup answers it; every lookup is recorded."""

    def holds(asked: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        lookups.append(list(asked))
        return {key for key in asked if key in keys}

    lookups: list[list[tuple[str, str]]] = []
    holds.lookups = lookups  # type: ignore[attr-defined]
    return holds


def mutation(seq: int, key: str, stored: datetime) -> CloudMutation:
    return CloudMutation(seq, "alpha", "observation", key, "upsert", {}, stored.isoformat())


@pytest.mark.parametrize(("waited", "behind"), [(599, False), (600, False), (601, True)])
def test_behind_only_past_the_threshold(waited: int, behind: bool) -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    lag = PullLag(cursor=1, written_keys={"mine"}, holds=holding())
    for seq, key, age in (
        (1, "theirs-pulled", 9999),
        (2, "mine", 9999),
        (3, "theirs", waited),
        (4, "later", 5),
    ):
        lag.saw(mutation(seq, key, now - timedelta(seconds=age)))
    lag.settle()

    side = lag.side(600, now)

    assert (side.not_pulled, side.own_not_pulled, side.cloud_newest_seq) == (2, 1, 4)
    assert (side.oldest_not_pulled_seconds, side.behind) == (waited, behind)


def test_own_rows_alone_never_make_it_behind() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    lag = PullLag(cursor=0, written_keys={"mine"}, holds=holding())
    lag.saw(mutation(1, "mine", now - timedelta(days=30)))
    lag.settle()

    side = lag.side(1, now)

    assert (side.not_pulled, side.own_not_pulled, side.oldest_not_pulled_seconds, side.behind) == (
        0,
        1,
        None,
        False,
    )


def test_a_cloud_time_that_does_not_parse_is_not_an_age() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    lag = PullLag(cursor=0, written_keys=set(), holds=holding())
    lag.saw(CloudMutation(1, "alpha", "observation", "theirs", "upsert", {}, "yesterday"))
    lag.settle()

    side = lag.side(1, now)

    assert (side.not_pulled, side.oldest_not_pulled_seconds, side.behind) == (1, None, False)


def test_a_row_this_machine_already_holds_is_not_behind_and_one_entity_counts_once() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    lag = PullLag(cursor=0, written_keys=set(), holds=holding(("observation", "imported")))
    lag.saw(mutation(1, "imported", now - timedelta(days=3)))
    lag.saw(mutation(2, "edited twice", now - timedelta(seconds=900)))
    lag.saw(mutation(3, "edited twice", now - timedelta(seconds=30)))
    lag.settle()

    side = lag.side(600, now)

    assert (side.not_pulled, side.held_already, side.oldest_not_pulled_seconds, side.behind) == (
        1,
        1,
        900,
        True,
    )


def test_rows_this_machine_imported_by_chunk_are_not_behind(two_machines: TwoMachines) -> None:
    """`engram sync --cloud --import` stores B's memories on A and moves the cursor of cloud:alpha, not the
    worker's: A holds them, so nothing is behind although the worker's cursor is still 0."""
    a = two_machines.a
    engram(a, "sync", "--cloud", "--import", "--project", "alpha", env=two_machines.env)
    assert pull_cursor(a.db_path) == 0
    threshold(a.db_path, 1)
    time.sleep(2.1)

    ran = run_reconcile(a.db_path, two_machines.env, "--format", "json")

    document = json.loads(ran.stdout)
    assert (ran.returncode, document["status"]) == (0, "ok"), ran.stdout
    pull = document["pull"]
    assert (pull["last_pulled_seq"], pull["not_pulled"], pull["held_already"], pull["behind"]) == (
        0,
        0,
        2,
        False,
    )


@pytest.mark.parametrize(("floor", "counted"), [(0, 2), (1, 1), (2, 0)])
def test_with_since_only_the_windows_rows_are_looked_at(floor: int, counted: int) -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    lag = PullLag(cursor=0, written_keys=set(), holds=holding(), floor=floor)
    lag.saw(mutation(1, "before the window", now - timedelta(days=3)))
    lag.saw(mutation(2, "in the window", now - timedelta(seconds=900)))
    lag.settle()

    side = lag.side(600, now)

    assert (lag.start, side.not_pulled, side.cloud_newest_seq) == (floor, counted, 2)


def test_memory_stays_bounded_past_the_key_limit_and_lookups_come_in_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reconcile_module, "NOT_PULLED_KEYS_LIMIT", 3)
    monkeypatch.setattr(reconcile_module, "HELD_LOOKUP_BATCH", 2)
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    holds = holding(("observation", "k1"))
    lag = PullLag(cursor=0, written_keys=set(), holds=holds)
    for seq in range(1, 8):  # k1 is held; k2..k4 fill the limit; k5..k7 are counted by row
        lag.saw(mutation(seq, f"k{seq}", now - timedelta(seconds=100 * seq)))
    lag.settle()

    side = lag.side(60, now)

    assert (side.held_already, side.not_pulled, side.oldest_not_pulled_seconds, side.behind) == (
        1,
        6,
        700,
        True,
    )
    assert len(lag.missing) == 3
    assert [len(batch) for batch in holds.lookups] == [2, 2, 2, 1]  # type: ignore[attr-defined]
