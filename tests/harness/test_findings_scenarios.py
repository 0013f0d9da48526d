"""The scenarios of docs/findings/ (engram bugs explore found that no filed issue was found to cover): each
loads, pins today's behaviour with baseline expectations and the fix with a design one, and replays as a
passing baseline on the real engram v1.20.0 (marker: engram; the chunk path, a few seconds each) while its
design expectation fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.harness.scenario.loader import load_scenario

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings"
SCENARIOS = sorted(FINDINGS.glob("*.scenario.yaml"))
HARNESS = str(Path(sys.executable).parent / "engram-harness")


def test_every_finding_has_its_scenario_and_each_scenario_its_report() -> None:
    reports = {path.name.removesuffix(".md") for path in FINDINGS.glob("*.md")} - {"README"}
    assert reports == {path.name.removesuffix(".scenario.yaml") for path in SCENARIOS} != set()
    readme = (FINDINGS / "README.md").read_text(encoding="utf-8")
    assert all(f"{name}.md" in readme for name in reports)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.name)
def test_a_finding_scenario_pins_the_bug_as_baseline_and_the_fix_as_design(path: Path) -> None:
    tags = [at.expectation.tag for at in load_scenario(path).expectations]
    assert "baseline" in tags and "design" in tags


@pytest.mark.engram
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda path: path.name)
def test_a_finding_replays_on_the_real_engram(engram_bin: Path, path: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [
            HARNESS,
            "run",
            str(path),
            "--engram",
            str(engram_bin),
            "--expect",
            "all",
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the design expectation fails today
    (scenario,) = json.loads(report_path.read_text(encoding="utf-8"))["scenarios"]
    assert scenario["error"] == "" and scenario["engram_version"] == "1.20.0"
    statuses = {(check["tag"], check["status"]) for check in scenario["expectations"]}
    assert ("baseline", "pass") in statuses and ("design", "fail") in statuses
    assert ("baseline", "fail") not in statuses and ("design", "pass") not in statuses, statuses
