"""Typed step results and the expectation union (issue 16): a check on a missing or wrong-kind result
fails in one line, every kind has one model and one evaluator, and the YAML refuses unknown, missing
and duplicate kinds in one file:line each."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.checks import EVALUATORS, Observed, evaluate
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.schema import (
    CHECK_KEYS,
    EXPECTATION_MODELS,
    ReceivedCheck,
    ReceivedExpectation,
    json_schema,
    parse_expectation,
)
from engram_sync_kit.harness.scenario.step_results import (
    CanaryResult,
    CloudStatusResult,
    CommandOutput,
    DoctorResult,
    HttpResult,
    InboxListResult,
    RunResult,
    SaveResult,
    StatusInboxLine,
    StepResults,
    UnsupportedResult,
)

RESULTS = StepResults(
    {
        "ran": RunResult(3, "out", "err"),
        "api": HttpResult(404, {"error": "nope"}),
        "doc": DoctorResult({"status": "ok", "checks": [{"check_id": "a", "result": "warning"}]}),
        "gone": UnsupportedResult("engram 1.20.0 has no `engram cloud inbox`"),
    }
)


def judge(check: str, results: StepResults = RESULTS) -> tuple[str, str]:
    scenario = parse_scenario(f"name: x\nsteps: []\nexpect:\n  - {{tag: design, {check}}}\n", Path("x.yaml"))
    facts = Observed("1.20.0", LaneTable(), ["cloud"], results, "", [])
    return evaluate(scenario.expectations[0].expectation, facts)


@pytest.mark.parametrize(
    ("check", "detail"),
    [
        (
            "command: {of: api, exit: 0}",
            "'api' was recorded by a `http` step; this check reads what `run` records",
        ),
        (
            "canary: {of: doc}",
            "'doc' was recorded by a `doctor` step; this check reads what `canary` records",
        ),
        ("doctor: {of: ran}", "'ran' was recorded by a `run` step; this check reads what `doctor` records"),
        ("inbox: {of: api}", "'api' was recorded by a `http` step; this check reads what `inbox` records"),
        (
            "enroll_hint: {of: api}",
            "'api' was recorded by a `http` step; this check reads what `enroll` records",
        ),
        (
            "save_answer: {of: ran}",
            "no save result named 'ran': add a `save:` step (as: ran) before the checks",
        ),
        ("doctor_check: {of: nothing, check: a}", "no doctor result named 'nothing': add a `doctor:` step"),
        ("cloud_status: {of: gone}", "gone: the step did not run: engram 1.20.0 has no `engram cloud inbox`"),
        ("command: {of: gone}", "gone: the step did not run: engram 1.20.0 has no `engram cloud inbox`"),
    ],
)
def test_a_missing_or_wrong_kind_result_fails_the_check_in_one_line(check: str, detail: str) -> None:
    status, said = judge(check)
    assert status == "fail" and said.startswith(detail) and "\n" not in said


def test_the_command_check_reads_any_command_and_the_doctor_check_its_report() -> None:
    assert judge("command: {of: ran, exit: 3, stdout_contains: [out], stderr_contains: [err]}") == (
        "pass",
        "",
    )
    assert judge("doctor: {of: doc, checks_include: [a]}") == ("pass", "")
    assert judge("command: {of: ran, exit: 0}") == ("fail", "ran: exit 3, expected 0")


def test_results_are_frozen_and_their_evidence_json_keeps_the_old_shape() -> None:
    line = StatusInboxLine(3, 1, None)
    status = CloudStatusResult(0, "inbox: 3 memories in 1 unenrolled key", "", inbox=line)
    with pytest.raises(AttributeError):
        status.exit = 1  # type: ignore[misc]
    cli = SaveResult("cli", "/w", command=CommandOutput(0, "Memory saved: #1", ""), sync_id="obs-1")
    mcp = SaveResult("mcp", "/w", answer={"id": 1}, sync_id="obs-1")
    results = StepResults(
        {
            "status": status,
            "save:c": cli,
            "save:m": mcp,
            "canary": CanaryResult(0, {"status": "ok"}),
            "inbox": InboxListResult(0, ({"key": "k"},)),
            **RESULTS.by_name,
        }
    )
    assert results.as_json() == {
        "status": {
            "exit": 0,
            "stdout": "inbox: 3 memories in 1 unenrolled key",
            "stderr": "",
            "inbox": {"memories": 3, "keys": 1, "oldest_days": None},
        },
        "save:c": {
            "via": "cli",
            "cwd": "/w",
            "exit": 0,
            "stdout": "Memory saved: #1",
            "stderr": "",
            "sync_id": "obs-1",
        },
        "save:m": {"via": "mcp", "cwd": "/w", "answer": {"id": 1}, "sync_id": "obs-1"},
        "canary": {"exit": 0, "report": {"status": "ok"}},
        "inbox": {"exit": 0, "keys": [{"key": "k"}]},
        "ran": {"exit": 3, "stdout": "out", "stderr": "err"},
        "api": {"status": 404, "body": {"error": "nope"}},
        "doc": {"status": "ok", "checks": [{"check_id": "a", "result": "warning"}]},
        "gone": {"unsupported": "engram 1.20.0 has no `engram cloud inbox`"},
    }


def test_every_kind_has_one_model_one_evaluator_and_one_schema_definition() -> None:
    assert tuple(EVALUATORS) == CHECK_KEYS == tuple(EXPECTATION_MODELS)
    definitions = json_schema()["$defs"]
    union = [choice["$ref"].rsplit("/", 1)[-1] for choice in definitions["Expectation"]["oneOf"]]
    assert union == [model.__name__ for model in EXPECTATION_MODELS.values()]
    for kind, model in EXPECTATION_MODELS.items():
        assert definitions[model.__name__]["required"] == ["tag", kind]
        assert definitions[model.__name__]["additionalProperties"] is False


def errors_of(expect: str) -> list[str]:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario("name: x\nsteps: []\nexpect:\n" + expect, Path("s.scenario.yaml"))
    return str(refused.value).splitlines()


ONE_OF = (
    "lanes, lost, answer, sync_state_targets, canary, inbox, doctor, stderr, command, received, journal, sync_state, local, "
    "save_answer, enroll_hint, cloud_status, doctor_check, inbox_row, triage_copies"
)


@pytest.mark.parametrize(
    ("expect", "error"),
    [
        (
            "  - {tag: design, lane: {rows: []}}\n",
            f"s.scenario.yaml:4: expect.0.lane: unknown key 'lane' (did you mean 'lanes'?); allowed: tag, engram, why, design_section, "
            f"predicted, {ONE_OF}",
        ),
        (
            "  - {tag: design, lanes: {rows: []}, colour: 1}\n",
            f"s.scenario.yaml:4: expect.0.colour: unknown key 'colour'; allowed: tag, engram, why, design_section, "
            f"predicted, {ONE_OF}",
        ),
        (
            "  - tag: design\n    doctor: {}\n    doctor: {checks_include: [a]}\n",
            "s.scenario.yaml:6: expect.0.doctor: duplicate key 'doctor'; each key may appear once",
        ),
        (
            "  - {tag: design, why: nothing to check}\n",
            f"s.scenario.yaml:4: expect.0: an expectation needs exactly one check of {ONE_OF} (got [])",
        ),
        (
            "  - {tag: design, lanes: {rows: []}, received: {count: 1}}\n",
            f"s.scenario.yaml:4: expect.0: an expectation needs exactly one check of {ONE_OF} "
            "(got ['lanes', 'received'])",
        ),
        (
            "  - {tag: design, lanes: {rows: []}, received: {count: -1}}\n",
            "s.scenario.yaml:4: expect.0.received.count: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            "  - [lanes]\n",
            "s.scenario.yaml:4: expect.0: Input should be a valid dictionary or instance of Expectation (got ['lanes'])",
        ),
    ],
)
def test_unknown_missing_duplicate_and_extra_kinds_are_refused_in_one_line(expect: str, error: str) -> None:
    assert errors_of(expect) == [error]


def test_a_null_check_next_to_the_real_one_is_no_check_as_before() -> None:
    scenario = parse_scenario(
        "name: x\nsteps: []\nexpect:\n  - {tag: design, lanes: null, doctor: {}}\n", Path("s.scenario.yaml")
    )
    assert [at.expectation.kind for at in scenario.expectations] == ["doctor"]


def test_the_union_picks_the_model_of_its_one_check_and_refuses_none_or_two() -> None:
    picked = parse_expectation({"tag": "design", "received": {"count": 1}})
    assert isinstance(picked, ReceivedExpectation) and picked.check == ReceivedCheck(count=1)
    for data in ({"tag": "design"}, {"tag": "design", "received": {"count": 1}, "lanes": {"rows": []}}):
        with pytest.raises(ValidationError, match="an expectation needs exactly one check of lanes, "):
            parse_expectation(data)
