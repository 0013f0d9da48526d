"""design_section on design expectations, the per-section conformance map (terminal, JSON, JUnit)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from engram_sync_kit.harness.design.conformance import conformance, conformance_json
from engram_sync_kit.harness.design.sections import DESIGN_SECTIONS
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import load_all, parse_scenario
from engram_sync_kit.harness.scenario.results import ExpectationResult, ScenarioResult, StepRecord

HARNESS = str(Path(sys.executable).parent / "engram-harness")
LIBRARY = Path(__file__).resolve().parents[2] / "scenarios"

SCENARIO = """\
name: conformance
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
steps:
  - save: {in: app, title: t, content: c, via: cli}
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    stderr: {not_contains: ["saved to inbox"], process: cli}
  - tag: design
    design_section: "§2a"
    why: the CLI save prints the inbox warning on stderr
    stderr: {contains: ['warning: saved to inbox: "my-app"'], process: cli}
  - tag: design
    design_section: invariant
    why: no derived target
    sync_state_targets: {excludes: ["cloud:my-app"]}
"""


def test_every_design_expectation_of_the_library_names_its_design_section() -> None:
    missing = [
        f"{scenario.path.name}:{at.line}"
        for scenario in load_all([LIBRARY])
        for at in scenario.expectations
        if at.expectation.tag == "design" and at.expectation.design_section is None
    ]
    assert missing == []


def test_a_design_section_outside_the_design_is_refused_in_one_line(tmp_path: Path) -> None:
    text = SCENARIO.replace('design_section: "§2a"', 'design_section: "§9"')
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text, tmp_path / "s.scenario.yaml")
    message = str(refused.value)
    assert "s.scenario.yaml:11: expect.1" in message and "unknown design section '§9'" in message
    assert "\n" not in message


def test_design_section_on_a_baseline_is_refused(tmp_path: Path) -> None:
    text = SCENARIO.replace(
        '    engram: ">=1.20.0,<2.0.0"\n', '    engram: ">=1.20.0,<2.0.0"\n    design_section: "§1"\n'
    )
    with pytest.raises(ScenarioError, match="design_section is only for design expectations"):
        parse_scenario(text, tmp_path / "s.scenario.yaml")


def test_an_unjudged_design_expectation_counts_as_failed_and_uncovered_sections_show(tmp_path: Path) -> None:
    scenario = parse_scenario(SCENARIO, tmp_path / "c.scenario.yaml")
    stopped = ScenarioResult(
        scenario,
        "1.20.0",
        status="failed",
        steps=[StepRecord("1", "save", 6, "save", "failed", 0.1, "engram save exited 1")],
    )
    judged = ScenarioResult(
        scenario,
        "9.0.0",
        expectations=[
            ExpectationResult(1, 35, "design", "stderr", "pass"),
            ExpectationResult(2, 39, "design", "sync_state_targets", "fail", "unexpected 'cloud:my-app'"),
        ],
    )
    by_key = {(item.engram_version, item.section): item for item in conformance([stopped, judged])}
    assert (by_key[("1.20.0", "§2a")].passed, by_key[("1.20.0", "§2a")].failed) == (0, 1)
    assert "step 1 failed (engram save exited 1)" in by_key[("1.20.0", "§2a")].outcomes[0].detail
    assert by_key[("9.0.0", "§2a")].verdict == "pass"
    assert by_key[("9.0.0", "invariant")].verdict == "fail"
    assert by_key[("9.0.0", "§3")].verdict == "not covered"
    rows = conformance_json([judged])
    assert [row["section"] for row in rows] == list(DESIGN_SECTIONS)
    assert {k: rows[0][k] for k in ("section", "passed", "failed")} == {
        "section": "invariant",
        "passed": 0,
        "failed": 1,
    }


@pytest.mark.engram
def test_run_expect_design_prints_pass_fail_per_section_json_and_junit(
    tmp_path: Path, engram_bin: Path
) -> None:
    (tmp_path / "c.scenario.yaml").write_text(SCENARIO)
    result = subprocess.run(
        [HARNESS, "run", "c.scenario.yaml", "--engram", str(engram_bin), "--expect", "design",
         "--json", "r.json", "--junit", "j.xml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    assert "design conformance (per design section)" in result.stdout
    table = [line for line in result.stdout.splitlines() if "│ §2a" in line]
    assert table and "fail" in table[0] and "│ 0 " in table[0], result.stdout[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    (scenario,) = report["scenarios"]
    assert [e["design_section"] for e in scenario["expectations"]] == [None, "§2a", "invariant", None]
    by_section = {row["section"]: row for row in report["design_conformance"]}
    assert {k: by_section["§2a"][k] for k in ("passed", "failed", "engram_version")} == {
        "passed": 0,
        "failed": 1,
        "engram_version": "1.20.0",
    }
    assert (by_section["invariant"]["passed"], by_section["invariant"]["failed"]) == (1, 0)
    assert by_section["§3"]["verdict"] == "not covered"
    root = ElementTree.parse(tmp_path / "j.xml").getroot()
    assert root.tag == "testsuites"
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    section = suites["design §2a (engram 1.20.0)"]
    assert (section.get("tests"), section.get("failures")) == ("1", "1")
    failure = section.find("testcase/failure")
    assert failure is not None and "saved to inbox" in (failure.text or "")
    assert suites["design invariant (engram 1.20.0)"].get("failures") == "0"


@pytest.mark.parametrize("mode", ["baseline", "all"])
def test_junit_under_expect_baseline_has_no_design_failures_and_no_empty_suites(
    tmp_path: Path, mode: str
) -> None:
    # Before: a green `run --expect baseline --junit` showed every failed design expectation as a <failure>
    # and wrote an empty suite for every section no scenario covers.
    from engram_sync_kit.harness.scenario.report import write_junit

    scenario = parse_scenario(SCENARIO, tmp_path / "c.scenario.yaml")
    result = ScenarioResult(
        scenario,
        "1.20.0",
        expectations=[
            ExpectationResult(0, 29, "baseline", "stderr", "pass"),
            ExpectationResult(1, 32, "design", "stderr", "fail", "no warning on stderr"),
            ExpectationResult(2, 36, "design", "sync_state_targets", "pass"),
        ],
    )
    write_junit(tmp_path / "j.xml", [result], mode)  # type: ignore[arg-type]
    root = ElementTree.parse(tmp_path / "j.xml").getroot()
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert list(suites) == [
        "engram-harness",
        "design invariant (engram 1.20.0)",
        "design §2a (engram 1.20.0)",
    ]
    section = suites["design §2a (engram 1.20.0)"]
    if mode == "baseline":
        assert suites["engram-harness"].get("failures") == "0"
        assert (section.get("failures"), section.get("skipped")) == ("0", "1")
        assert root.find(".//failure") is None
        skipped = section.find("testcase/skipped")
        assert skipped is not None and skipped.get("message") == (
            "design expectation, not judged under --expect baseline: no warning on stderr"
        )
    else:
        assert (section.get("failures"), section.get("skipped")) == ("1", "0")
