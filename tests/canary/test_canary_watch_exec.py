"""`watch --exec` under a burst of alerts: hook runs are coalesced, and a stop ends the watcher in 2 s."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from canary_support import WatchProcess

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

TARGETS = 24


@pytest.fixture
def many_targets(engram_world: EngramEnvironment) -> EngramEnvironment:
    """A home where the watcher finds TARGETS foreign targets at start-up, one alert each."""
    for number in range(TARGETS):
        result = engram_world.run(["save", f"note {number}", "c", "--project", f"stray{number:02d}"])
        assert result.returncode == 0, result.stderr
    return engram_world


@pytest.fixture
def hook_log(tmp_path: Path) -> Path:
    return tmp_path / "hook.jsonl"


def hook(log: Path, seconds: float) -> str:
    """One JSON line per run, written when the run starts, then `seconds` of work."""
    return (
        f'printf \'{{"alerts":"%s","event":"%s","key":"%s","status":"%s","lines":%s}}\\n\' '
        f'"$ENGRAM_CANARY_ALERTS" "$ENGRAM_CANARY_EVENT" "$ENGRAM_CANARY_TARGET_KEY" '
        f'"$ENGRAM_CANARY_STATUS" "$(wc -l)" >> {log}; sleep {seconds}'
    )


def runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def watcher_factory() -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for watcher in started:
        watcher.kill()


def more_targets(world: EngramEnvironment, watcher: WatchProcess, count: int) -> None:
    """COUNT more foreign targets while the watcher runs, each alerted before this returns."""
    for number in range(count):
        result = world.run(["save", f"late {number}", "c", "--project", f"late{number}"])
        assert result.returncode == 0, result.stderr
    for number in range(count):
        watcher.wait_for(says(f"NEW foreign sync target cloud:late{number} "), what=f"late{number}")


def says(text: str) -> Callable[[str], bool]:
    return lambda line: text in line


def test_alerts_that_arrive_during_a_hook_run_are_one_next_run(
    many_targets: EngramEnvironment, tmp_path: Path, hook_log: Path, watcher_factory: list[WatchProcess]
) -> None:
    watcher = WatchProcess(
        ["--db", str(many_targets.db_path), "--no-baseline", "--exec", hook(hook_log, 2)], tmp_path / "xdg"
    )
    watcher_factory.append(watcher)
    watcher.wait_started()
    eventually(lambda: runs(hook_log) or None, timeout=20, what="the first run", error=AssertionError)
    more_targets(many_targets, watcher, 4)
    eventually(
        lambda: sum(int(run["alerts"]) for run in runs(hook_log)) == TARGETS + 4 or None,
        timeout=20,
        what="every alert passed on",
        error=AssertionError,
    )
    assert watcher.stop() == 0

    done = runs(hook_log)
    assert len(done) == 2, done  # the start-up burst and the late ones: at most one run queued
    for run in done:
        assert run["lines"] == int(run["alerts"])  # one line each on stdin
        assert (run["event"], run["status"]) == ("appeared", "warning")
        assert (run["key"] == "") is (int(run["alerts"]) > 1)


@pytest.mark.parametrize("signals", [(signal.SIGINT,), (signal.SIGINT, signal.SIGTERM), (signal.SIGTERM,)])
def test_a_stop_ends_the_watcher_within_2_s_whatever_is_queued(
    many_targets: EngramEnvironment,
    tmp_path: Path,
    hook_log: Path,
    watcher_factory: list[WatchProcess],
    signals: tuple[signal.Signals, ...],
) -> None:
    watcher = WatchProcess(
        ["--db", str(many_targets.db_path), "--no-baseline", "--exec", hook(hook_log, 5)], tmp_path / "xdg"
    )
    watcher_factory.append(watcher)
    watcher.wait_started()
    (first,) = eventually(
        lambda: runs(hook_log) or None, timeout=20, what="the first run", error=AssertionError
    )
    more_targets(many_targets, watcher, 3)  # queued behind the running hook

    asked = time.monotonic()
    for number, stop in enumerate(signals):
        if number:
            time.sleep(0.3)
        watcher.process.send_signal(stop)
    code = watcher.process.wait(timeout=30)
    took = time.monotonic() - asked

    assert code == 0
    assert took < 2.0, f"stopped {took:.1f} s after the signal"
    watcher.stop()
    assert runs(hook_log) == [first]  # the queued alerts never started a run
    lines = watcher.snapshot()
    assert lines[-1].startswith("engram-canary: stopped ("), lines[-5:]
    queued = TARGETS + 3 - int(first["alerts"])
    assert f"engram-canary: --exec: {queued} queued alerts not passed on (stopping)" in lines, lines[-5:]
    assert any(line.startswith("engram-canary: --exec ended at stop after ") for line in lines), lines[-5:]


@pytest.mark.unit
def test_a_coalesced_run_names_the_common_event_and_the_worst_status() -> None:
    from engram_sync_kit.canary.findings import Status
    from engram_sync_kit.canary.notify import Alert, hook_environment

    alerts = [
        Alert("appeared", "cloud:a", "engram-canary WARNING: NEW ... cloud:a", Status.WARNING),
        Alert("gone", "cloud:b", "engram-canary OK: GONE ... cloud:b", Status.OK),
        Alert("appeared", "cloud:c", "engram-canary CRITICAL: NEW ... cloud:c", Status.CRITICAL),
    ]
    env = hook_environment(alerts, Path("/x/engram.db"))
    assert env == {
        "ENGRAM_CANARY_ALERTS": "3",
        "ENGRAM_CANARY_EVENT": "mixed",
        "ENGRAM_CANARY_TARGET_KEY": "",
        "ENGRAM_CANARY_STATUS": "critical",
        "ENGRAM_CANARY_DB": "/x/engram.db",
        "ENGRAM_CANARY_MESSAGE": "engram-canary CRITICAL: 3 alerts (2 appeared, 1 gone), one line each on stdin",
    }
    assert hook_environment(alerts[1:2], Path("/x/engram.db"))["ENGRAM_CANARY_MESSAGE"] == alerts[1].line


@pytest.mark.engram
def test_a_stop_during_the_first_full_check_ends_it_at_once(
    engram_world: EngramEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first full check of a large database takes seconds: a stop aborts its read (SQLite's progress
    handler) instead of waiting for it."""
    import io
    import threading

    from engram_sync_kit.canary import watch as watch_module
    from engram_sync_kit.canary.checks import check_snapshot
    from engram_sync_kit.canary.config import CanaryConfig

    assert engram_world.run(["save", "seed", "c", "--project", "seed"]).returncode == 0
    in_long_read = threading.Event()

    def check_with_a_long_read(db: Any, *args: Any, **kwargs: Any) -> Any:
        in_long_read.set()
        db.connection.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000000) "
            "SELECT count(*) FROM c"
        ).fetchone()
        return check_snapshot(db, *args, **kwargs)

    monkeypatch.setattr(watch_module, "check_snapshot", check_with_a_long_read)
    stream = io.StringIO()
    watcher = watch_module.Watcher(
        watch_module.WatchOptions(
            db_path=engram_world.db_path, config=CanaryConfig(), baseline=None, stream=stream
        )
    )
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(watcher.run()), name="watch-under-test")
    runner.start()
    assert in_long_read.wait(timeout=20)
    asked = time.monotonic()
    watcher.stop()
    runner.join(timeout=20)
    took = time.monotonic() - asked
    assert codes == [0]
    assert took < 1.0, f"stopped {took:.2f} s after the stop"
    lines = stream.getvalue().splitlines()
    assert lines == [
        "engram-canary: stopped (0 file events, 0 commits seen, 0 incremental and 1 full checks, 0 alerts)"
    ]
