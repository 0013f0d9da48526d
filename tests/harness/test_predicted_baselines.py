"""Baselines predicted from engram's source (v2/v3): tagged, loadable, and inert on a v1.20 run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.scenario.checks import in_range
from engram_sync_kit.harness.scenario.loader import load_scenario
from engram_sync_kit.harness.scenario.schema import ExpectationBase, SyncStep, parse_expectation

SCENARIOS = sorted(Path(__file__).resolve().parents[2].joinpath("scenarios").glob("*.scenario.yaml"))


def predicted() -> list[tuple[str, ExpectationBase]]:
    return [
        (path.name, at.expectation)
        for path in SCENARIOS
        for at in load_scenario(path).expectations
        if at.expectation.predicted is not None
    ]


def test_predicted_baselines_exist_for_v2_and_v3() -> None:
    found = predicted()
    assert len({name for name, _ in found}) >= 3, found
    assert any(in_range("3.2.1", e.engram or "") for _, e in found)
    assert any(in_range("2.2.2", e.engram or "") for _, e in found)


@pytest.mark.parametrize("version", ["1.20.0", "v1.20.0"])
def test_no_predicted_baseline_applies_to_v120(version: str) -> None:
    for name, expectation in predicted():
        assert expectation.tag == "baseline", name
        assert not in_range(version, expectation.engram or ""), (name, expectation.engram)
        assert expectation.why.startswith("predicted from source"), (name, expectation.why)


def test_only_a_baseline_can_be_predicted() -> None:
    with pytest.raises(ValueError, match="only a baseline can be predicted from source"):
        parse_expectation(
            {
                "tag": "design",
                "predicted": "store.go @d4397781",
                "sync_state_targets": {"includes": ["cloud"]},
            }
        )


def checks_in_range(scenario: str, version: str, kind: str) -> list[tuple[ExpectationBase, Any]]:
    """The scenario's expectations whose range holds VERSION (a design one has none), with their check of
    KIND."""
    found = []
    for at in load_scenario(scenario_path(scenario)).expectations:
        check = getattr(at.expectation, kind, None)
        if check is not None and at.expectation.engram and in_range(version, at.expectation.engram):
            found.append((at.expectation, check))
    return found


def scenario_path(scenario: str) -> Path:
    return next(p for p in SCENARIOS if p.name == scenario)


def sync_state_predictions(scenario: str, version: str) -> list[dict[str, list[str]]]:
    return [
        check.model_dump(exclude_none=True)
        for expectation, check in checks_in_range(scenario, version, "sync_state_targets")
        if expectation.predicted is not None
    ]


@pytest.mark.parametrize(
    ("scenario", "key"),
    [
        ("unenrolled-key-stranded.scenario.yaml", "cloud:scratchpad"),
        ("closed-target-invariant.scenario.yaml", "cloud:side-project"),
    ],
)
def test_rc11_mints_the_unenrolled_key_and_rc12_on_never_does(scenario: str, key: str) -> None:
    """PR #1157 (rc.12): a save of an unenrolled project writes no sync_state row (store.go @d4397781);
    rc.11 still mints one (cloud_inbox_test.go @1be5d11f)."""
    rc11 = sync_state_predictions(scenario, "2.0.0-rc.11")
    assert any(key in check.get("includes", []) for check in rc11), rc11
    assert not any(key in check.get("excludes", []) for check in rc11), rc11
    for version in ("2.0.0-rc.12", "2.2.2", "3.7.2"):
        later = sync_state_predictions(scenario, version)
        assert any(key in check.get("excludes", []) for check in later), (version, later)
        assert not any(key in check.get("includes", []) for check in later), (version, later)


def lanes_predictions(scenario: str, version: str) -> list[list[dict[str, object]]]:
    return [
        [row.model_dump(exclude_none=True) for row in check.rows]
        for expectation, check in checks_in_range(scenario, version, "lanes")
        if expectation.tag == "baseline"
    ]


def test_from_rc12_enroll_backfills_what_v120_had_journaled_at_each_save() -> None:
    """v1.20 journals each save's session upsert and memory (4 rows, delivered once enrolled); from rc.12 the
    saves journal nothing and enroll backfills the project's one session and two memories (store.go
    @d4397781, backfillProjectSyncMutationsTx). The sync step waits for what both can reach."""
    later_app = {"lane": "cloud", "project": "later-app", "stranded": 0, "duplicated": 0}
    assert lanes_predictions("enroll-while-rows-wait.scenario.yaml", "1.20.0") == [
        [{**later_app, "enqueued": 4, "acked": 4, "delivered": 4}]
    ]
    for version in ("2.0.0-rc.12", "2.2.2", "3.7.2"):
        assert lanes_predictions("enroll-while-rows-wait.scenario.yaml", version) == [
            [{**later_app, "enqueued": 3, "acked": 3, "delivered": 3}]
        ], version
    [received] = [
        step.body.until.received
        for step in load_scenario(scenario_path("enroll-while-rows-wait.scenario.yaml")).steps
        if isinstance(step.body, SyncStep) and step.body.until is not None
    ]
    assert received == 3
