"""check's text, as cron mails it, is capped like the textfile (issue 35, item 13): the 20 most urgent
findings, then one line with how many were left out. Failed first: 10k targets printed 3.2 MB."""

from __future__ import annotations

import pytest

from engram_sync_kit.canary.checks import CheckResult
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.report import TEXT_MAX_FINDINGS, TEXTFILE_MAX_ITEMIZED, render_text

pytestmark = pytest.mark.unit


def _result(warnings: int, critical: int = 0) -> CheckResult:
    findings = [
        Finding(
            check="foreign_sync_target",
            severity="warning",
            message=f"sync target cloud:p{number:03d} is outside",
            target_key=f"cloud:p{number:03d}",
            size=1,
        )
        for number in range(warnings)
    ]
    findings += [
        Finding(check="legacy_lane_blocked", severity="critical", message=f"blocked {n}", target_key="cloud")
        for n in range(critical)
    ]
    return CheckResult(status="critical", db="/x/engram.db", checked_at="t", findings=findings)


def _finding_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("[NEW]")]


def test_the_cap_is_the_textfiles() -> None:
    assert TEXT_MAX_FINDINGS == TEXTFILE_MAX_ITEMIZED == 20


def test_twenty_findings_are_all_listed_without_a_left_out_line() -> None:
    text = render_text(_result(20), CanaryConfig())
    assert len(_finding_lines(text)) == 20
    assert "left out" not in text


def test_the_twenty_first_is_left_out_and_counted() -> None:
    text = render_text(_result(21), CanaryConfig())
    assert len(_finding_lines(text)) == 20
    assert "cloud:p020" not in text  # the last by the textfile's ranking (same size: by identity)
    assert text.splitlines()[-2] == (
        "... and 1 more finding left out, the least urgent "
        "(the text lists the 20 most urgent; --format json lists every finding)"
    )


def test_the_most_urgent_stay_and_the_text_stays_small_at_10k() -> None:
    result = _result(10_000, critical=1)
    text = render_text(result, CanaryConfig())
    assert "[NEW] critical legacy_lane_blocked: blocked 0" in text
    assert "... and 9981 more findings left out, the least urgent" in text
    assert len(text.encode()) < 8_000
