"""The typed validate report: one pydantic model that the JSON, the markdown and the HTML are rendered from.

harness.validate builds it; harness.validate_report renders it (a plain dict, such as a JSON file of an
older run, is validated into it first, so nothing is rendered that the model does not allow). The
answers to "why stuck" and "what to run" (stuck, worker, lane health, what_to_run) are required: a report
of a validate from before them is refused, not shown with those answers silently empty.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CanaryFinding(_Model):
    check: str
    severity: str
    target_key: str | None = None
    key: str | None = None
    size: int | None = None
    message: str


class CanarySnapshot(_Model):
    status: str
    headline: str
    findings: list[CanaryFinding] = Field(default_factory=list)


class DoctorCheck(_Model):
    check_id: str | None = None
    result: str | None = None
    severity: str | None = None
    message: str | None = None
    findings: int = 0


class Doctor(_Model):
    status: str
    summary: dict[str, int] = Field(default_factory=dict)
    checks: list[DoctorCheck] = Field(default_factory=list)
    error: str | None = None


class InboxKey(_Model):
    key: str
    count: int
    telemetry: int
    total: int
    oldest: str | None = None
    oldest_age_days: float = 0.0
    entities: dict[str, int] = Field(default_factory=dict)
    cwds: dict[str, int] = Field(default_factory=dict)
    resolved_to: str | None = None
    claim_command: str | None = None
    cwd_claim_commands: dict[str, str] = Field(default_factory=dict)
    hint: str | None = None
    missing_cwds: list[str] = Field(default_factory=list)


class ForeignTarget(_Model):
    target_key: str
    lifecycle: str | None = None
    last_enqueued_seq: int | None = None
    updated_at: str | None = None


class LaneState(_Model):
    lane: str
    acked: int
    waiting: int


class Blocker(_Model):
    seq: int
    project: str
    entity: str
    status: int
    reason: str
    repairable: bool


class LaneHealth(_Model):
    """The canary's lane health (canary.lane_health) of one lane the worker reads."""

    target_key: str
    lifecycle: str | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    pending: int = 0
    blocked: bool = False
    blockers: list[Blocker] = Field(default_factory=list)
    held_back_by_project: dict[str, int] = Field(default_factory=dict)
    way_out: list[str] = Field(default_factory=list)


class LanesHealth(_Model):
    lanes: list[LaneHealth] = Field(default_factory=list)
    enrolled: list[str] = Field(default_factory=list)


class Worker(_Model):
    """engram's own record of its cloud worker (the legacy lane's sync_state)."""

    lifecycle: str | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    pending: int = 0


class StuckRow(_Model):
    lane: str
    project: str
    rows: int
    kind: str  # refused | held back | not enrolled | per-project lane | waiting | other lane
    reason: str
    seqs: list[int] = Field(default_factory=list)


class Migrations(_Model):
    user_version: list[int]
    added: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    added_columns: dict[str, list[str]] = Field(default_factory=dict)


class LaneRow(_Model):
    lane: str
    project: str
    enqueued: int
    acked_before_run: int
    delivered: int
    stranded: int
    refused: int
    lost: int
    duplicated: int


class ProjectRow(_Model):
    project: str
    enqueued: int
    acked_before_run: int
    delivered: int
    stranded: int
    refused: int
    lost: int
    duplicated: int


class Totals(_Model):
    enqueued: int
    acked_before_run: int
    delivered: int
    stranded: int
    refused: int
    lost: int
    duplicated: int


class Refusal(_Model):
    project: str
    rows: int
    attempts: int
    statuses: dict[str, int]
    reasons: list[str] = Field(default_factory=list)


class Tick(_Model):
    tick: int
    seconds: float
    phase: str | None = None
    consecutive_failures: int | None = None
    pushed: int = 0
    accepted: int = 0
    refused: int = 0
    refused_projects: list[str] = Field(default_factory=list)
    last_error: str | None = None
    worker_pending: int = 0


class Run(_Model):
    """One rehearsal: engram's worker on one copy, and the copy read before and after."""

    ticks: list[Tick]
    ended: str
    lanes: list[LaneRow]
    refused: list[Refusal] = Field(default_factory=list)
    unmatched_received: int = 0
    journal_overflow: int = 0
    doctor_before: Doctor
    doctor_after: Doctor
    worker_pending_after: int = 0
    serve_log: str = ""
    seconds: float = 0.0
    timings: dict[str, float] = Field(default_factory=dict)
    canary_before: CanarySnapshot | None = None  # None: the what-if copy is not checked before its run
    canary_after: CanarySnapshot
    inbox_before: list[InboxKey] = Field(default_factory=list)
    inbox_after: list[InboxKey] = Field(default_factory=list)
    foreign_targets_before: list[ForeignTarget] = Field(default_factory=list)
    foreign_targets_after: list[ForeignTarget] = Field(default_factory=list)
    lane_state_before: list[LaneState] = Field(default_factory=list)
    lane_state_after: list[LaneState] = Field(default_factory=list)
    lane_health_before: LanesHealth
    lane_health: LanesHealth
    worker: Worker
    stuck: list[StuckRow]
    migrations: Migrations | None = None
    projects: list[ProjectRow] = Field(default_factory=list)
    totals: Totals


class PlanOutcome(_Model):
    line: int
    command: str
    exit: int
    outcome: str  # applied | empty | refused
    message: str = ""


class EffectGroup(_Model):
    project: str
    entity: str
    rows: int


class Effect(_Model):
    kept_by_preflight: int = 0
    discarded: list[EffectGroup] = Field(default_factory=list)
    discarded_rows: int = 0
    claimed: list[EffectGroup] = Field(default_factory=list)
    claimed_rows: int = 0
    to_deliver: list[EffectGroup] = Field(default_factory=list)
    to_deliver_rows: int = 0
    delivered_in_run: int = 0
    still_waiting: int = 0


class ProofCheck(_Model):
    check: str
    ok: bool
    detail: str


class Proof(_Model):
    ok: bool
    checks: list[ProofCheck]


class WhatIf(_Model):
    plan_source: str
    plan: list[PlanOutcome]
    effect: Effect
    run: Run
    proof: Proof


class Database(_Model):
    path: str
    size_bytes: int
    original_untouched: bool | None = None
    live: bool | None = None


class Engram(_Model):
    binary: str
    version: str


class Options(_Model):
    ticks: int
    allowed_projects: list[str]


class ValidateReport(_Model):
    schema_: str = Field(alias="schema")
    generated_at: str
    database: Database
    engram: Engram
    options: Options
    current: Run
    what_if: WhatIf | None = None
    what_to_run: list[str]
    timings: dict[str, float] = Field(default_factory=dict)
    anonymized: bool = False

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (what --json writes): no field the run did not have."""
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_none=False)
        if self.what_if is None:
            data.pop("what_if")
        if not self.anonymized:
            data.pop("anonymized")
        return data


def as_report(value: ValidateReport | dict[str, Any]) -> ValidateReport:
    """The model itself, or a report dict (a JSON file of a run) validated into it."""
    return value if isinstance(value, ValidateReport) else ValidateReport.model_validate(value)
