"""What a scenario run produced: its step records, its judged expectations and its verdict.

The runner fills these; checks, the report and the CLIs read them, so none of them imports the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.loader import Scenario

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


@dataclass
class ScenarioResult:
    scenario: Scenario
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

    @property
    def failed_step(self) -> StepRecord | None:
        return next((step for step in self.steps if step.status == "failed"), None)

    def selected(self, mode: ExpectMode) -> list[ExpectationResult]:
        return [e for e in self.expectations if mode == "all" or e.tag == mode or e.tag == "invariant"]

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


def judge(result: ScenarioResult, mode: ExpectMode) -> str:
    """RESULT's verdict for MODE (ScenarioResult.verdict)."""
    return result.verdict(mode)
