"""Acknowledgements for every finding (issue 12): keyed by identity, sized, re-alarming when worse or expired."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from canary_support import run_canary
from pydantic import ValidationError

from engram_sync_kit.canary.baseline import Baseline, BaselineEntry, BaselineError, acknowledge, parse_expiry
from engram_sync_kit.canary.findings import (
    Acknowledgement,
    Finding,
    Status,
    apply_acknowledgements,
    overall_status,
)
from engram_sync_kit.harness.engram.env import EngramEnvironment

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def finding(check: str, size: int, *, target: str | None = "cloud", key: str | None = None) -> Finding:
    return Finding(check=check, severity="warning", message="m", target_key=target, key=key, size=size)


def test_an_acknowledged_finding_is_silent_until_it_grows() -> None:
    acks = {
        a.identity: a
        for a in acknowledge([finding("inbox_age", 5, key="side")], "t", reason="r", expires=None)
    }
    same, smaller, bigger = (finding("inbox_age", n, key="side") for n in (5, 3, 6))
    same, smaller, bigger = apply_acknowledgements([same, smaller, bigger], acks, NOW)
    assert (same.new, smaller.new, bigger.new) == (False, False, True)
    assert bigger.realarm == "grew from 5 to 6 rows since acknowledged"
    assert overall_status([same, smaller], 10) is Status.OK
    assert overall_status([same, bigger], 10) is Status.WARNING


def test_a_new_key_or_another_check_on_the_same_key_alarms() -> None:
    acks = {
        a.identity: a
        for a in acknowledge([finding("inbox_age", 5, key="side")], "t", reason=None, expires=None)
    }
    other_key = finding("inbox_age", 1, key="other")
    other_check = finding("unsorted_growth", 1, key="side")
    other_key, other_check = apply_acknowledgements([other_key, other_check], acks, NOW)
    assert other_key.new and other_check.new
    assert other_key.acknowledgement is None and other_check.realarm is None


def test_an_expired_acknowledgement_alarms_again() -> None:
    expires = parse_expiry("1d", NOW)
    assert expires == "2026-12-01T12:00:00Z"
    acks = {
        a.identity: a
        for a in acknowledge([finding("undelivered_project_lane", 3)], "t", reason=None, expires=expires)
    }
    before, after = finding("undelivered_project_lane", 3), finding("undelivered_project_lane", 3)
    [before] = apply_acknowledgements([before], acks, NOW + timedelta(hours=23))
    [after] = apply_acknowledgements([after], acks, NOW + timedelta(days=1))
    assert before.new is False
    assert after.new is True and after.realarm == "acknowledgement expired at 2026-12-01T12:00:00Z"


def test_any_finding_is_acknowledgeable_by_its_identity_even_one_added_later() -> None:
    """A check this module does not know (the triage helper's lane finding) is measured from its evidence."""
    lane = Finding(
        check="legacy_lane_blocked",
        severity="critical",
        message="m",
        target_key="cloud",
        evidence={"unacked_rows": 7},
    )
    acks = {a.identity: a for a in acknowledge([lane], "t", reason=None, expires=None)}
    assert [a.size for a in acks.values()] == [7]
    again = lane.model_copy(update={"evidence": {"unacked_rows": 8}})
    lane, again = apply_acknowledgements([lane, again], acks, NOW)
    assert (lane.new, again.new) == (False, True)
    assert overall_status([lane], 10) is Status.OK


def test_watch_and_check_share_one_status_policy() -> None:
    """Unit: the watcher's status between full checks is overall_status over what the full check saw."""
    from engram_sync_kit.canary.config import CanaryConfig
    from engram_sync_kit.canary.watch import Watcher, WatchOptions

    config = CanaryConfig.model_validate({"thresholds": {"critical_new_foreign_targets": 2}})
    watcher = Watcher(WatchOptions(db_path=Path("/nonexistent/engram.db"), config=config, baseline=None))
    inbox = finding("inbox_age", 3, key="side")
    acknowledged_lane = finding("undelivered_project_lane", 2, target="cloud:acme").model_copy(
        update={"new": False}
    )
    watcher.standing = [inbox, acknowledged_lane]
    assert watcher.current_status() is Status.WARNING  # a commit without a new target keeps WARNING
    watcher.alerted = {
        "cloud:a": [finding("foreign_sync_target", 1, target="cloud:a")],
        "cloud:b": [finding("foreign_mutation_target", 1, target="cloud:b")],
    }
    everything = [*watcher.standing, *(f for found in watcher.alerted.values() for f in found)]
    assert watcher.current_status() is overall_status(everything, 2) is Status.CRITICAL
    watcher.standing = []
    watcher.alerted = {}
    assert watcher.current_status() is Status.OK


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12h", "2026-12-01T00:00:00Z"),
        ("2w", "2026-12-14T12:00:00Z"),
        ("2026-12-31", "2027-01-01T00:00:00Z"),
        ("2026-12-05T08:00:00Z", "2026-12-05T08:00:00Z"),
    ],
)
def test_expiry_forms(text: str, expected: str) -> None:
    assert parse_expiry(text, NOW) == expected


