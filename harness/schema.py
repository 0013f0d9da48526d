"""The scenario format: typed models, validated on load, with unknown keys rejected.

A scenario file holds one scenario: a header (name, tags, cloud, workspaces), a list of steps, each a
mapping with exactly one step name as its key, and a list of expectations, each tagged `baseline` (what
an engram version does today, within a version range) or `design` (what the seed's design requires).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

SCHEMA_ID = "engram-harness/scenario/v1"
LANE_COUNTS = ("enqueued", "acked", "delivered", "stranded", "lost", "duplicated")

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shorthand(Strict):
    """A step body that may also be written as a bare scalar: `enroll: my-app`."""

    shorthand: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _expand_scalar(cls, value: Any) -> Any:
        if cls.shorthand and isinstance(value, str | int | float):
            return {cls.shorthand: str(value)}
        return value


# ─── Header ──────────────────────────────────────────────────────────────────


class CloudSpec(Strict):
    """The fake cloud of this scenario and the credentials engram is given for it."""

    token: str | None = Field("harness-token", description="Token the fake cloud requires (null: no auth).")
    engram_token: str | None = Field(
        None, description="Token engram sends, when it must differ from `token` (an auth failure)."
    )
    allowed_projects: list[str] = Field(default_factory=lambda: ["*"], description="Server allowlist.")
    autosync: bool = Field(
        True, description="Run `engram serve` with ENGRAM_CLOUD_AUTOSYNC=1 from the scenario's start."
    )


class WorkspaceSpec(Strict):
    """One working directory. Exactly one of git / dir / home / named_like_home / root."""

    git: str | None = Field(None, description="A git repository whose root directory has this name.")
    remote: str | None = Field(None, description="origin URL of the git repo (engram derives git_remote).")
    dir: str | None = Field(None, description="A plain directory (not a repo) with this name.")
    home: bool = Field(False, description="The user's HOME directory itself.")
    named_like_home: bool = Field(False, description="A non-repo dir whose basename equals HOME's basename.")
    root: bool = Field(False, description="The filesystem root /.")
    subdir: str | None = Field(None, description="Work from this relative subdirectory inside it.")
    parent: str | None = Field(None, description="Create it inside this other workspace instead.")

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> WorkspaceSpec:
        kinds = [
            name
            for name, chosen in (
                ("git", self.git is not None),
                ("dir", self.dir is not None),
                ("home", self.home),
                ("named_like_home", self.named_like_home),
                ("root", self.root),
            )
            if chosen
        ]
        if len(kinds) != 1:
            raise ValueError(
                f"a workspace needs exactly one of git, dir, home, named_like_home, root (got {kinds or 'none'})"
            )
        if self.remote is not None and self.git is None:
            raise ValueError("remote is only allowed with git")
        return self


# ─── Steps ───────────────────────────────────────────────────────────────────

Via = Literal["mcp", "cli", "http"]


class StepBase(Strict):
    expect_error: str | None = Field(
        None, description="The step must fail, and its error must contain this text."
    )
    if_unsupported: Literal["fail", "skip"] = Field(
        "fail", description="What to do when this engram version has no interface for the step."
    )


class SessionStep(StepBase):
    """Start a session (telemetry) from a workspace."""

    id: str
    project: str | None = Field(None, description="Designated project; omitted: derived from the cwd (mcp).")
    in_: str | None = Field(None, alias="in", description="Workspace the session runs in.")
    via: Literal["http", "mcp"] = "http"
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class EndSessionStep(StepBase, Shorthand):
    shorthand: ClassVar[str] = "id"
    id: str
    summary: str = ""


class SaveStep(StepBase):
    """Save an observation."""

    title: str
    content: str
    in_: str | None = Field(None, alias="in", description="Workspace (cwd) the save happens from.")
    project: str | None = Field(None, description="Explicit project designation; omitted: none given.")
    session: str | None = Field(None, description="Session id to save under (http requires it).")
    type: str = "manual"
    topic_key: str | None = None
    via: Via = Field(
        "mcp", description="mcp: `engram mcp` mem_save; cli: `engram save`; http: POST /observations"
    )
    as_: str | None = Field(None, alias="as", description="Label to refer to this observation later.")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PromptStep(StepBase):
    session: str
    content: str
    project: str | None = None
    in_: str | None = Field(None, alias="in")
    via: Literal["http", "mcp"] = "http"
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class EnrollStep(StepBase, Shorthand):
    shorthand: ClassVar[str] = "project"
    project: str


class UnenrollStep(EnrollStep):
    pass


class AliasStep(StepBase):
    """Map a derived key, or a workspace's cwd, to a project (the design's alias map, §4)."""

    key: str | None = None
    cwd: str | None = Field(None, description="A workspace name.")
    project: str

    @model_validator(mode="after")
    def _one_source(self) -> AliasStep:
        if (self.key is None) == (self.cwd is None):
            raise ValueError("alias needs exactly one of key or cwd")
        return self


class RelateStep(StepBase):
    a: str = Field(description="Label of the first observation (save ... as:).")
    b: str
    relation: Literal["related", "compatible", "scoped", "conflicts_with", "supersedes", "not_conflict"] = (
        "related"
    )
    confidence: float = 0.9
    reasoning: str = "scenario relation"


class ReenqueueStep(StepBase, Shorthand):
    """Enqueue an observation again without changing it."""

    shorthand: ClassVar[str] = "of"
    of: str
    how: Literal["update", "copy_row"] = Field(
        "update",
        description="update: PATCH it with identical fields; copy_row: simulated legacy data, a byte-identical "
        "copy of its latest sync_mutations row",
    )


class ReviseStep(StepBase):
    of: str
    content: str | None = None
    title: str | None = None


class Fault(Strict):
    route: Literal["mutations_push", "mutations_pull", "chunk_push", "chunk_pull", "any"] = "any"
    project: str | None = None
    times: int = Field(1, ge=1)
    action: Literal["status", "latency", "reset_after_read", "short_accepted", "hang"] = "status"
    status: int = 503
    latency_ms: int = 200
    keep: int = 0
    seconds: float = 5


class CloudStep(StepBase):
    allowlist: list[str] | None = None
    pause: str | None = None
    resume: str | None = None
    faults: list[Fault] | None = None
    clear_faults: bool = False

    @model_validator(mode="after")
    def _something(self) -> CloudStep:
        if not any(
            (self.allowlist is not None, self.pause, self.resume, self.faults is not None, self.clear_faults)
        ):
            raise ValueError("cloud needs one of allowlist, pause, resume, faults, clear_faults")
        return self


class UntilReceived(Strict):
    received: int = Field(ge=0, description="Wait until the cloud has stored this many mutations ...")
    match: dict[str, str] = Field(default_factory=dict, description="... matching these fields.")


class SyncStep(StepBase, Shorthand):
    """One sync: an autosync cycle of `engram serve`, or a manual `engram sync --cloud --project P`."""

    shorthand: ClassVar[str] = "via"
    via: Literal["autosync", "manual"] = "autosync"
    project: str | None = Field(None, description="manual only: the --project of engram sync --cloud.")
    in_: str | None = Field(None, alias="in", description="manual only: the cwd.")
    cycles: int = Field(1, ge=1, description="autosync: completed cycles to wait for.")
    until: UntilReceived | None = Field(None, description="autosync: wait for the cloud instead of cycles.")
    timeout: float = Field(0, ge=0, description="Seconds; 0 means 45 per cycle.")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _manual_needs_project(self) -> SyncStep:
        if self.via == "manual" and not self.project:
            raise ValueError("sync via manual needs project (engram sync --cloud requires --project)")
        return self


class DaemonStep(StepBase, Shorthand):
    shorthand: ClassVar[str] = "action"
    action: Literal["restart", "stop", "start"]


class CanaryStep(StepBase):
    as_: str = Field("canary", alias="as")
    no_baseline: bool = True
    config: dict[str, Any] | None = Field(None, description="Written to a file passed as --config.")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class InboxStep(StepBase):
    as_: str = Field("inbox", alias="as")
    aliases: dict[str, Any] | None = Field(None, description="Written to a file passed as --aliases.")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DoctorStep(StepBase):
    as_: str = Field("doctor", alias="as")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RunStep(StepBase):
    """Any engram command line (the escape hatch, still the real binary)."""

    args: list[str]
    in_: str | None = Field(None, alias="in")
    exit: int | None = Field(0, description="Required exit code; null accepts any.")
    as_: str | None = Field(None, alias="as", description="Keep exit code and output for a `command` check.")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TimeTravelStep(StepBase):
    """SIMULATES LEGACY DATA: shifts stored timestamps back, since engram has no clock to set."""

    days: float = Field(gt=0)
    tables: list[Literal["sync_mutations", "sessions", "observations", "user_prompts"]] = Field(
        default_factory=lambda: ["sync_mutations", "sessions", "observations", "user_prompts"]
    )
    project: str | None = Field(None, description="Only rows of this project column.")


class LegacyRow(Strict):
    entity: Literal["session", "observation", "prompt", "relation"] = "observation"
    entity_key: str
    op: Literal["upsert", "delete"] = "upsert"
    project: str = ""
    target_key: str = "cloud"
    payload: dict[str, Any] = Field(default_factory=dict)
    acked: bool = False
    age_days: float = 0


class LegacyRowsStep(StepBase):
    """SIMULATES LEGACY DATA: inserts rows into sync_mutations (and their sync_state row) directly."""

    rows: list[LegacyRow] = Field(min_length=1)


class RepeatStep(Strict):
    times: int = Field(ge=1, le=100_000)
    steps: list[dict[str, Any]] = Field(min_length=1, description="Steps; '{i}' in a string is the index.")


STEP_MODELS: dict[str, type[BaseModel]] = {
    "session": SessionStep,
    "end_session": EndSessionStep,
    "save": SaveStep,
    "prompt": PromptStep,
    "enroll": EnrollStep,
    "unenroll": UnenrollStep,
    "alias": AliasStep,
    "relate": RelateStep,
    "reenqueue": ReenqueueStep,
    "revise": ReviseStep,
    "cloud": CloudStep,
    "sync": SyncStep,
    "daemon": DaemonStep,
    "canary": CanaryStep,
    "inbox": InboxStep,
    "doctor": DoctorStep,
    "run": RunStep,
    "time_travel": TimeTravelStep,
    "legacy_rows": LegacyRowsStep,
    "repeat": RepeatStep,
}


# ─── Expectations ────────────────────────────────────────────────────────────


class LaneRow(Strict):
    lane: str = Field(description="sync_mutations.target_key, e.g. cloud or cloud:my-app.")
    project: str = Field(description="sync_mutations.project ('' for none).")
    enqueued: int | None = None
    acked: int | None = None
    delivered: int | None = None
    stranded: int | None = None
    lost: int | None = None
    duplicated: int | None = None


class LanesCheck(Strict):
    rows: list[LaneRow]
    exact: bool = Field(False, description="No other lane/project row may exist.")


class SetCheck(Strict):
    equals: list[str] | None = None
    includes: list[str] = Field(default_factory=list)
    excludes: list[str] = Field(default_factory=list)


class FindingMatch(Strict):
    check: str
    severity: Literal["warning", "critical"] | None = None
    target_key: str | None = None
    key: str | None = None


class CanaryCheck(Strict):
    of: str = Field("canary", description="Which canary step's result (its `as`).")
    status: Literal["ok", "warning", "critical", "unknown"] | None = None
    findings_include: list[FindingMatch] = Field(default_factory=list)
    findings_exclude: list[FindingMatch] = Field(default_factory=list)


class InboxKey(Strict):
    key: str
    count: int | None = None
    telemetry: int | None = None
    resolved_to: str | None = Field(None, description="The project the canary's alias map resolves it to.")


class InboxCheck(Strict):
    of: str = "inbox"
    keys_include: list[InboxKey] = Field(default_factory=list)
    keys_exclude: list[str] = Field(default_factory=list)
    empty: bool | None = None


class DoctorCheck(Strict):
    of: str = "doctor"
    checks_include: list[str] = Field(
        default_factory=list, description="Check ids that must report findings."
    )
    checks_exclude: list[str] = Field(default_factory=list, description="Check ids that must report none.")


class TextCheck(Strict):
    contains: list[str] = Field(default_factory=list)
    not_contains: list[str] = Field(default_factory=list)


class CommandCheck(Strict):
    of: str = Field(description="The `as` of a run step.")
    exit: int | None = None
    exit_not: int | None = Field(None, description="The exit code must differ from this.")
    stdout_contains: list[str] = Field(default_factory=list)
    stderr_contains: list[str] = Field(default_factory=list)
    stderr_not_contains: list[str] = Field(default_factory=list)


class JournalCheck(Strict):
    count: int | None = Field(None, ge=0, description="Exactly this many journal entries match.")
    at_least: int | None = Field(None, ge=0)
    match: dict[str, str] = Field(
        default_factory=dict,
        description="Journal fields: transport, method, path, status, project, entity, ...",
    )


class ReceivedCheck(Strict):
    count: int = Field(ge=0)
    match: dict[str, str] = Field(default_factory=dict)


_VERSION_RANGE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*v?\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?\s*$")

CHECK_KEYS = (
    "lanes",
    "sync_state_targets",
    "canary",
    "inbox",
    "doctor",
    "stderr",
    "command",
    "received",
    "journal",
)


class Expectation(Strict):
    tag: Literal["baseline", "design"]
    engram: str | None = Field(
        None,
        description="baseline: engram versions it holds for, e.g. '>=1.20.0,<2.0.0'. Required for baseline.",
    )
    why: str = Field("", description="Which measured case or design section this pins.")
    lanes: LanesCheck | None = None
    sync_state_targets: SetCheck | None = None
    canary: CanaryCheck | None = None
    inbox: InboxCheck | None = None
    doctor: DoctorCheck | None = None
    stderr: TextCheck | None = None
    command: CommandCheck | None = None
    received: ReceivedCheck | None = None
    journal: JournalCheck | None = None

    @field_validator("engram")
    @classmethod
    def _range(cls, value: str | None) -> str | None:
        if value is None:
            return value
        for part in value.split(","):
            if not _VERSION_RANGE.match(part):
                raise ValueError(
                    f"version range part {part.strip()!r} is not OP VERSION (OP one of >=, <=, ==, !=, >, <)"
                )
        return value

    @model_validator(mode="after")
    def _one_check(self) -> Expectation:
        present = [key for key in CHECK_KEYS if getattr(self, key) is not None]
        if len(present) != 1:
            raise ValueError(
                f"an expectation needs exactly one check of {', '.join(CHECK_KEYS)} (got {present})"
            )
        if self.tag == "baseline" and self.engram is None:
            raise ValueError("a baseline expectation needs engram: a version range, e.g. '>=1.20.0,<2.0.0'")
        return self

    @property
    def kind(self) -> str:
        return next(key for key in CHECK_KEYS if getattr(self, key) is not None)


class Header(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    tags: list[Annotated[str, Field(pattern=_NAME)]] = Field(default_factory=list)
    cloud: CloudSpec = Field(default_factory=CloudSpec)  # type: ignore[arg-type]
    workspaces: dict[Annotated[str, Field(pattern=_NAME)], WorkspaceSpec] = Field(default_factory=dict)
    timeout: float = Field(300, gt=0, description="Seconds for the whole scenario.")


TOP_LEVEL_KEYS = (*Header.model_fields, "steps", "expect")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file, for editors."""
    wrappers: list[type[BaseModel]] = []
    for name, model in STEP_MODELS.items():
        body: Any = model
        if issubclass(model, Shorthand):
            body = model | str
        wrappers.append(
            create_model(  # type: ignore[call-overload]
                f"Step_{name}", __config__=ConfigDict(extra="forbid"), **{name: (body, ...)}
            )
        )
    step_union: Any = wrappers[0]
    for wrapper in wrappers[1:]:
        step_union = step_union | wrapper
    document = create_model(
        "Scenario",
        __base__=Header,
        steps=(list[step_union], ...),
        expect=(list[Expectation], []),
    )
    schema: dict[str, Any] = document.model_json_schema(by_alias=True)
    schema["$id"] = SCHEMA_ID
    schema["title"] = "engram-harness scenario"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True)
