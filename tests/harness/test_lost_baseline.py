"""A scenario states what an engram version loses today (`lost:`, baseline only, with a reason); every
lane and project it does not name must lose nothing (the invariant)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from test_scenario_loader import errors_of

from engram_sync_kit.harness.lanes import LaneTable, MeasuredLaneRow
from engram_sync_kit.harness.scenario.checks import EVALUATORS
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.results import ExpectationResult, ScenarioResult
from engram_sync_kit.harness.scenario.runner import _nothing_else_lost

SCENARIO = """\
name: lossy
steps: []
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    lost: {reason: "engram #264", rows: [{lane: cloud, project: my-app, count: 4}]}
"""


def judged(lost_app: int, lost_other: int, status: str = "pass") -> ExpectationResult:
    scenario = parse_scenario(SCENARIO, Path("s.scenario.yaml"))
    result = ScenarioResult(scenario=scenario, version="1.20.0")
    result.lanes = LaneTable(
        rows=[
            MeasuredLaneRow(lane="cloud", project="my-app", enqueued=4, acked=4, lost=lost_app),
            MeasuredLaneRow(lane="cloud", project="other", enqueued=2, acked=2, lost=lost_other),
        ]
    )
    result.expectations.append(ExpectationResult(0, 6, "baseline", "lost", status))
    return _nothing_else_lost(result)


def test_a_stated_loss_passes_the_invariant_and_says_why() -> None:
    invariant = judged(4, 0)
    assert (invariant.tag, invariant.status) == ("invariant", "pass")
    assert invariant.detail == "4 lost row(s), all stated as the baseline (line 4: engram #264)"


def test_a_loss_nobody_stated_fails_the_invariant_by_lane_and_project() -> None:
    # Before: any lost row failed the run, so v1.20's reproduced silent loss could never be a baseline.
    invariant = judged(4, 1)
    assert invariant.status == "fail"
    assert invariant.detail == (
        "5 row(s) acked but never received by the cloud; not stated by a baseline: cloud/other: 1"
    )
    assert judged(5, 0).detail.endswith("not stated by a baseline: cloud/my-app: 1")


def test_a_loss_stated_for_another_engram_range_does_not_count() -> None:
    assert judged(4, 0, status="n/a").status == "fail"


def test_the_lost_check_wants_the_exact_count() -> None:
    scenario = parse_scenario(SCENARIO, Path("s.scenario.yaml"))
    (at,) = scenario.expectations

    observed = SimpleNamespace(
        lanes=LaneTable(rows=[MeasuredLaneRow(lane="cloud", project="my-app", lost=2)])
    )
    problems = EVALUATORS["lost"](at.expectation.check, cast(Any, observed))
    assert problems == ["cloud/my-app lost: expected 4, got 2"]


def test_only_a_baseline_states_a_loss_and_it_needs_a_reason() -> None:
    design = SCENARIO.replace('tag: baseline\n    engram: ">=1.20.0,<2.0.0"', "tag: design")
    assert errors_of(design) == [
        "s.scenario.yaml:4: expect.0: lost: only a baseline states a loss (a design never loses a row)"
    ]
    assert errors_of(SCENARIO.replace('reason: "engram #264", ', "")) == [
        "s.scenario.yaml:6: expect.0.lost.reason: missing required key 'reason'"
    ]