@pytest.mark.parametrize("text", ["soon", "2026-11-01", "-3d", "", "0d", "0h", "0.0w"])
def test_bad_expiry_is_one_clear_error(text: str) -> None:
    with pytest.raises(BaselineError, match="--expires"):
        parse_expiry(text, NOW)


def test_a_version_1_baseline_still_silences_its_targets_at_any_size() -> None:
    old = Baseline.model_validate(
        {
            "schema": "engram-canary/baseline/v1",
            "databases": {"/x/engram.db": {"recorded_at": "t", "targets": ["cloud:scratch"]}},
        }
    )
    assert isinstance(old.databases["/x/engram.db"], BaselineEntry)
    acks = old.acknowledgements_for(Path("/x/engram.db"))
    grown = finding("foreign_sync_target", 10_000, target="cloud:scratch")
    [grown] = apply_acknowledgements([grown], acks, NOW)
    assert grown.new is False


def test_acknowledgement_round_trips_without_nulls() -> None:
    ack = Acknowledgement(check="c", target_key="t", size=1, acknowledged_at="a")
    assert json.loads(ack.model_dump_json(exclude_none=True)) == {
        "check": "c",
        "target_key": "t",
        "size": 1,
        "acknowledged_at": "a",
    }


# -- against the real engram -------------------------------------------------------------------------


def save(world: EngramEnvironment, cwd: Path, project: str, title: str = "note") -> None:
    result = world.run(["save", title, f"content of {title}", "--project", project], cwd=cwd)
    assert result.returncode == 0, result.stderr


def check(
    world: EngramEnvironment, config_home: Path, *, text: bool = False
) -> tuple[int, dict[str, Any], str]:
    done = run_canary(["check", "--db", str(world.db_path), "--format", "json"], config_home)
    shown = run_canary(["check", "--db", str(world.db_path)], config_home).stdout if text else ""
    return done.returncode, json.loads(done.stdout), shown


