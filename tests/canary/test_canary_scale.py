"""Rows the canary must survive on a real home (issue 35, items 5, 6 and 12): keys and projects whose bytes
are not UTF-8, BLOBs where engram writes text, and thousands of foreign targets.

The home is made by the real engram v1.20 binary; every odd row is a SIMULATION OF LEGACY DATA (another
writer or a damaged file; engram itself writes valid UTF-8 text), written straight into engram's tables.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from canary_support import WatchProcess, run_canary, write_settings
from test_canary_watch import save

from engram_sync_kit.canary import targets
from engram_sync_kit.canary import watch as watch_module
from engram_sync_kit.canary.checks import run_check
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.triage.plan import plan_cleanup
from engram_sync_kit.canary.watch import Watcher, WatchOptions
from engram_sync_kit.harness.deployment.many_targets import add_foreign_targets
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

# Bytes \xf0-\xff sort above U+FFFD's encoding (\xef\xbf\xbd): the skip-scan must step by the stored bytes.
BAD_KEY = b"cloud:caf\xff\xf0"
BAD_PROJECT = b"caf\xfe"


@pytest.fixture
def watcher_factory() -> Iterator[list[WatchProcess]]:
    started: list[WatchProcess] = []
    yield started
    for watcher in started:
        watcher.kill()


def _home(world: EngramEnvironment) -> Path:
    for args in (["save", "alpha note", "c", "--project", "alpha"], ["cloud", "enroll", "alpha"]):
        result = world.run(args)
        assert result.returncode == 0, result.stderr
    return world.db_path


def _legacy(db: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        for sql, parameters in statements:
            connection.execute(sql, parameters)


INSERT_ROW = (
    "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
    "VALUES (CAST(? AS TEXT), 'session', ?, 'upsert', '{}', CAST(? AS TEXT))"
)


@pytest.fixture
def undecodable_home(engram_world: EngramEnvironment) -> Path:
    """SIMULATION OF LEGACY DATA: a foreign target key and a project that are not valid UTF-8."""
    db = _home(engram_world)
    _legacy(
        db,
        ("INSERT INTO sync_state (target_key) VALUES (CAST(? AS TEXT))", (BAD_KEY,)),
        (INSERT_ROW, (BAD_KEY, "s-1", b"alpha")),
        (INSERT_ROW, (b"cloud", "s-2", BAD_PROJECT)),
    )
    return db


def test_a_key_and_a_project_that_are_not_utf8_end_check_in_time(
    undecodable_home: Path, tmp_path: Path
) -> None:
    """Failed first: the skip-scan stepped past the U+FFFD spelling and found the same row again, forever."""
    checked = run_canary(
        ["check", "--db", str(undecodable_home), "--format", "json"], tmp_path / "xdg", timeout=30
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    document = json.loads(checked.stdout)
    key = BAD_KEY.decode(errors="replace")
    (mutation,) = (f for f in document["findings"] if f["check"] == "foreign_mutation_target")
    assert mutation["target_key"] == key
    # its row is found by its stored bytes, not missed under the decoded spelling
    assert mutation["evidence"]["rows"] == 1 and mutation["evidence"]["unacked_rows"] == 1
    # the summary counts it by its stored bytes too (it said 0 before the space's bytes reached the reader)
    assert document["summary"]["unacked_rows_by_target"][key] == 1
    (state,) = (f for f in document["findings"] if f["check"] == "foreign_sync_target")
    assert state["target_key"] == key and state["evidence"]["unacked_rows"] == 1
    text = run_canary(["check", "--db", str(undecodable_home)], tmp_path / "xdg", timeout=30)
    assert text.returncode == 1 and text.stderr == "", text.stderr
    assert f"[NEW] warning foreign_sync_target: sync target {key} is outside" in text.stdout


def test_a_blob_key_and_project_in_the_journal_end_check_in_time(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """Failed first: a BLOB sorts above every text, so the skip-scan's `> CAST(? AS TEXT)` found the same
    BLOB again, forever (check, watch and validate hung). SIMULATION OF LEGACY DATA: another writer's BLOBs."""
    db = _home(engram_world)
    _legacy(
        db,
        (
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES (?, 'session', 's-blob', 'upsert', '{}', ?)",
            (b"cloud:blob-writer", b"blob-writer"),
        ),
    )
    checked = run_canary(["check", "--db", str(db), "--format", "json"], tmp_path / "xdg", timeout=30)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    document = json.loads(checked.stdout)
    (mutation,) = (f for f in document["findings"] if f["check"] == "foreign_mutation_target")
    assert mutation["target_key"] == "cloud:blob-writer"
    assert checked.stderr == ""


def test_a_key_that_is_not_utf8_lets_watch_start_and_stop(undecodable_home: Path, tmp_path: Path) -> None:
    watcher = WatchProcess(["--db", str(undecodable_home)], tmp_path / "xdg")
    try:
        watcher.wait_started()
        assert watcher.stop() == 0
    finally:
        watcher.kill()
    assert not watcher.matching(lambda line: "Traceback" in line), watcher.snapshot()


