"""Issue 37's smaller items: each pinned by a test that failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.lanes import MeasuredLaneRow
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.report import lane_summary
from engram_sync_kit.harness.scenario.runner import declared_labels
from engram_sync_kit.harness.scenario.step_results import RunResult, StepResults

pytest_plugins = ["pytester"]

TWO_RUNS = """\
name: two runs
steps:
  - enroll: my-app
  - run: {args: [stats], as: first}
  - device:
      name: laptop
      steps:
        - run: {args: [stats], as: second}
expect:
  - tag: design
    command: {of: second, exit: 0}
"""


def test_a_check_of_a_step_that_exists_but_did_not_run_says_so() -> None:
    # Before: "no run result named 'second': add a `run:` step (as: second) before the checks", for a
    # scenario that has that very step, stopped by an earlier failure.
    scenario = parse_scenario(TWO_RUNS, Path("two.scenario.yaml"))
    results = StepResults(declared=declared_labels(scenario.steps))
    assert results.declared == {"first": 4, "second": 8}
    results.record("first", RunResult(0, "", ""))
    assert isinstance(results.get("first", RunResult, "run"), RunResult)
    with pytest.raises(LookupError) as refused:
        results.get("second", RunResult, "run")
    assert str(refused.value) == (
        "no run result named 'second': its step (line 8) did not run, because an earlier step failed or the "
        "scenario stopped before it"
    )
    with pytest.raises(LookupError, match=r"^no run result named 'third': add a `run:` step \(as: third\)"):
        results.get("third", RunResult, "run")


def test_a_yaml_merge_override_is_legal_and_a_key_written_twice_is_still_refused() -> None:
    # Before: `{<<: *s, title: x}` was refused as "duplicate key 'title'".
    text = "name: merge\nsteps:\n  - save: &s {title: a, content: b}\n  - save: {<<: *s, title: x}\n"
    scenario = parse_scenario(text, Path("merge.scenario.yaml"))
    assert [step.raw for step in scenario.steps] == [
        {"title": "a", "content": "b"},
        {"title": "x", "content": "b"},
    ]
    with pytest.raises(
        ScenarioError, match=r"^twice.scenario.yaml:3: steps.0.save.title: duplicate key 'title'"
    ):
        parse_scenario(
            "name: twice\nsteps:\n  - save: {title: a, content: b, title: c}\n", Path("twice.scenario.yaml")
        )


def test_a_tag_in_another_case_or_with_two_letters_swapped_is_a_typo(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Before: `gaet` and `Gate` (difflib's ratio 0.75, under its 0.8 cutoff) were taken as new tags.
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(tmp_path_factory.mktemp("no-engram")))
    for name, tag in (
        ("one", "gate"),
        ("two", "gate"),
        ("swapped", "gaet"),
        ("cased", "Gate"),
        ("new", "gold"),
    ):
        pytester.makefile(
            ".scenario.yaml",
            **{name: f"name: {name}\ntags: [{tag}]\nsteps:\n  - enroll: a\nexpect:\n  - tag: design\n"
               "    sync_state_targets: {includes: [cloud]}\n"},
        )  # fmt: skip
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--strict-markers", "--scenario-skip-without-engram"
    )
    result.assert_outcomes(skipped=3, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*cased.scenario.yaml:1: tag 'Gate': did you mean 'gate'? *",
            "*swapped.scenario.yaml:1: tag 'gaet': did you mean 'gate'? *",
        ]
    )


def test_the_summarys_lanes_column_tells_lost_from_stranded() -> None:
    # Before: both rows read "cloud/app 1/3": nothing told a row that may still arrive from one that never will.
    stranded = MeasuredLaneRow("cloud", "app", enqueued=3, acked=1, delivered=1, stranded=2)
    lost = MeasuredLaneRow("cloud", "", enqueued=3, acked=3, delivered=1, lost=2)
    assert lane_summary(stranded) == "cloud/app 1/3 delivered, 2 stranded"
    assert lane_summary(lost) == 'cloud/"" 1/3 delivered, 2 lost'
    assert lane_summary(MeasuredLaneRow("cloud", "a", enqueued=1, delivered=2, duplicated=1)) == (
        "cloud/a 2/1 delivered, 1 duplicated"
    )
