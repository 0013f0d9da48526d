"""The design-surface steps on the real engram v1.20.0 (issue 14): what v1.20 has is proven with v1.20
(its MCP save answer, the CLI's stderr, `cloud status`, enroll's output, the doctor's verdicts), what it
lacks is skipped (`engram cloud inbox`) or fails with the reason, never passes by accident."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.scenario.loader import load_scenario
from engram_sync_kit.harness.scenario.runner import run_scenario

pytestmark = pytest.mark.engram

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios"


def test_the_surfaces_scenario_pins_v120_and_maps_what_is_missing(tmp_path: Path, engram_bin: Path) -> None:
    scenario = load_scenario(LIBRARY / "inbox-surfaces-save-status-commands.scenario.yaml")
    result = run_scenario(scenario, engram_bin, root=tmp_path / "world")
    steps = {step.index: (step.name, step.status, step.error) for step in result.steps}
    assert [status for _, status, _ in steps.values()] == [
        "ok", "ok", "ok", "ok", "skipped", "ok", "skipped", "skipped", "ok",
    ]  # fmt: skip
    assert steps["5"][2].startswith(
        "engram 1.20.0 has no `engram cloud inbox` (design §3): `engram cloud` lists"
    )
    baseline = [e for e in result.expectations if e.tag == "baseline"]
    assert baseline  # else "every baseline passed" holds of nothing
    assert [(e.line, e.status, e.detail) for e in baseline if e.status != "pass"] == []
    answer = result.evidence["results"]["save:mcp-noise"]["answer"]
    assert answer["project_source"] == "dir_basename" and "routed_to" not in answer
    design = {e.line: (e.status, e.detail) for e in result.expectations if e.tag == "design"}
    assert all(status == "fail" for status, _ in design.values()), design
    details = [detail for _, detail in design.values()]
    assert (
        "save mcp-noise: the answer has no routed_to (fields: id, judgment_required, project, project_path, "
        "project_source, result, state, sync_id)" in details[0]
    )
    assert details[1] == (
        "save cli-noise: expected an inbox warning in its stderr, got none; "
        'save cli-noise: no `warning: saved to inbox: "<key>" (cwd <path>)` in its stderr'
    )
    assert any(
        d.startswith("cloud status printed no `inbox: N memories in K unenrolled keys` line") for d in details
    )
    assert any(
        d.startswith('enroll enrolled: no `-> N memories of "P" waiting in the inbox.` line') for d in details
    )
    assert any(
        d.startswith("inbox-list: the step did not run: engram 1.20.0 has no `engram cloud inbox`")
        for d in details
    )
    assert any(d.startswith('save cli-noise: no row on cloud:inbox (its rows: cloud/"")') for d in details)
    assert any(
        d.startswith("doctor has no inbox_depth check (checks: manual_session_name_project_mismatch")
        for d in details
    )