@pytest.mark.parametrize(
    ("update", "status"),
    [
        ("lifecycle = x'00ff01'", 1),
        ("lifecycle = 'degraded', last_error = x'fffe'", 2),  # the legacy lane blocked: critical
        ("consecutive_failures = x'01', last_enqueued_seq = x'02'", 1),
    ],
    ids=["lifecycle", "last_error", "integers"],
)
def test_a_blob_in_sync_state_is_text_in_the_report_not_a_traceback(
    engram_world: EngramEnvironment, tmp_path: Path, update: str, status: int
) -> None:
    """Failed first: `TypeError: Object of type bytes is not JSON serializable` (and int(b'\\x01'))."""
    db = _home(engram_world)
    add_foreign_targets(db, 2)  # SIMULATION OF LEGACY DATA
    _legacy(db, (f"UPDATE sync_state SET {update} WHERE target_key IN ('cloud', 'cloud:phantom-00001')", ()))
    for output in ("text", "json"):
        checked = run_canary(["check", "--db", str(db), "--format", output], tmp_path / "xdg", timeout=30)
        assert checked.returncode == status, checked.stdout + checked.stderr
        assert checked.stderr == "" and "Traceback" not in checked.stdout
    document = json.loads(checked.stdout)
    (phantom,) = (f for f in document["findings"] if f["target_key"] == "cloud:phantom-00001")
    if "lifecycle = x" in update:
        assert phantom["evidence"]["lifecycle"] == "\x00\ufffd\x01"
    if "last_error" in update:
        (blocked,) = (f for f in document["findings"] if f["check"] == "legacy_lane_blocked")
        assert blocked["evidence"]["last_error"] == "\ufffd\ufffd"
    if "consecutive_failures" in update:
        assert phantom["evidence"]["last_enqueued_seq"] == "\x02"


def test_foreign_targets_cost_linear_work(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed first: each foreign target normalized every project again (1,500 targets: 2.25M calls; 10k:
    100M). Now one pass over the projects; the time goal is bench/canary_scale.py's."""
    db = _home(engram_world)
    add_foreign_targets(db, 1500)  # SIMULATION OF LEGACY DATA
    calls = [0]
    normalize = targets.normalize_project

    def counted(project: str) -> str:
        calls[0] += 1
        return normalize(project)

    monkeypatch.setattr(targets, "normalize_project", counted)
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    result = run_check(db, CanaryConfig(), None, use_cursor=False)
    assert result.summary["foreign_sync_targets"] == 1500
    assert calls[0] <= 3 * 1500, calls[0]


@pytest.mark.parametrize("linked", ["data-dir", "db-file", "home"])
def test_watch_sees_commits_through_a_symlinked_path(
    engram_bin: Path, tmp_path: Path, watcher_factory: list[WatchProcess], linked: str
) -> None:
    """Failed first: a watch of a path through a symlink got 0 file events (inotify follows no link), so
    the alert waited for the full check. The real engram writes its real file; the canary is given the link
    (a linked data dir as --db, a linked engram.db as --db, or a linked ~/.engram and no --db at all)."""
    world = EngramEnvironment(binary=engram_bin, root=tmp_path / "world").prepare()
    real = world.data_dir  # engram is given the real directory; the canary, the link
    home = tmp_path / "home"
    home.mkdir()
    if linked == "home":
        (home / ".engram").symlink_to(real)
        db_args: list[str] = []
    elif linked == "data-dir":
        (tmp_path / "linked").symlink_to(real)
        db_args = ["--db", str(tmp_path / "linked" / "engram.db")]
    else:
        db_args = ["--db", str(tmp_path / "engram-link.db")]
    save(world, world.home, "seed")
    assert world.run(["cloud", "enroll", "seed"]).returncode == 0
    if linked == "db-file":
        (tmp_path / "engram-link.db").symlink_to(real / "engram.db")
    write_settings(tmp_path / "xdg", "watch:\n  full_recheck_seconds: 3600\n")
    watcher = WatchProcess(db_args, tmp_path / "xdg", HOME=str(home))
    watcher_factory.append(watcher)
    watcher.wait_started()
    save(world, world.home, "scratch")
    watcher.wait_for(
        lambda text: "NEW foreign sync target cloud:scratch " in text, timeout=20, what="the alert"
    )
    assert watcher.stop() == 0
    stopped = watcher.snapshot()[-1]
    assert stopped.startswith("engram-canary: stopped (") and "(0 file events" not in stopped, stopped


def test_watchs_full_check_is_linear_in_foreign_targets(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """Failed first: the first full check matched every key against every finding (10k targets: 21 s
    before `watching`). Counted as lines run in canary/watch.py, which a clock on a shared machine is not."""
    db = _home(engram_world)
    add_foreign_targets(db, 1500)  # SIMULATION OF LEGACY DATA
    watcher = Watcher(WatchOptions(db_path=db, config=CanaryConfig(), baseline=None, stream=io.StringIO()))
    watch_file = watch_module.__file__
    lines = [0]

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename != watch_file:
            return None
        if event == "line":
            lines[0] += 1
        return trace

    sys.settrace(trace)
    try:
        watcher._full_check(initial=True)
    finally:
        sys.settrace(None)
    assert len(watcher.alerted) == 1500
    assert lines[0] <= 100 * 1500, lines[0]  # about 55 a target; quadratic was 1,500 a target


def test_cleanup_phantoms_plans_in_linear_work(
    engram_world: EngramEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed first: each kept target's hint walked the whole inbox (1,500 targets: 4.5M project
    normalizations; 3k targets: 4.4 s of CPU, now 0.4 s)."""
    db = _home(engram_world)
    add_foreign_targets(db, 1500)  # SIMULATION OF LEGACY DATA
    calls = [0]
    normalize = targets.normalize_project

    def counted(project: str) -> str:
        calls[0] += 1
        return normalize(project)

    monkeypatch.setattr(targets, "normalize_project", counted)
    with EngramDb.open(db) as engram, engram.read_transaction():
        plan = plan_cleanup(engram)
    assert len(plan.kept) == 1500 and plan.phantoms == []
    assert plan.kept[0] == (
        "'cloud:phantom-00000' still holds 2 unacked rows (triage them with engram-canary inbox claim/drop "
        "--project phantom-00000 (2 rows))"
    )
    assert calls[0] <= 5 * 1500, calls[0]