@pytest.mark.engram
def test_every_kind_of_finding_is_acknowledged_and_realarms_when_worse(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """Foreign target, inbox age and unsorted growth: acknowledged with a reason, silent, then worse again."""
    config_home = tmp_path / "xdg"
    (config_home / "engram-canary").mkdir(parents=True)
    (config_home / "engram-canary" / "config.yaml").write_text(
        "inbox:\n  age_days: 0.000001\n  unsorted_growth_rows: 1\n"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "side")  # a designation: inbox key 'side', target cloud:side
    for title in ("home one", "home two"):  # home-dir saves: unsorted grows by 2 memories
        save(engram_world, engram_world.home, engram_world.home.name, title)

    code, document, _ = check(engram_world, config_home)
    assert code == 1
    checks = sorted(f["check"] for f in document["findings"])
    assert checks == ["foreign_sync_target", "foreign_sync_target", "inbox_age", "unsorted_growth"], checks

    recorded = run_canary(
        [
            "baseline",
            "--db",
            str(engram_world.db_path),
            "--reason",
            "old debt, ticket 42",
            "--expires",
            "30d",
        ],
        config_home,
    )
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.startswith("acknowledged 4 findings for ")

    code, document, text = check(engram_world, config_home, text=True)
    assert code == 0, text
    assert document["status"] == "ok"
    assert document["summary"]["acknowledged_findings"] == 4
    assert document["summary"]["unacknowledged_findings"] == 0
    assert all(
        f["new"] is False and f["acknowledgement"]["reason"] == "old debt, ticket 42"
        for f in document["findings"]
    )
    first = text.splitlines()[0]
    assert first.startswith("ENGRAM-CANARY OK - no unacknowledged foreign sync target, 4 acknowledged | ")
    assert first.endswith(" acknowledged_findings=4;;;0")
    assert "[acknowledged] warning inbox_age:" in text
    assert "reason: old debt, ticket 42" in text

    save(engram_world, scratch, "side", "second")  # the same target and key grow
    code, document, text = check(engram_world, config_home, text=True)
    assert code == 1
    worse = {f["check"]: f["realarm"] for f in document["findings"] if f["new"]}
    assert worse == {
        "foreign_sync_target": "grew from 2 to 4 rows since acknowledged",
        "inbox_age": "grew from 1 to 2 rows since acknowledged",
    }
    assert text.splitlines()[0].startswith(
        "ENGRAM-CANARY WARNING - 1 foreign sync target (0 new), 1 other finding (0 new), 2 acknowledged | "
    )
    assert "[WORSE] warning foreign_sync_target:" in text


@pytest.mark.engram
def test_status_is_one_policy_for_check_and_watch(engram_world: EngramEnvironment, tmp_path: Path) -> None:
    """An inbox tripwire seen by the watcher's full check keeps the status between full checks (no flapping)."""
    from engram_sync_kit.canary.checks import run_check
    from engram_sync_kit.canary.config import CanaryConfig
    from engram_sync_kit.canary.watch import Watcher, WatchOptions

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "side")
    engram_world.run(["cloud", "enroll", "side"])
    for title in ("home one", "home two"):  # unsorted grows by 2 memories
        save(engram_world, engram_world.home, engram_world.home.name, title)
    config = CanaryConfig.model_validate(
        {"inbox": {"unsorted_growth_rows": 1}, "watch": {"inbox_tripwires": True}}
    )
    pings: list[Status] = []
    watcher = Watcher(
        WatchOptions(db_path=engram_world.db_path, config=config, baseline=None, stream=io.StringIO())
    )
    watcher._notify_status = lambda status, body: pings.append(status)  # type: ignore[method-assign]
    watcher._full_check(initial=True)
    expected = run_check(engram_world.db_path, config, None).exit_status
    assert expected is Status.WARNING
    assert watcher.status is expected and watcher.current_status() is expected
    save(engram_world, scratch, "side", "an enrolled write: a commit without a new target")
    assert watcher._incremental_check()
    assert watcher.status is Status.WARNING
    assert pings == [Status.WARNING]  # no flap to OK and back


