"""A scenario result's verdict: judged once when the run is over, then read by every report."""

from __future__ import annotations

from pathlib import Path

from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.results import ExpectationResult, ScenarioResult, judge

SCENARIO = """\
name: verdicts
steps:
  - enroll: my-app
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    sync_state_targets: {includes: [cloud]}
"""


def a_result(*statuses: tuple[str, str]) -> ScenarioResult:
    scenario = parse_scenario(SCENARIO, Path("verdicts.scenario.yaml"))
    expectations = [
        ExpectationResult(i, 5, tag, "stderr", status) for i, (tag, status) in enumerate(statuses)
    ]
    return ScenarioResult(scenario, "1.20.0", expectations=expectations)


def test_a_design_failure_fails_design_and_all_but_not_baseline() -> None:
    result = a_result(("baseline", "pass"), ("design", "fail"))
    verdicts = (result.verdict("baseline"), result.verdict("design"), result.verdict("all"))
    assert verdicts == ("passed", "failed", "failed")
    assert judge(result, "design") == "failed"


def test_recorded_verdicts_are_what_every_reader_sees_afterwards() -> None:
    result = a_result(("baseline", "fail"))
    result.record_verdicts()
    assert result.verdicts == {"baseline": "failed", "design": "passed", "all": "failed"}
    result.expectations.clear()  # nothing judges again once the verdicts are recorded
    assert result.verdict("baseline") == "failed" and judge(result, "all") == "failed"


def test_a_run_that_stopped_is_its_status_in_every_mode() -> None:
    result = a_result(("baseline", "pass"))
    result.status = "error"
    result.record_verdicts()
    assert set(result.verdicts.values()) == {"error"}
