"""The typed validate report: one pydantic model that the JSON, the markdown and the HTML are rendered from.

harness.validate builds it part by part; harness.validate_report renders only the model (a JSON file of a
run goes through as_report first, so nothing is rendered that the model does not allow). The
answers to "why stuck" and "what to run" (stuck, worker, lane health, what_to_run) are required: a report
of a validate from before them is refused, not shown with those answers silently empty.

Every string of the report carries, in its type, what --anonymize does with it (Hide, below):
harness.validate_anonymize transforms the model by these marks, and a string without one is refused
there and by a test that walks every field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from types import NoneType, UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field


class Hide(Enum):
    """What --anonymize does with one string of the report."""

    NAME = "name"  # a name of the tester's (project, inbox key, cwd, sync target): hashed whole
    LANE = "lane"  # a lane: `cloud` stays, `cloud:<project>` keeps its prefix and hashes the project
    TEXT = "text"  # free text (engram's, the cloud's, the canary's, a command): known names, paths and
    # double-quoted values inside it hashed
    PATH = "path"  # the tester's database path: hashed
    PROGRAM = "program"  # the engram binary's path: the word `engram`
    PLAN_FILE = "plan file"  # the tester's plan file name, hashed; validate's own `suggested` stays
    QUOTES_ROWS = "quotes rows"  # free text that can quote a row's title or content: left out (emptied)
    KIT = "kit"  # words of engram or the kit, never the tester's: statuses, kinds, check ids, entity
    # names, schema objects, times, versions


Name = Annotated[str, Hide.NAME]
Lane = Annotated[str, Hide.LANE]
Text = Annotated[str, Hide.TEXT]
Word = Annotated[str, Hide.KIT]


def string_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Hide | None]]:
    """Every place a string can sit in MODEL (field path, with [] for a list item and {} / {}= for a
    dict's key / value), and its Hide mark (None: no decision was made)."""
    for name, info in model.model_fields.items():
        marks = [mark for mark in info.metadata if isinstance(mark, Hide)]
        yield from _strings(info.annotation, f"{prefix}{name}", marks[0] if marks else None)


def _strings(annotation: Any, path: str, mark: Hide | None) -> Iterator[tuple[str, Hide | None]]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        marks = [item for item in args[1:] if isinstance(item, Hide)]
        yield from _strings(args[0], path, marks[0] if marks else mark)
    elif origin in (Union, UnionType):
        for arg in args:
            yield from _strings(arg, path, mark)
    elif origin is list:
        yield from _strings(args[0], path + "[]", None)
    elif origin is dict:
        yield from _strings(args[0], path + "{}", None)
        yield from _strings(args[1], path + "{}=", None)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from string_fields(annotation, path + ".")
    elif annotation is str:
        yield path, mark
    elif annotation not in (int, float, bool, NoneType):
        raise TypeError(f"{path}: a type --anonymize cannot walk: {annotation!r}")


Model = TypeVar("Model", bound=BaseModel)
Rewrite = Callable[[str, Hide], str]


def rewrite_strings(model: Model, rewrite: Rewrite) -> Model:
    """A copy of MODEL with every string replaced by rewrite(string, its Hide mark); dict keys too."""
    changed = {
        name: _rewrite(getattr(model, name), info.annotation, _mark(info.metadata), rewrite, name)
        for name, info in type(model).model_fields.items()
    }
    return model.model_copy(update=changed)


def _mark(metadata: Sequence[Any]) -> Hide | None:
    return next((item for item in metadata if isinstance(item, Hide)), None)


def _rewrite(value: Any, annotation: Any, mark: Hide | None, rewrite: Rewrite, path: str) -> Any:
    origin, args = get_origin(annotation), get_args(annotation)
    if value is None:
        return None
    if origin is Annotated:
        return _rewrite(value, args[0], _mark(args[1:]) or mark, rewrite, path)
    if origin in (Union, UnionType):
        (inner,) = (arg for arg in args if arg is not NoneType)  # the model's unions are `X | None`
        return _rewrite(value, inner, mark, rewrite, path)
    if origin is list:
        return [_rewrite(item, args[0], None, rewrite, path + "[]") for item in value]
    if origin is dict:
        return {
            _rewrite(k, args[0], None, rewrite, path + "{}"): _rewrite(
                v, args[1], None, rewrite, path + "{}="
            )
            for k, v in value.items()
        }
    if isinstance(value, BaseModel):
        return rewrite_strings(value, rewrite)
    if isinstance(value, str):
        if mark is None:
            raise TypeError(f"{path}: a string without a Hide mark (what does --anonymize do with it?)")
        return rewrite(value, mark)
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CanaryFinding(_Model):
    check: Word
    severity: Word
    target_key: Name | None = None
    key: Name | None = None  # an inbox key
    size: int | None = None
    message: Text


class CanarySnapshot(_Model):
    status: Word
    headline: Text
    findings: list[CanaryFinding] = Field(default_factory=list)


class DoctorCheck(_Model):
    check_id: Word | None = None
    result: Word | None = None
    severity: Word | None = None
    message: Text | None = None
    findings: int = 0


class Doctor(_Model):
    status: Word
    summary: dict[Word, int] = Field(default_factory=dict)
    checks: list[DoctorCheck] = Field(default_factory=list)
    error: Text | None = None


class InboxKey(_Model):
    key: Name
    count: int
    telemetry: int
    total: int
    oldest: Word | None = None  # a time
    oldest_age_days: float = 0.0
    entities: dict[Word, int] = Field(default_factory=dict)
    cwds: dict[Name, int] = Field(default_factory=dict)
    resolved_to: Name | None = None
    claim_command: Text | None = None
    cwd_claim_commands: dict[Name, Text] = Field(default_factory=dict)
    hint: Text | None = None
    missing_cwds: list[Name] = Field(default_factory=list)


class ForeignTarget(_Model):
    target_key: Name
    lifecycle: Word | None = None
    last_enqueued_seq: int | None = None
    updated_at: Word | None = None  # a time


class LaneState(_Model):
    lane: Lane
    acked: int
    waiting: int


class Blocker(_Model):
    seq: int
    project: Name
    entity: Word
    status: int
    reason: Text
    repairable: bool


class LaneHealth(_Model):
    """The canary's lane health (canary.lane_health) of one lane the worker reads."""

    target_key: Name
    lifecycle: Word | None = None
    last_error: Text | None = None
    consecutive_failures: int = 0
    pending: int = 0
    blocked: bool = False
    blockers: list[Blocker] = Field(default_factory=list)
    held_back_by_project: dict[Name, int] = Field(default_factory=dict)
    way_out: list[Text] = Field(default_factory=list)


class LanesHealth(_Model):
    lanes: list[LaneHealth] = Field(default_factory=list)
    enrolled: list[Name] = Field(default_factory=list)


class Worker(_Model):
    """engram's own record of its cloud worker (the legacy lane's sync_state)."""

    lifecycle: Word | None = None
    last_error: Text | None = None
    consecutive_failures: int = 0
    pending: int = 0


class StuckRow(_Model):
    lane: Lane
    project: Name
    rows: int
    kind: Word  # refused | held back | not enrolled | per-project lane | waiting | other lane
    reason: Text
    seqs: list[int] = Field(default_factory=list)


class Migrations(_Model):
    user_version: list[int]
    added: list[Word] = Field(default_factory=list)  # schema objects: engram's
    dropped: list[Word] = Field(default_factory=list)
    changed: list[Word] = Field(default_factory=list)
    added_columns: dict[Word, list[Word]] = Field(default_factory=dict)


class LaneRow(_Model):
    lane: Lane
    project: Name
    enqueued: int
    acked_before_run: int
    delivered: int
    stranded: int
    refused: int
    lost: int
    duplicated: int


class ProjectRow(_Model):
    project: Name
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
    project: Name
    rows: int
    attempts: int
    statuses: dict[Word, int]
    reasons: list[Text] = Field(default_factory=list)


class Tick(_Model):
    tick: int
    seconds: float
    phase: Word | None = None
    consecutive_failures: int | None = None
    pushed: int = 0
    accepted: int = 0
    refused: int = 0
    refused_projects: list[Name] = Field(default_factory=list)
    last_error: Text | None = None
    worker_pending: int = 0


class Run(_Model):
    """One rehearsal: engram's worker on one copy, and the copy read before and after."""

    ticks: list[Tick]
    ended: Word  # idle | stalled | tick limit
    lanes: list[LaneRow]
    refused: list[Refusal] = Field(default_factory=list)
    unmatched_received: int = 0
    journal_overflow: int = 0
    doctor_before: Doctor
    doctor_after: Doctor
    worker_pending_after: int = 0
    serve_log: Annotated[str, Hide.QUOTES_ROWS] = ""
    seconds: float = 0.0
    timings: dict[Word, float] = Field(default_factory=dict)
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
    command: Text
    exit: int
    outcome: Word  # applied | empty | refused
    message: Annotated[str, Hide.QUOTES_ROWS] = ""


class EffectGroup(_Model):
    project: Name
    entity: Word
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
    check: Word
    ok: bool
    detail: Text


class Proof(_Model):
    ok: bool
    checks: list[ProofCheck]


class WhatIf(_Model):
    plan_source: Annotated[str, Hide.PLAN_FILE]
    plan: list[PlanOutcome]
    effect: Effect
    run: Run
    proof: Proof


class Database(_Model):
    path: Annotated[str, Hide.PATH]
    size_bytes: int
    original_untouched: bool | None = None
    live: bool | None = None


class Engram(_Model):
    binary: Annotated[str, Hide.PROGRAM]
    version: Word


class Options(_Model):
    ticks: int
    allowed_projects: list[Name]


class ValidateReport(_Model):
    schema_: Word = Field(alias="schema")
    generated_at: Word
    database: Database
    engram: Engram
    options: Options
    current: Run
    what_if: WhatIf | None = None
    what_to_run: list[Text]
    timings: dict[Word, float] = Field(default_factory=dict)
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
