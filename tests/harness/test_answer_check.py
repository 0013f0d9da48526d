"""`answer:` reads a kept answer as JSON and checks values at JSON paths (GET /sync/status, reconcile)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from test_scenario_loader import errors_of

from engram_sync_kit.harness.scenario.checks import EVALUATORS, json_at
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.step_results import HttpResult, RunResult, StepResults

STATUS = {"phase": "degraded", "consecutive_failures": 1, "upgrade": {"stage": ""}, "lanes": [{"lost": 4}]}


def judge(answer: str, results: StepResults) -> list[str]:
    text = f"name: a\nsteps: []\nexpect:\n  - tag: design\n    answer: {answer}\n"
    (at,) = parse_scenario(text, Path("s.scenario.yaml")).expectations
    return EVALUATORS["answer"](at.expectation.check, cast(Any, SimpleNamespace(results=results)))


def test_json_paths_find_keys_and_indexes() -> None:
    assert json_at(STATUS, "$.upgrade.stage") == (True, "")
    assert json_at(STATUS, "$.lanes[0].lost") == (True, 4)
    assert json_at(STATUS, "$.lanes[1].lost") == (False, None)
    assert json_at(STATUS, "$") == (True, STATUS)


def test_an_http_answer_is_checked_by_status_and_json_path() -> None:
    # Before: GET /sync/status could be kept (as:) but no check could read it (engram #687).
    results = StepResults()
    results.record("status", HttpResult(200, STATUS))
    assert judge("{of: status, status: 200, json: {$.phase: degraded, $.upgrade.stage: ''}}", results) == []
    assert judge("{of: status, status: 201, json: {$.phase: healthy, $.nope: {absent: true}}}", results) == [
        "status: status 200, expected 201",
        'status $.phase: expected "healthy", got "degraded"',
    ]
    assert judge("{of: status, json: {$.reason_code: null}}", results) == [
        "status $.reason_code: absent, expected null"
    ]


def test_a_commands_stdout_is_read_as_json() -> None:
    results = StepResults()
    results.record("reconcile", RunResult(2, '{"summary": {"lost": 4}}', ""))
    results.record("text", RunResult(0, "not json", ""))
    assert judge("{of: reconcile, json: {$.summary.lost: 4}}", results) == []
    assert judge("{of: text, json: {$.x: 1}}", results) == ["text: stdout is not JSON: 'not json'"]


def test_a_json_path_is_checked_at_load() -> None:
    (line,) = errors_of("name: a\nsteps: []\nexpect:\n  - {tag: design, answer: {of: s, json: {phase: x}}}\n")
    assert line.startswith("s.scenario.yaml:4: expect.0.answer.json.phase.[key]: String should match pattern")
