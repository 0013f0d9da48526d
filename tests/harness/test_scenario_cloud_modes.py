"""The plugin's --scenario-cloud with several modes: the library once per mode, later modes held to the first.

`make test` plays the scenario library with process and docker clouds side by side this way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.pytest_plugin import _differences
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.results import ExpectationResult, ScenarioResult

pytest_plugins = ["pytester"]

SCENARIO = """\
name: plugin
cloud: {autosync: false}
steps:
  - enroll: my-app
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    sync_state_targets: {includes: [cloud]}
"""


def test_each_mode_after_the_first_adds_an_item_named_by_its_mode(pytester: pytest.Pytester) -> None:
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "--scenario-cloud", "process,docker")
    assert [item.name for item in items] == ["plugin", "plugin[docker]"]
    assert [item.get_closest_marker("docker") is not None for item in items] == [False, True]


def test_an_unknown_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--scenario-cloud", "process,dokcer")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*--scenario-cloud: 'process,dokcer': give distinct modes out of process, docker*"]
    )


def _result(statuses: dict[int, str]) -> ScenarioResult:
    scenario = parse_scenario(SCENARIO, Path("plugin.scenario.yaml"))
    result = ScenarioResult(scenario=scenario, version="1.20.0")
    result.expectations = [
        ExpectationResult(index, line, "baseline", "lanes", status, "", "")
        for index, (line, status) in enumerate(statuses.items())
    ]
    return result


def test_differences_name_each_expectation_whose_outcome_differs() -> None:
    process = _result({6: "pass", 9: "fail"})
    assert _differences(process, _result({6: "pass", 9: "fail"}), "baseline") == []
    assert _differences(process, _result({6: "fail", 9: "fail"}), "baseline") == [
        "line 6 baseline lanes: pass there, fail here"
    ]


@pytest.mark.engram
@pytest.mark.parametrize("ci", ["", "true"])
def test_without_an_engine_the_docker_items_skip_or_fail_under_ci_with_one_line(
    pytester: pytest.Pytester, engram_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("CI", ci)
    pytester.makefile(".scenario.yaml", plugin=SCENARIO)
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-rsf",
        f"--scenario-engram={engram_bin}",
        "--scenario-cloud",
        "process,docker",
    )
    if ci:
        result.assert_outcomes(passed=1, failed=1)
    else:
        result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            f"*CI=true and the fake cloud image is not available: no Docker engine answers at unix://{tmp_path}"
            "/no-engine.sock; start one (as root): scripts/docker-engine.sh up*"
            if ci
            else f"*the fake cloud image is not available: no Docker engine answers at unix://{tmp_path}*"
        ]
    )
