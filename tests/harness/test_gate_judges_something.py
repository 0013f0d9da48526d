"""The maintainer's gate never passes on nothing and never tests the wrong binary (issue 37).

A local untagged `go build` of engram reports `engram 0.0.0-<date>-<hash>`, which no `>=1.20.0` range
covers: every baseline expectation was n/a and the gate said "passed". A wrapper script around the real
v1.20.0 binary reports that version here (the walk-through in the report builds a real untagged binary).
The tests follow what the output says: they take the option the failure names and run again with it.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram_sync_kit.harness.cli import cli as harness_main
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.results import ExpectationResult, ScenarioResult, unjudged_failure

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
GATE_SCENARIO = REPO / "examples" / "consumer" / "scenarios" / "enrolled-project-delivered.scenario.yaml"
UNTAGGED = "0.0.0-20261202153943-586bfb78db6c"


def untagged_wrapper(directory: Path, real: Path) -> Path:
    """The real engram, reporting the version an untagged local `go build` reports."""
    wrapper = directory / "engram"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "$1" in version|--version|-v) echo "engram {UNTAGGED}"; exit 0;; esac\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def option_the_output_names(text: str, suffix: str) -> str:
    """The option a one-line failure tells the maintainer to add (`... with --X VERSION ...`)."""
    match = re.search(rf"(--[a-z-]*{suffix}) VERSION", text)
    assert match is not None, text
    return match.group(1)


def _result(*expectations: ExpectationResult) -> ScenarioResult:
    scenario = parse_scenario("name: s\nsteps:\n  - enroll: a\n", Path("s.scenario.yaml"))
    invariant = ExpectationResult(-1, 1, "invariant", "lanes", "pass")
    result = ScenarioResult(scenario=scenario, version=UNTAGGED, expectations=[*expectations, invariant])
    result.record_verdicts()
    return result


def test_a_scenario_whose_every_baseline_is_n_a_judged_nothing_and_the_invariant_does_not_count() -> None:
    outside = ExpectationResult(0, 9, "baseline", "lanes", "n/a", engram_range=">=1.20.0")
    message = unjudged_failure([_result(outside)], "baseline", version_option="--v", allow_option="--a")
    assert message == (
        f"1 scenario(s) judged nothing on engram {UNTAGGED} (s: every baseline expectation is for engram "
        ">=1.20.0): name the version under test with --v VERSION (e.g. --v 1.20.0 for an untagged build "
        "of v1.20.0's source), or pass --a to accept it"
    )
    # one judged expectation is enough; a design-only scenario under baseline judged nothing
    judged = ExpectationResult(1, 12, "baseline", "lanes", "pass", engram_range=">=0.1.0")
    assert (
        unjudged_failure([_result(outside, judged)], "baseline", version_option="--v", allow_option="--a")
        == ""
    )
    design = ExpectationResult(0, 9, "design", "lanes", "pass")
    assert "s has no baseline expectation" in unjudged_failure(
        [_result(design)], "baseline", version_option="--v", allow_option="--a"
    )
    assert unjudged_failure([_result(design)], "design", version_option="--v", allow_option="--a") == ""
    # a failed scenario is failed, not unjudged
    failed = _result(outside)
    failed.status = "failed"
    failed.record_verdicts()
    assert unjudged_failure([failed], "baseline", version_option="--v", allow_option="--a") == ""


@pytest.mark.engram
def test_pytest_gate_on_an_untagged_build_fails_in_one_line_and_passes_with_the_version_it_names(
    pytester: pytest.Pytester, engram_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    wrapper = untagged_wrapper(pytester.mkdir("build"), engram_bin)
    shutil.copy(GATE_SCENARIO, pytester.path)
    base = ["-p", "no:cacheprovider", f"--scenario-engram={wrapper}", "--junitxml", "pytest.xml"]

    vacuous = pytester.runpytest(*base)
    # Before: "1 passed", exit 0, every baseline n/a.
    vacuous.assert_outcomes(failed=1)
    failures = [line for line in vacuous.stdout.lines if "nothing judged" in line]
    assert failures == [
        f"nothing judged on engram {UNTAGGED}: enrolled-project-delivered: every baseline expectation is for engram >=1.20.0; "
        "name the version under test with --scenario-engram-version-as VERSION, or pass "
        "--scenario-allow-unjudged"
    ]
    vacuous.stdout.fnmatch_lines(
        [f"engram-harness: engram {wrapper} (reports {UNTAGGED}; from --scenario-engram)"]
    )

    option = option_the_output_names(vacuous.stdout.str(), "version-as")
    named = pytester.runpytest(*base, option, "1.20.0")
    named.assert_outcomes(passed=1)
    named.stdout.fnmatch_lines(
        [
            f"engram-harness: engram {wrapper} (reports {UNTAGGED}, judged as 1.20.0 "
            "(--scenario-engram-version-as); from --scenario-engram)"
        ]
    )
    properties = {
        p.get("name"): p.get("value")
        for p in ElementTree.parse(pytester.path / "pytest.xml").getroot().iter("property")
    }
    assert properties == {
        "engram": str(wrapper),
        "engram version": "1.20.0",
        "engram reported version": UNTAGGED,
    }
    pytester.runpytest(*base, "--scenario-allow-unjudged").assert_outcomes(passed=1)


@pytest.mark.engram
def test_run_on_an_untagged_build_fails_in_one_line_and_passes_with_the_version_it_names(
    tmp_path: Path, engram_bin: Path
) -> None:
    wrapper = untagged_wrapper(tmp_path, engram_bin)
    runner = CliRunner(mix_stderr=False)
    args = ["run", "--engram", str(wrapper), "--expect", "baseline", "--junit", str(tmp_path / "j.xml")]
    vacuous = runner.invoke(harness_main, [*args, str(GATE_SCENARIO)])
    assert vacuous.exit_code == 1, vacuous.output
    errors = [line for line in vacuous.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: 1 scenario(s) judged nothing on engram {UNTAGGED} (enrolled-project-delivered: every baseline "
        "expectation is for engram >=1.20.0): name the version under test with --engram-version-as VERSION "
        "(e.g. --engram-version-as 1.20.0 for an untagged build of v1.20.0's source), or pass "
        "--allow-unjudged to accept it"
    ]
    suite = ElementTree.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"

    option = option_the_output_names(vacuous.stderr, "version-as")
    named = runner.invoke(harness_main, [*args, option, "1.20.0", str(GATE_SCENARIO)])
    assert named.exit_code == 0, named.output
    assert " passed enrolled-project-delivered on engram 1.20.0 " in named.stdout
    case = ElementTree.parse(tmp_path / "j.xml").getroot().find(".//testcase")
    assert case is not None
    assert {p.get("name"): p.get("value") for p in case.iter("property")} == {
        "engram": str(wrapper),
        "engram version": f"1.20.0 (named; the binary reports {UNTAGGED})",
    }


def test_run_refuses_a_version_as_that_is_no_release_version(tmp_path: Path) -> None:
    result = CliRunner(mix_stderr=False).invoke(
        harness_main, ["run", "--engram-version-as", "latest", str(GATE_SCENARIO)]
    )
    assert result.exit_code == 3
    assert "'latest' is not a release version; give MAJOR.MINOR.PATCH, e.g. 1.20.0" in result.stderr


def test_without_a_binary_both_junit_files_are_red(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Before: pytest's --junitxml said tests="0" failures="0", and `run --junit` wrote no file.
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(tmp_path_factory.mktemp("no-engram")))
    shutil.copy(GATE_SCENARIO, pytester.path)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--junitxml", "pytest.xml", "--scenario-junit", "own.xml"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    for name in ("pytest.xml", "own.xml"):
        suites = list(ElementTree.parse(pytester.path / name).getroot().iter("testsuite"))
        assert sum(int(s.get("errors", "0")) + int(s.get("failures", "0")) for s in suites) == 1, name
        assert "no engram binary for 1 scenario(s)" in (pytester.path / name).read_text()


def test_run_without_a_binary_writes_a_red_junit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Go: nothing can be built
    junit = tmp_path / "j.xml"
    result = CliRunner(mix_stderr=False).invoke(
        harness_main, ["run", "--junit", str(junit), str(GATE_SCENARIO)]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no engram binary: give --engram PATH")
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("errors")) == ("1", "1")
    skipped = CliRunner(mix_stderr=False).invoke(
        harness_main, ["run", "--junit", str(junit), "--skip-without-engram", str(GATE_SCENARIO)]
    )
    assert skipped.exit_code == 0
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("skipped"), suite.get("errors")) == (
        "1",
        "1",
        "0",
    )


def test_the_pytest_gate_never_falls_back_to_a_cached_release(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Before: with ENGRAM_BIN forgotten, the gate played the release `engram install` had cached.
    cache = tmp_path_factory.mktemp("cache")
    cached = cache / "v1.20.0" / "engram"
    cached.parent.mkdir()
    cached.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")  # never played: only `engram version` is asked
    cached.chmod(0o755)
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    monkeypatch.setenv("ENGRAM_KIT_CACHE", str(cache))
    shutil.copy(GATE_SCENARIO, pytester.path)
    refused = pytester.runpytest("-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "--scenario-engram-installed plays the release" in refused.stderr.str()
    asked = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "--scenario-engram-installed")
    assert asked.ret == pytest.ExitCode.OK
    asked.stdout.fnmatch_lines(
        [
            f"engram-harness: engram {cached} (reports 1.20.0; from --scenario-engram-installed, the cache {cache})"
        ]
    )


@pytest.mark.engram
def test_one_invalid_file_is_reported_and_the_run_goes_on_with_the_others(
    tmp_path: Path, engram_bin: Path
) -> None:
    # Before: one invalid file refused the whole run before anything played.
    shutil.copy(GATE_SCENARIO, tmp_path)
    (tmp_path / "bad.scenario.yaml").write_text("name: x\nsteps:\n  - savee: {}\n")
    junit = tmp_path / "j.xml"
    result = CliRunner(mix_stderr=False).invoke(
        harness_main, ["run", "--engram", str(engram_bin), "--junit", str(junit), str(tmp_path)]
    )
    assert result.exit_code == 1
    assert [line[:60] for line in result.stderr.splitlines()] == [
        f"Error: {tmp_path}/bad.scenario.yaml:3: steps.0.savee: unknown step 'savee'"[:60]
    ]
    assert " passed enrolled-project-delivered on engram 1.20.0 " in result.stdout
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "2",
        "0",
        "1",
    )


def test_under_xdist_the_header_names_the_binary_and_a_bad_version_as_is_one_line(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ENGRAM_BIN", raising=False)
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")  # asked for its version only, never played
    binary.chmod(0o755)
    shutil.copy(GATE_SCENARIO, pytester.path)
    shown = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "1", f"--scenario-engram={binary}", "--co"
    )
    shown.stdout.fnmatch_lines([f"engram-harness: engram {binary} (from --scenario-engram)"])
    refused = pytester.runpytest(
        "-p", "no:cacheprovider", f"--scenario-engram={binary}", "--scenario-engram-version-as", "1.20 ü"
    )
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in refused.stderr.lines if line] == [
        "ERROR: --scenario-engram-version-as 1.20 ü: not a release version; give MAJOR.MINOR.PATCH, e.g. 1.20.0"
    ]
