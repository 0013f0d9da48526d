"""The pytest plugin: one item per *.scenario.yaml, located at its YAML line, tags as marks."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SCENARIO = """\
# a comment first, so the scenario's line is not 1

name: plugin
tags: [smoke, lanes]
cloud: {autosync: false}
steps:
  - enroll: my-app
expect:
  - tag: design
    sync_state_targets: {includes: ['cloud:inbox']}
"""


def test_each_scenario_is_one_item_at_its_yaml_line_with_its_tags_as_marks(pytester: pytest.Pytester) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    (item,) = items
    assert item.name == "plugin"
    assert item.location[1] == 2 and item.location[2] == "scenario: plugin"
    assert {mark.name for mark in item.iter_markers()} >= {"smoke", "lanes", "scenario", "engram"}


def test_an_invalid_scenario_is_a_failing_item_with_the_file_line_message(pytester: pytest.Pytester) -> None:
    pytester.makefile(".scenario.yaml", bad="name: x\nsteps:\n  - enroll: {colour: red}\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*bad.scenario.yaml:3: steps.0.enroll.colour: unknown key 'colour'; allowed:*"]
    )


@pytest.mark.engram
def test_a_scenario_item_runs_and_fails_on_design_only_when_asked(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    pytester.runpytest("-p", "no:cacheprovider", "--scenario-engram", str(engram_bin)).assert_outcomes(
        passed=1
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--scenario-engram", str(engram_bin), "--scenario-expect", "all"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sync_state targets: missing 'cloud:inbox'*"])


@pytest.mark.engram
def test_items_played_side_by_side_keep_their_own_results(
    pytester: pytest.Pytester, engram_bin: object
) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    failing = SCENARIO.replace("name: plugin", "name: other").replace(
        "tag: design", "tag: baseline\n    engram: '>=1.0.0'"
    )
    pytester.makefile(".scenario.yaml", other=failing)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--scenario-engram", str(engram_bin), "--scenario-jobs", "4"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *other.scenario.yaml::other"])


def test_under_strict_markers_an_undeclared_tag_is_an_invalid_scenario(pytester: pytest.Pytester) -> None:
    # Before the fix, the plugin registered every tag it met, so --strict-markers never refused one.
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    pytester.makeini("[pytest]\nmarkers =\n    smoke: declared\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*plugin.scenario.yaml: tag 'lanes' is not a declared marker (add it to the markers option)*"]
    )
    pytester.makeini("[pytest]\nmarkers =\n    smoke: declared\n    lanes: declared\n")
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "--strict-markers")
    assert [type(item).__name__ for item in items] == ["ScenarioItem"]