@pytest.mark.engram
def test_watch_keeps_an_acknowledged_target_silent_until_a_full_check_sees_it_grow(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram_sync_kit.canary.baseline import load_baseline
    from engram_sync_kit.canary.config import CanaryConfig
    from engram_sync_kit.canary.watch import Watcher, WatchOptions

    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "known")
    config_home = tmp_path / "xdg"
    assert run_canary(["baseline", "--db", str(engram_world.db_path)], config_home).returncode == 0
    baseline = load_baseline(config_home / "engram-canary" / "baseline.json")
    stream = io.StringIO()
    watcher = Watcher(
        WatchOptions(db_path=engram_world.db_path, config=CanaryConfig(), baseline=baseline, stream=stream)
    )
    watcher._full_check(initial=True)
    assert (watcher.alerted, watcher.status) == ({}, Status.OK)
    save(engram_world, scratch, "known", "more rows on the acknowledged target")
    assert watcher._incremental_check()
    assert watcher.alerted == {}  # between full checks an acknowledged target stays silent
    watcher._full_check(initial=False)
    assert set(watcher.alerted) == {"cloud:known"}
    assert watcher.status is Status.WARNING
    line = next(text for text in stream.getvalue().splitlines() if "cloud:known" in text)
    assert "acknowledged, alarms again: grew from 2 to 4 rows since acknowledged" in line


def test_findings_are_values_acknowledging_returns_new_ones() -> None:
    acks = {
        a.identity: a
        for a in acknowledge([finding("inbox_age", 5, key="side")], "t", reason="r", expires=None)
    }
    original = finding("inbox_age", 5, key="side")
    [silenced] = apply_acknowledgements([original], acks, NOW)
    assert (original.new, original.acknowledgement) == (True, None)
    assert (silenced.new, silenced.acknowledgement) == (False, acks[original.identity])
    with pytest.raises(ValidationError):
        original.new = False  # type: ignore[misc]  # the point: a frozen Finding refuses the write


def test_an_expired_acknowledgement_is_labelled_expired_and_a_grown_one_worse() -> None:
    from engram_sync_kit.canary.checks import CheckResult
    from engram_sync_kit.canary.config import CanaryConfig
    from engram_sync_kit.canary.report import render_text

    expires = parse_expiry("1d", NOW)
    empty, grown = finding("foreign_sync_target", 0, target="cloud:gone"), finding("inbox_age", 2, key="side")
    acks = {a.identity: a for a in acknowledge([empty], "t", reason=None, expires=expires)}
    acks |= {
        a.identity: a
        for a in acknowledge([finding("inbox_age", 1, key="side")], "t", reason=None, expires=None)
    }
    empty, grown = apply_acknowledgements([empty, grown], acks, NOW + timedelta(days=2))
    result = CheckResult(status="warning", db="/x/engram.db", checked_at="t", findings=[empty, grown])
    lines = render_text(result, CanaryConfig()).splitlines()
    assert "[EXPIRED] warning foreign_sync_target: m" in lines
    assert "[WORSE] warning inbox_age: m" in lines


@pytest.mark.engram
def test_check_labels_an_expired_acknowledgement_of_an_empty_target_expired(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    config_home = tmp_path / "xdg"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    save(engram_world, scratch, "gone")
    dropped = run_canary(
        ["inbox", "drop", "--project", "gone", "--db", str(engram_world.db_path), "--apply"], config_home
    )
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    recorded = run_canary(["baseline", "--db", str(engram_world.db_path), "--expires", "1d"], config_home)
    assert recorded.returncode == 0, recorded.stderr
    baseline_file = config_home / "engram-canary" / "baseline.json"
    document = json.loads(baseline_file.read_text())
    for entry in document["databases"].values():  # a day later: the acknowledgements have expired
        for ack in entry["acknowledgements"]:
            ack["expires"] = "2020-01-01T00:00:00Z"
    baseline_file.write_text(json.dumps(document))

    code, result, text = check(engram_world, config_home, text=True)
    assert code == 1, text
    [target] = [f for f in result["findings"] if f["target_key"] == "cloud:gone"]
    assert target["size"] == 0 and target["realarm"] == "acknowledgement expired at 2020-01-01T00:00:00Z"
    assert (
        "[EXPIRED] warning foreign_sync_target: sync target cloud:gone is outside the closed target space "
        "(0 unacked rows)" in text.splitlines()
    ), text
    assert "[WORSE]" not in text
