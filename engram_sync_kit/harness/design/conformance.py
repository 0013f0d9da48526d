"""How far an engram version is from the design, section by section (`run --expect design`).

Every design expectation names its section (`design_section`). A design expectation that was never
judged (the scenario stopped at a failed step, or the check had nothing to read) counts as failed: the
map must not look better than what was proven. Sections of the design no scenario covers are listed
with 0 passed and 0 failed, so a gap in the library shows as a gap.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from engram_sync_kit.harness.design.sections import DESIGN_SECTIONS, section_order, section_title
from engram_sync_kit.harness.scenario.results import ExpectMode, ScenarioResult

NO_SECTION = "(no section)"


@dataclass
class DesignOutcome:
    """One design expectation of one scenario on one engram version."""

    scenario: str
    line: int
    check: str
    status: str  # pass | fail
    detail: str
    why: str


@dataclass
class SectionConformance:
    section: str
    engram_version: str
    outcomes: list[DesignOutcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status == "pass")

    @property
    def failed(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status != "pass")

    @property
    def verdict(self) -> str:
        if not self.outcomes:
            return "not covered"
        return "pass" if self.failed == 0 else "fail"


def design_outcomes(result: ScenarioResult) -> list[tuple[str, DesignOutcome]]:
    """(section, outcome) for every design expectation of RESULT's scenario, judged or not."""
    judged = {e.index: e for e in result.expectations if e.tag == "design"}
    reason = result.error or (
        f"not judged: step {result.failed_step.index} failed ({result.failed_step.error})"
        if result.failed_step is not None
        else "not judged"
    )
    outcomes: list[tuple[str, DesignOutcome]] = []
    for at in result.scenario.expectations:
        expectation = at.expectation
        if expectation.tag != "design":
            continue
        section = expectation.design_section or NO_SECTION
        seen = judged.get(at.index)
        status = seen.status if seen is not None else "fail"
        detail = (seen.detail if seen is not None else reason) or ""
        outcomes.append(
            (
                section,
                DesignOutcome(result.scenario.id, at.line, expectation.kind, status, detail, expectation.why),
            )
        )
    return outcomes


def conformance(results: Sequence[ScenarioResult]) -> list[SectionConformance]:
    """Per engram version, every design section (covered or not) with its outcomes."""
    grouped: dict[tuple[str, str], SectionConformance] = {}
    versions = list(dict.fromkeys(result.version for result in results))
    for version in versions:
        for section in DESIGN_SECTIONS:
            grouped[(version, section)] = SectionConformance(section, version)
    for result in results:
        for section, outcome in design_outcomes(result):
            key = (result.version, section)
            grouped.setdefault(key, SectionConformance(section, result.version)).outcomes.append(outcome)
    return sorted(
        grouped.values(),
        key=lambda item: (versions.index(item.engram_version), section_order(item.section)),
    )


def conformance_json(results: Sequence[ScenarioResult]) -> list[dict[str, Any]]:
    return [
        {
            "section": item.section,
            "title": section_title(item.section),
            "engram_version": item.engram_version,
            "passed": item.passed,
            "failed": item.failed,
            "verdict": item.verdict,
            "expectations": [
                {
                    "scenario": outcome.scenario,
                    "line": outcome.line,
                    "check": outcome.check,
                    "status": outcome.status,
                    "detail": outcome.detail,
                }
                for outcome in item.outcomes
            ],
        }
        for item in conformance(results)
    ]


_STYLE = {"pass": "green", "fail": "red", "not covered": "yellow"}


def conformance_table(results: Sequence[ScenarioResult]) -> Table:
    table = Table(title="design conformance (per design section)", title_justify="left")
    for column in (
        "engram",
        "section",
        "result",
        "passed",
        "failed",
        "what the design asks",
        "first failure",
    ):
        table.add_column(column)
    for item in conformance(results):
        first = next((o for o in item.outcomes if o.status != "pass"), None)
        table.add_row(
            item.engram_version,
            item.section,
            f"[{_STYLE[item.verdict]}]{item.verdict}[/]",
            str(item.passed),
            str(item.failed),
            section_title(item.section),
            f"{first.scenario}:{first.line} {first.detail}"[:160] if first else "",
        )
    return table


def junit_suites(
    parent: ElementTree.Element, results: Sequence[ScenarioResult], mode: ExpectMode = "all"
) -> None:
    """One <testsuite> per design section and version that has design expectations, one <testcase> per
    expectation. Under --expect baseline design expectations decide nothing, so a failed one is a
    <skipped> testcase that says so, never a <failure> in a green run."""
    for item in conformance(results):
        if not item.outcomes:
            continue  # a section no scenario covers: no empty suite
        judged = mode != "baseline"
        suite = ElementTree.SubElement(
            parent,
            "testsuite",
            name=f"design {item.section} (engram {item.engram_version})",
            tests=str(len(item.outcomes)),
            failures=str(item.failed if judged else 0),
            errors="0",
            skipped=str(0 if judged else item.failed),
        )
        for outcome in item.outcomes:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"design.{item.section}.{item.engram_version}",
                name=f"{outcome.scenario}:{outcome.line} {outcome.check}",
            )
            if outcome.status == "pass":
                continue
            if judged:
                failure = ElementTree.SubElement(case, "failure", message=outcome.detail[:500] or "failed")
                failure.text = f"{outcome.why}\n{outcome.detail}".strip()
            else:
                message = f"design expectation, not judged under --expect baseline: {outcome.detail}"
                ElementTree.SubElement(case, "skipped", message=message[:500])
