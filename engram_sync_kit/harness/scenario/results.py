"""What a scenario run produced: its step records, its judged expectations and its verdict.

The runner fills these; checks, the report and the CLIs read them, so none of them imports the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.loader import Scenario

ExpectMode = Literal["baseline", "design", "all"]


@dataclass
class StepRecord:
    index: str
    name: str
    line: int
    text: str
    status: str  # ok | failed | skipped
    seconds: float
    error: str = ""
    device: str = ""


@dataclass(frozen=True)
class StepMarks:
    """Where a labelled step started and ended, in the cloud journal (entry ids) and the output log."""

    journal_before: int
    journal_after: int
    output_before: int
    output_after: int


@dataclass
class ExpectationResult:
    index: int
    line: int
    tag: str
    kind: str
    status: str  # pass | fail | n/a
    detail: str = ""
    why: str = ""
    expected_rows: list[dict[str, Any]] = field(default_factory=list)
    #: the expectation's `engram:` range ("" when it applies to every version)
    engram_range: str = ""


@dataclass
class ScenarioResult:
    scenario: Scenario
    #: the version the expectations' `engram:` ranges were judged against (--engram-version-as, else
    #: what the binary reports)
    version: str
    status: str = "passed"  # passed | failed | error
    steps: list[StepRecord] = field(default_factory=list)
    expectations: list[ExpectationResult] = field(default_factory=list)
    lanes: LaneTable = field(default_factory=LaneTable)
    sync_state_targets: list[str] = field(default_factory=list)
    stderr: str = ""
    journal_excerpt: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    root: str = ""
    #: the fake cloud's base URL this run talked to (https unless the scenario asks for plain http)
    cloud_url: str = ""
    sync_state: list[dict[str, Any]] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    kept: bool = False
    #: the verdict per expect mode, recorded once the run is over (see record_verdicts)
    verdicts: dict[str, str] = field(default_factory=dict)
    #: what `engram version` printed, when --engram-version-as named another version ("" otherwise)
    reported_version: str = ""
    #: the engram binary this run played against
    binary: str = ""

    @property
    def failed_step(self) -> StepRecord | None:
        return next((step for step in self.steps if step.status == "failed"), None)

    def selected(self, mode: ExpectMode) -> list[ExpectationResult]:
        return [e for e in self.expectations if mode == "all" or e.tag == mode or e.tag == "invariant"]

    def judged(self, mode: ExpectMode) -> bool:
        """Whether one of MODE's own expectations applied to this engram and was judged (pass or fail).

        The built-in invariant does not count: it holds for every version, so a binary whose version no
        `engram:` range covers would pass on it alone."""
        return any(e.status in ("pass", "fail") for e in self.selected(mode) if e.tag != "invariant")

    def record_verdicts(self) -> None:
        """Judge every expect mode once; the runner calls this when nothing about the run changes any more."""
        self.verdicts = {mode: self._judged(mode) for mode in get_args(ExpectMode)}

    def verdict(self, mode: ExpectMode) -> str:
        """passed / failed / error for MODE's expectations (design failures are reported either way)."""
        recorded = self.verdicts.get(mode)
        return recorded if recorded is not None else self._judged(mode)

    def _judged(self, mode: ExpectMode) -> str:
        if self.status in ("error", "failed"):
            return self.status
        return "failed" if any(e.status == "fail" for e in self.selected(mode)) else "passed"


def unjudged_reason(result: ScenarioResult, mode: ExpectMode) -> str:
    """Why a scenario that passed judged nothing ("" when something was judged, or it did not pass)."""
    if result.verdict(mode) != "passed" or result.judged(mode):
        return ""
    ranges = sorted({e.engram_range for e in result.selected(mode) if e.status == "n/a" and e.engram_range})
    if not ranges:
        return f"{result.scenario.id} has no {mode} expectation"
    return f"{result.scenario.id}: every {mode} expectation is for engram {' or '.join(ranges)}"


def unjudged_failure(
    results: list[ScenarioResult], mode: ExpectMode, *, version_option: str, allow_option: str
) -> str:
    """One line for a run in which scenarios passed with nothing judged ("" when there were none)."""
    unjudged = [result for result in results if unjudged_reason(result, mode)]
    if not unjudged:
        return ""
    versions = sorted({result.version for result in unjudged})
    reasons = "; ".join(unjudged_reason(result, mode) for result in unjudged)
    return (
        f"{len(unjudged)} scenario(s) judged nothing on engram {', '.join(versions)} ({reasons}): "
        f"name the version under test with {version_option} VERSION (e.g. {version_option} 1.20.0 for "
        f"an untagged build of v1.20.0's source), or pass {allow_option} to accept it"
    )


def judge(result: ScenarioResult, mode: ExpectMode) -> str:
    """RESULT's verdict for MODE (ScenarioResult.verdict)."""
    return result.verdict(mode)
