"""Design §2b tripwires on rows the real engram wrote: per-key age, unsorted growth; in `check` too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from inbox_support import canary, engram_serve, save

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.inbox.selection import tripwire_findings
from engram_sync_kit.canary.inbox.settings import InboxSettings
from engram_sync_kit.canary.report import TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


@pytest.fixture
def world(engram_world: EngramEnvironment) -> EngramEnvironment:
    """side-project: 4 rows (2 saves); unsorted: a home-dir session with 8 observations (9 rows)."""
    save(engram_world, "side-project", "one")
    save(engram_world, "side-project", "two")
    with engram_serve(engram_world) as server:
        home = engram_world.home
        server.post("/sessions", {"id": "s-home", "project": home.name, "directory": str(home)})
        for number in range(8):
            server.post(
                "/observations",
                {"session_id": "s-home", "type": "manual", "title": f"n{number}", "content": "c"},
            )
        assert set(server.statuses) <= {200, 201}
    return engram_world


def findings_at(
    db: Path, settings: InboxSettings, now: datetime
) -> list[tuple[str, str | None, dict[str, object]]]:
    with EngramDb.open(db) as engram:
        found = tripwire_findings(engram, settings, aliases=AliasMap(), now=now)
    assert all(finding.severity == "warning" and finding.target_key == "cloud" for finding in found)
    return [(finding.check, finding.key, finding.evidence) for finding in found]


def test_defaults_are_the_designs() -> None:
    settings = InboxSettings()
    assert (settings.age_days, settings.unsorted_growth_rows, settings.unsorted_window_days) == (
        7.0,
        100,
        7.0,
    )


def test_fresh_inbox_raises_nothing(world: EngramEnvironment) -> None:
    assert findings_at(world.db_path, InboxSettings(), datetime.now(UTC)) == []


def test_a_real_key_waiting_over_seven_days_warns_but_unsorted_never_ages(world: EngramEnvironment) -> None:
    found = findings_at(world.db_path, InboxSettings(), datetime.now(UTC) + timedelta(days=8))
    assert [(check, key) for check, key, _ in found] == [("inbox_age", "side-project")]
    evidence = found[0][2]
    assert (evidence["count"], evidence["telemetry"], evidence["threshold_days"]) == (2, 2, 7.0)
    assert 7.9 < float(str(evidence["oldest_age_days"])) < 8.1
    assert findings_at(world.db_path, InboxSettings(), datetime.now(UTC) + timedelta(days=6.9)) == []


def test_unsorted_growth_over_the_threshold_warns(world: EngramEnvironment) -> None:
    now = datetime.now(UTC)
    # 8 memories grow it; the session row is telemetry and does not count
    assert findings_at(world.db_path, InboxSettings(unsorted_growth_rows=8), now) == []
    found = findings_at(world.db_path, InboxSettings(unsorted_growth_rows=7), now)
    assert [(check, key) for check, key, _ in found] == [("unsorted_growth", "unsorted")]
    assert found[0][2]["rows"] == 8
    # rows older than the window no longer count as growth
    later = findings_at(world.db_path, InboxSettings(unsorted_growth_rows=7), now + timedelta(days=7.5))
    assert [check for check, _, _ in later] == ["inbox_age"]


def test_check_reports_both_tripwires_in_json_and_exit_code(world: EngramEnvironment) -> None:
    config = world.root / "canary.yaml"
    config.write_text("inbox:\n  age_days: 0.000001\n  unsorted_growth_rows: 7\n")
    textfiles = world.root / "prom"
    textfiles.mkdir()
    result = canary(
        world,
        "check",
        "--db",
        str(world.db_path),
        "--format",
        "json",
        "--no-baseline",
        "--textfile-dir",
        str(textfiles),
        ENGRAM_CANARY_CONFIG=str(config),
    )
    report = json.loads(result.stdout)
    assert (result.returncode, report["status"]) == (1, "warning"), result.stderr
    inbox = sorted((f["check"], f["key"], f["severity"]) for f in report["findings"] if f["key"] is not None)
    assert inbox == [("inbox_age", "side-project", "warning"), ("unsorted_growth", "unsorted", "warning")]
    db = str(world.db_path)
    prom = (textfiles / textfile_name(TEXTFILE_PREFIX, db)).read_text()
    labels = 'acknowledged="false",check="{}",db="{}",severity="warning"'
    assert f"engram_canary_findings{{{labels.format('inbox_age', db)}}} 1.0" in prom
    assert f"engram_canary_findings{{{labels.format('unsorted_growth', db)}}} 1.0" in prom
    assert f'engram_canary_status{{db="{db}"}} 1.0' in prom


def test_check_rejects_a_bad_threshold_with_file_and_line(world: EngramEnvironment) -> None:
    config = world.root / "canary.yaml"
    config.write_text("inbox:\n  age_days: 7\n  unsorted_growth: 5\n")
    result = canary(world, "--config", str(config), "check", "--db", str(world.db_path))
    assert result.returncode == 3
    assert "canary.yaml:3: unknown key 'inbox.unsorted_growth'" in result.stdout + result.stderr


def test_telemetry_is_never_inbox_debt(engram_world: EngramEnvironment) -> None:
    """Design §1: session and prompt rows are not inbox debt. A key holding only telemetry never ages,
    and the unsorted growth counts memories only (the session row of the home-dir session is left out)."""
    with engram_serve(engram_world) as server:
        home = engram_world.home
        server.post("/sessions", {"id": "s-only", "project": "chatter", "directory": str(home / "chatter")})
        server.post("/prompts", {"session_id": "s-only", "content": "hello", "project": "chatter"})
        server.post("/sessions", {"id": "s-home", "project": home.name, "directory": str(home)})
        for number in range(3):
            server.post(
                "/observations",
                {"session_id": "s-home", "type": "manual", "title": f"n{number}", "content": "c"},
            )
        assert set(server.statuses) <= {200, 201}, server.failures
    later = datetime.now(UTC) + timedelta(days=30)
    found = findings_at(
        engram_world.db_path, InboxSettings(unsorted_growth_rows=2), later - timedelta(days=29)
    )
    assert [(check, key, evidence.get("rows")) for check, key, evidence in found] == [
        ("unsorted_growth", "unsorted", 3)
    ]
    assert findings_at(engram_world.db_path, InboxSettings(unsorted_growth_rows=3), datetime.now(UTC)) == []
    aged = findings_at(engram_world.db_path, InboxSettings(), later)
    assert [
        (check, key) for check, key, _ in aged
    ] == []  # 'chatter' holds telemetry only; unsorted never ages
