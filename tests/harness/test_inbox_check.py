"""The inbox check: a key's counts and the project the canary's alias map resolves it to."""

from __future__ import annotations

from pathlib import Path

from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.checks import Observed, evaluate
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.step_results import InboxListResult, StepResults


def judge(check: str) -> tuple[str, str]:
    scenario = parse_scenario(
        f"name: x\nsteps: []\nexpect:\n  - {{tag: design, inbox: {check}}}\n", Path("x.yaml")
    )
    facts = Observed(
        version="1.20.0",
        lanes=LaneTable(rows=[]),
        sync_state_targets=["cloud"],
        results=StepResults(
            {"inbox": InboxListResult(0, ({"key": "old", "count": 2, "resolved_to": "new"},))}
        ),
        stderr="",
        received=[],
    )
    return evaluate(scenario.expectations[0].expectation, facts)


def test_resolved_to_matches_the_aliased_project() -> None:
    assert judge("{keys_include: [{key: old, count: 2, resolved_to: new}]}") == ("pass", "")


def test_resolved_to_reports_expected_and_actual() -> None:
    assert judge("{keys_include: [{key: old, resolved_to: other}]}") == (
        "fail",
        "inbox old resolved_to: expected other, got new",
    )
