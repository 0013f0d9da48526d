"""A reviewer's findings on the harness (issues 14, 15, 17, 19), each pinned by a test that failed first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.validate import cli as validate_cli
from engram_sync_kit.harness.validate.model import ValidateReport, as_report
from engram_sync_kit.harness.validate.run import ValidateOptions

SAMPLE = Path(__file__).parent / "data" / "validate-report.json"


def _sample(
    *, lost: int = 0, duplicated: int = 0, proof_ok: bool = True, what_if: bool = True
) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(SAMPLE.read_text(encoding="utf-8"))
    report["current"]["totals"].update(lost=lost, duplicated=duplicated)
    report["current"]["lanes"][0].update(lost=lost, duplicated=duplicated)
    if what_if:
        report["what_if"]["proof"]["ok"] = proof_ok
        for check in report["what_if"]["proof"]["checks"]:
            check["ok"] = proof_ok or check["check"] != "no new refusals"
    else:
        report.pop("what_if")
    return report


@pytest.mark.parametrize(
    ("shape", "code"),
    [
        ({}, 0),
        ({"what_if": False}, 0),
        ({"lost": 2}, 3),
        ({"duplicated": 1}, 3),
        ({"proof_ok": False}, 3),
    ],
    ids=["clean", "no-what-if", "lost", "duplicated", "plan-fails-its-proof"],
)
def test_validate_exits_3_when_the_report_finds_loss_or_a_plan_that_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: dict[str, Any], code: int
) -> None:
    # Issue 15 asks "is anything lost?" and for proof that the plan blocks nothing; a beta tester's
    # script (or CI) can only act on the answer through the exit status, which was 0 whatever it said.
    def fake_validate(options: ValidateOptions, progress: Any = None) -> ValidateReport:
        return as_report(_sample(**shape))

    monkeypatch.setattr(validate_cli, "validate", fake_validate)
    db, binary = tmp_path / "engram.db", tmp_path / "engram"
    db.write_bytes(b"")
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    result = CliRunner(mix_stderr=False).invoke(
        cli, ["validate", "--db", str(db), "--engram", str(binary), "-q"]
    )
    assert result.exit_code == code, result.output
    assert result.stdout.startswith("### engram ")  # the markdown summary is printed either way
    said = {0: "", 3: "engram-harness validate: "}[code]
    assert result.stderr.startswith(said) and len(result.stderr.splitlines()) == (code == 3)
