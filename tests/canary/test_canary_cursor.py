"""The inbox tripwires' cursor (canary.inbox_cursor) equals a full recomputation on every path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from inbox_support import canary, engram_ok

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.cursor import CursorMode, tripwire_inputs
from engram_sync_kit.canary.inbox.selection import findings_from, tripwire_findings
from engram_sync_kit.canary.inbox.settings import InboxSettings
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram
SETTINGS = InboxSettings(age_days=0.5, unsorted_growth_rows=1)


def both(db: Path, now: datetime) -> tuple[list[Finding], list[Finding], CursorMode]:
    with EngramDb.open(db) as engram:
        full = tripwire_findings(engram, SETTINGS, aliases=AliasMap(), now=now)
        inputs, enrolled, unattributed, mode = tripwire_inputs(engram, AliasMap(), now=now)
        return full, findings_from(inputs, enrolled, unattributed, now, SETTINGS), mode


def dumped(findings: list[Finding]) -> list[dict[str, object]]:
    return [finding.model_dump() for finding in findings]


def test_every_cursor_path_equals_a_full_recomputation(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    world = engram_world
    for title in ("one", "two"):
        engram_ok(world, "save", title, "c", "--project", "side")
        engram_ok(world, "save", title, "c", "--project", "other")
    for title in ("h1", "h2"):
        engram_ok(world, "save", title, "c", "--project", world.home.name, cwd=world.home)
    later = datetime.now(UTC) + timedelta(days=1)
    steps: list[CursorMode] = []

    def compare() -> list[Finding]:
        full, incremental, mode = both(world.db_path, later)
        steps.append(mode)
        assert dumped(incremental) == dumped(full), mode
        return full

    found = compare()  # no cursor yet: a full read, kept
    assert sorted((f.check, f.key) for f in found) == [
        ("inbox_age", "other"),
        ("inbox_age", "side"),
        ("unsorted_growth", "unsorted"),
    ]
    compare()  # unchanged: the kept inputs
    engram_ok(world, "save", "three", "more", "--project", "side")
    engram_ok(world, "save", "h3", "c", "--project", world.home.name, cwd=world.home)
    compare()  # rows appended: only the new ones are read
    assert [f.size for f in compare() if f.key == "side"] == [3]  # and kept again
    world.run(["cloud", "enroll", "other"])
    assert [f.key for f in compare() if f.check == "inbox_age"] == ["side"]  # enrolled: full
    dropped = canary(world, "inbox", "drop", "--project", "side", "--apply")
    assert dropped.returncode == 0, dropped.stderr
    assert [f.key for f in compare() if f.check == "inbox_age"] == []  # acked: full
    assert steps == [
        CursorMode.FULL,
        CursorMode.CACHED,
        CursorMode.APPENDED,
        CursorMode.CACHED,
        CursorMode.FULL,
        CursorMode.FULL,
    ]


def test_an_unwritable_state_dir_only_costs_time(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(blocker / "state"))
    engram_ok(engram_world, "save", "t", "c", "--project", "side")
    later = datetime.now(UTC) + timedelta(days=1)
    for expected in (CursorMode.FULL, CursorMode.FULL):
        full, incremental, mode = both(engram_world.db_path, later)
        assert (dumped(incremental), mode) == (dumped(full), expected)


def test_check_through_its_state_equals_check_full(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole check (foreign-target evidence kept too) prints what `check --full` prints, before and
    after the database changes."""
    from engram_sync_kit.canary.checks import run_check
    from engram_sync_kit.canary.config import CanaryConfig

    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    config = CanaryConfig()

    def same() -> dict[str, Any]:
        kept = run_check(engram_world.db_path, config, None).model_dump(exclude={"checked_at"})
        full = run_check(engram_world.db_path, config, None, use_cursor=False).model_dump(
            exclude={"checked_at"}
        )
        for document in (kept, full):  # the session-span check reports which way its own cursor went
            document["summary"].pop("stage_a", None)
        assert kept == full
        return kept

    engram_ok(engram_world, "save", "a", "c", "--project", "scratch")
    first = same()
    assert same() == first  # unchanged: from the state dir
    assert (tmp_path / "state").is_dir() and len(list((tmp_path / "state").glob("evidence-*.json"))) == 1
    engram_ok(engram_world, "save", "b", "c", "--project", "scratch")
    grown = same()
    sizes = [f["size"] for f in grown["findings"] if f["check"] == "foreign_sync_target"]
    assert sizes == [4]


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"{",
        b"[]",
        b'{"schema_": "engram-canary/inbox-cursor/v1"}',
        b"\xff\xfe\x00",
        b"null",
        b"1e999999",
    ],
)
def test_a_damaged_state_file_means_a_full_read_never_an_error(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, garbage: bytes
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(state))
    engram_ok(engram_world, "save", "t", "c", "--project", "side")
    later = datetime.now(UTC) + timedelta(days=1)
    both(engram_world.db_path, later)
    files = sorted(state.glob("*.json"))
    assert files
    for path in files:
        path.write_bytes(garbage)
    full, incremental, mode = both(engram_world.db_path, later)
    assert (dumped(incremental), mode) == (dumped(full), CursorMode.FULL)
