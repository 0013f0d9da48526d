"""The scenario format: typed models, validated on load, with unknown keys rejected.

A scenario file holds one scenario: a header (name, tags, cloud, workspaces), a list of steps, each a
mapping with exactly one step name as its key, and a list of expectations, each tagged `baseline` (what
an engram version does today, within a version range) or `design` (what the seed's design requires).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    create_model,
    field_validator,
    model_validator,
)

from engram_sync_kit.canary.check_catalog import CHECKS
from engram_sync_kit.engram_contract import LANE_COUNTS as LANE_COUNTS  # the scenario schema names them too
from engram_sync_kit.fake_cloud.faults import Fault as FakeCloudFault
from engram_sync_kit.fake_cloud.faults import FaultAction, InvalidControlRequest
from engram_sync_kit.fake_cloud.faults import Route as CloudRoute
from engram_sync_kit.harness.design.schema import (
    DESIGN_STEP_MODELS,
    CloudStatusCheck,
    DoctorVerdictCheck,
    EnrollHintCheck,
    InboxRowCheck,
    SaveAnswerCheck,
)
from engram_sync_kit.harness.design.sections import SECTION_PATTERN, section_problem
from engram_sync_kit.harness.scenario.schema_rules import is_true, only_with, schema_rules

SCHEMA_ID = "engram-harness/scenario/v1"

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
    tls: bool = Field(
        True,
        description="Serve the fake over https with a throwaway CA, given to engram as SSL_CERT_FILE "
        "(v2.0.0-rc.10+ and v3 refuse a token over plain http); false: plain http.",
    )


class WorkspaceSpec(Strict):
    """One working directory. Exactly one of git / dir / home / named_like_home / root."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules(
            {
                "oneOf": [
                    {"required": ["git"]},
                    {"required": ["dir"]},
                    is_true("home"),
                    is_true("named_like_home"),
                    is_true("root"),
                ]
            },
            {"dependentRequired": {"remote": ["git"]}},
        ),
    )

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


Label = Annotated[str, Field(pattern=_NAME)]
MatchValue = str | int | float | bool | None
"""A value to match a journal or received field against: compared as text, so `status: 503` and
`status: "503"` are the same; null and "" both mean the empty project (the one spelling is "")."""

OMIT = "omit"


class StepBase(Strict):
    expect_error: str | None = Field(
        None, description="The step must fail, and its error must contain this text."
    )
    label: Label | None = Field(
        None,
        description="Name this step, so a journal or stderr check can be scoped to `since:`/`until:` it.",
    )
    if_unsupported: Literal["fail", "skip"] = Field(
        "fail", description="What to do when this engram version has no interface for the step."
    )


class SessionStep(StepBase):
    """Start a session (telemetry) from a workspace."""

    id: str
    project: str | None = Field(None, description="Designated project; omitted: derived from the cwd (mcp).")
    in_: str | None = Field(None, alias="in", description="Workspace the session runs in.")
    directory: str | None = Field(
        None,
        description="What the client sends as directory: omitted: the workspace's path (HOME without in:); "
        "`omit`: no directory key at all (as some clients do, upstream #1224); any other text is sent as "
        "is, with {workspace:NAME} replaced by that workspace's path.",
    )
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
    as_: str | None = Field(
        None, alias="as", description="Keep exit code and output (`enroll_hint`, `command` checks)."
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class UnenrollStep(EnrollStep):
    pass


class AliasStep(StepBase):
    """Map a derived key, or a workspace's cwd, to a project (the design's alias map, §4)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules({"oneOf": [{"required": ["key"]}, {"required": ["cwd"]}]}),
    )

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


class DeleteStep(StepBase, Shorthand):
    """Delete a memory with `engram delete <id>`: the live observation of this device with that title."""

    shorthand: ClassVar[str] = "title"
    title: str
    hard: bool = Field(False, description="`--hard`: remove the row instead of setting deleted_at.")


class Fault(Strict):
    """A fake-cloud fault: its routes, actions and value rules are fake_cloud's own (one source)."""

    route: CloudRoute = CloudRoute.ANY
    project: str | None = None
    times: int = Field(1, ge=1)
    action: FaultAction = FaultAction.STATUS
    status: int = 503
    latency_ms: int = 200
    keep: int = 0
    seconds: float = 5
    host: str | None = None

    @model_validator(mode="after")
    def _as_the_fake_would_take_it(self) -> Fault:
        try:
            FakeCloudFault.from_dict(self.model_dump(mode="json", exclude_none=True, exclude_unset=True))
        except InvalidControlRequest as refused:
            raise ValueError(str(refused)) from None
        return self


class CloudStep(StepBase):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules(
            {
                "anyOf": [
                    *({"required": [key]} for key in ("allowlist", "pause", "resume", "faults", "seed")),
                    is_true("clear_faults"),
                ]
            }
        ),
    )

    allowlist: list[str] | None = None
    pause: str | None = None
    resume: str | None = None
    faults: list[Fault] | None = None
    clear_faults: bool = False
    seed: list[SeedMutation] | None = Field(
        None, description="Another device's mutations, pushed through the cloud's own sync route."
    )

    @model_validator(mode="after")
    def _something(self) -> CloudStep:
        if not any(
            (
                self.allowlist is not None,
                self.pause,
                self.resume,
                self.faults is not None,
                self.clear_faults,
                self.seed,
            )
        ):
            raise ValueError("cloud needs one of allowlist, pause, resume, faults, clear_faults, seed")
        return self


RECEIVED_FIELDS = ("transport", "project", "entity", "entity_key", "op", "payload_digest", "seq")


def _known_fields(allowed: tuple[str, ...]) -> Any:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        unknown = [key for key in value if key not in allowed]
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} to match; allowed: {', '.join(allowed)}")
        return value

    return check


class UntilReceived(Strict):
    received: int = Field(ge=0, description="Wait until the cloud has stored this many mutations ...")
    match: dict[str, MatchValue] = Field(default_factory=dict, description="... matching these fields.")

    _fields = field_validator("match")(_known_fields(RECEIVED_FIELDS))


class SyncStep(StepBase, Shorthand):
    """One sync: an autosync cycle of `engram serve`, or a manual `engram sync --cloud --project P`."""

    shorthand: ClassVar[str] = "via"
    via: Literal["autosync", "manual"] = "autosync"
    project: str | None = Field(None, description="manual only: the --project of engram sync --cloud.")
    in_: str | None = Field(None, alias="in", description="manual only: the cwd.")
    cycles: int = Field(1, ge=1, description="autosync: completed cycles to wait for.")
    until: UntilReceived | None = Field(None, description="autosync: wait for the cloud instead of cycles.")
    timeout: float = Field(0, ge=0, description="Seconds; 0 means 45 per cycle.")
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        json_schema_extra=schema_rules(
            {
                "if": {"properties": {"via": {"const": "manual"}}, "required": ["via"]},
                "then": {"required": ["project"]},
            }
        ),
    )

    @model_validator(mode="after")
    def _manual_needs_project(self) -> SyncStep:
        if self.via == "manual" and not self.project:
            raise ValueError("sync via manual needs project (engram sync --cloud requires --project)")
        return self


class DaemonStep(StepBase, Shorthand):
    """`engram serve` restarted, stopped or started; `kill`: SIGKILL (no shutdown), then started again."""

    shorthand: ClassVar[str] = "action"
    action: Literal["restart", "stop", "start", "kill"] = Field(
        description="restart: SIGTERM, then start; kill: SIGKILL wherever its worker is, then start at once"
    )
    autosync: bool | None = Field(
        None,
        description="Start it with engram's worker (true) or without (false); omitted: as it ran before, "
        "else as `cloud.autosync` says. A `device:` machine has no worker until a start says true.",
    )


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


class ReconcileStep(StepBase):
    """engram-canary reconcile against the scenario's own cloud: acked rows the cloud does not hold."""

    as_: str = Field("reconcile", alias="as", description="Keeps exit code and output for a `command` check.")
    since: str | None = Field(
        None, description="--since (24h, 7d or an ISO moment); left out: reconcile's own default."
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


#: the engram-canary commands that write engram's database, each a triage of the legacy lane or the inbox
TRIAGE_COMMANDS = (("repair",), ("inbox", "claim"), ("inbox", "drop"))


class TriageStep(StepBase):
    """An engram-canary triage command (repair, inbox claim, inbox drop) on the scenario's database."""

    args: list[str] = Field(
        min_length=1,
        description="engram-canary's arguments after the program name, without --db (the step adds it); "
        "--apply writes, as on a real machine.",
    )
    exit: int | None = Field(0, description="Required exit code; null accepts any.")
    as_: str = Field("triage", alias="as", description="Keeps exit code and output for a `command` check.")
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        json_schema_extra=schema_rules(
            {
                "properties": {
                    "args": {
                        "anyOf": [
                            {
                                "prefixItems": [
                                    {"const": command[0]},
                                    *({"const": word} for word in command[1:]),
                                ],
                                "minItems": len(command),
                            }
                            for command in TRIAGE_COMMANDS
                        ],
                        "not": {"contains": {"pattern": "^--db(=|$)"}},
                    }
                }
            }
        ),
    )

    @field_validator("args")
    @classmethod
    def _a_triage_command(cls, args: list[str]) -> list[str]:
        if not any(tuple(args[: len(command)]) == command for command in TRIAGE_COMMANDS):
            known = ", ".join(" ".join(command) for command in TRIAGE_COMMANDS)
            raise ValueError(f"args must start with a triage command ({known}), got {args[:2]}")
        if any(arg == "--db" or arg.startswith("--db=") for arg in args):
            raise ValueError("args must not name --db: the step passes the scenario's database")
        return args


class RenameStep(StepBase):
    """A workspace's directory renamed on disk, as a user renames a repo or a folder; later steps `in:` it
    run in the new directory (engram derives the project from the new name)."""

    workspace: str = Field(description="The workspace whose directory is renamed (not home nor root).")
    to: str = Field(pattern=_NAME, description="The directory's new name, next to the old one.")
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
    project: str = Field("", description='The project column ("" for none; null means the same).')
    target_key: str = "cloud"
    payload: dict[str, Any] = Field(default_factory=dict)
    acked: bool = False
    age_days: float = 0

    _project = field_validator("project", mode="before")(lambda value: "" if value is None else value)


class LegacyRowsStep(StepBase):
    """SIMULATES LEGACY DATA: inserts rows into sync_mutations (and their sync_state row) directly."""

    rows: list[LegacyRow] = Field(min_length=1)


class SeedMutation(Strict):
    """One mutation another device pushed: sent to the cloud's own POST /sync/mutations/push."""

    project: str = Field(min_length=1)
    entity: Literal["session", "observation", "prompt", "relation"]
    entity_key: str = Field(min_length=1)
    op: Literal["upsert", "delete"] = "upsert"
    payload: dict[str, Any] = Field(default_factory=dict)


class ObserveStep(StepBase, Shorthand):
    """Snapshot sync_state (and the worker's /sync/status) now, for `sync_state: {at: ...}` checks."""

    shorthand: ClassVar[str] = "as"
    as_: Label = Field(alias="as")
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class HttpStep(StepBase):
    """A raw request to `engram serve`, as any local client could send it."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    path: str = Field(pattern=r"^/", description="e.g. /sessions; must start with /.")
    body: Any = Field(
        None, description="JSON body (omitted: none); {workspace:NAME} is replaced by its path."
    )
    status: int | None = Field(None, ge=100, le=599, description="Required status; omitted: any 2xx.")
    as_: str | None = Field(
        None, alias="as", description="Keep status and body (evidence, `command` checks)."
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DeviceStep(Strict):
    """Steps played on another engram device: its own data dir and HOME, the same cloud."""

    name: Label
    steps: list[dict[str, Any]] = Field(min_length=1, description="Steps, played on that device.")


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
    "delete": DeleteStep,
    "cloud": CloudStep,
    "sync": SyncStep,
    "daemon": DaemonStep,
    "canary": CanaryStep,
    "inbox": InboxStep,
    "doctor": DoctorStep,
    "run": RunStep,
    "reconcile": ReconcileStep,
    "triage": TriageStep,
    "rename": RenameStep,
    "time_travel": TimeTravelStep,
    "legacy_rows": LegacyRowsStep,
    "observe": ObserveStep,
    "http": HttpStep,
    "device": DeviceStep,
    "repeat": RepeatStep,
    **DESIGN_STEP_MODELS,
}
NESTING_STEPS = ("repeat", "device")


# ─── Expectations ────────────────────────────────────────────────────────────


def _empty_project(value: Any) -> Any:
    return "" if value is None else value


class LaneRow(Strict):
    lane: str = Field(description="sync_mutations.target_key, e.g. cloud or cloud:my-app.")
    project: str = Field(
        description='sync_mutations.project ("" for the empty project; null means the same).'
    )

    _project = field_validator("project", mode="before")(_empty_project)
    enqueued: int | None = None
    acked: int | None = None
    delivered: int | None = None
    stranded: int | None = None
    lost: int | None = None
    duplicated: int | None = None


class LostRow(Strict):
    lane: str = Field(description="sync_mutations.target_key, e.g. cloud.")
    project: str = Field(description='sync_mutations.project ("" for the empty project).')

    _project = field_validator("project", mode="before")(_empty_project)
    count: int = Field(
        ge=1, description="Rows of this lane and project engram acked and the cloud never stored."
    )


class LostCheck(Strict):
    """Rows an engram version loses today, stated as its baseline; every other lane/project loses none."""

    rows: list[LostRow] = Field(min_length=1)
    reason: str = Field(
        min_length=1, description="Why this loss is the baseline (the upstream bug, e.g. engram #264)."
    )


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

    @field_validator("check")
    @classmethod
    def _a_check_the_canary_has(cls, check: str) -> str:
        # A misspelt check would match no finding: findings_exclude would pass on nothing.
        if check not in CHECKS:
            near = difflib.get_close_matches(check, list(CHECKS), n=1, cutoff=0.75)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"not a check of the canary{hint}; docs/canary.md lists them")
        return check


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


Process = Literal["serve", "mcp", "cli"]


class TextCheck(Strict):
    contains: list[str] = Field(default_factory=list)
    not_contains: list[str] = Field(default_factory=list)
    process: Process | None = Field(
        None,
        description="Only what this process printed: serve (engram serve), mcp, cli (every other command).",
    )
    since: Label | None = Field(
        None, description="Only output from the start of the step with this label on."
    )
    until: Label | None = Field(None, description="Only output up to the end of the step with this label.")


class CommandCheck(Strict):
    of: str = Field(description="The `as` of a run step.")
    exit: int | None = None
    exit_not: int | None = Field(None, description="The exit code must differ from this.")
    stdout_contains: list[str] = Field(default_factory=list)
    stdout_not_contains: list[str] = Field(default_factory=list)
    stderr_contains: list[str] = Field(default_factory=list)
    stderr_not_contains: list[str] = Field(default_factory=list)


JSON_PATH = r"^\$((\.[A-Za-z_][A-Za-z0-9_-]*)|(\[[0-9]+\]))*$"


class AnswerCheck(Strict):
    """A kept answer read as JSON (an http step's body, or a run/reconcile step's stdout)."""

    of: str = Field(description="The `as` of an http, run or reconcile step.")
    status: int | None = Field(None, description="http: the status it answered.")
    json_: dict[Annotated[str, Field(pattern=JSON_PATH)], Any] = Field(
        default_factory=dict,
        alias="json",
        description="JSON path ($.a.b[0].c) -> the value found there (null: present and null); "
        "{absent: true}: no such path.",
    )
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


JOURNAL_FIELDS = (
    "transport",
    "method",
    "path",
    "status",
    "project",
    "entity",
    "entity_key",
    "op",
    "request_id",
)


class JournalCheck(Strict):
    count: int | None = Field(None, ge=0, description="Exactly this many journal entries match.")
    at_least: int | None = Field(None, ge=0)
    at_most: int | None = Field(None, ge=0)
    match: dict[str, MatchValue] = Field(
        default_factory=dict,
        description="Journal fields: transport, method, path, status, project, entity, ...",
    )
    since: Label | None = Field(
        None, description="Only entries from the start of the step with this label on."
    )
    until: Label | None = Field(None, description="Only entries up to the end of the step with this label.")

    _fields = field_validator("match")(_known_fields(JOURNAL_FIELDS))


class ReceivedCheck(Strict):
    count: int = Field(ge=0)
    match: dict[str, MatchValue] = Field(default_factory=dict)

    _fields = field_validator("match")(_known_fields(RECEIVED_FIELDS))


def _int_or_range(schema: dict[str, Any]) -> None:
    """The JSON Schema of a count says what the before-validator accepts: an int, or the object."""
    as_object = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "integer", "minimum": 0}, as_object]


class Count(Strict):
    """A count: an int (exactly) or {at_least, at_most}."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_int_or_range)

    exactly: int | None = Field(None, ge=0)
    at_least: int | None = Field(None, ge=0)
    at_most: int | None = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_int(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"exactly": value}
        if not isinstance(value, dict):
            raise ValueError("a count is an int or {at_least: N, at_most: N}")
        return value


SYNC_STATE_FIELDS = (
    "lifecycle",
    "reason_code",
    "last_error_contains",
    "consecutive_failures",
    "last_enqueued_seq",
    "last_acked_seq",
    "last_pulled_seq",
)


class SyncStateCheck(Strict):
    """One sync_state row (a target), at the end or at an `observe` point."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules(
            {
                "oneOf": [
                    {
                        **is_true("absent"),
                        "not": {
                            "anyOf": [{"required": [f]} for f in (*SYNC_STATE_FIELDS, "last_error_empty")]
                        },
                    },
                    {
                        "anyOf": [{"required": [f]} for f in (*SYNC_STATE_FIELDS, "last_error_empty")],
                        "not": is_true("absent"),
                    },
                ]
            }
        ),
    )

    target: str = Field("cloud", description="sync_state.target_key: cloud, cloud:my-app, ...")
    at: Label | None = Field(None, description="The `as` of an observe step; omitted: after the last step.")
    absent: bool = Field(False, description="The target has no sync_state row.")
    lifecycle: str | None = None
    reason_code: str | None = Field(None, description='"" when the column is NULL or empty.')
    last_error_contains: str | None = Field(None, description='"" matches any; use last_error_empty.')
    last_error_empty: bool | None = None
    consecutive_failures: Count | None = None
    last_enqueued_seq: Count | None = None
    last_acked_seq: Count | None = None
    last_pulled_seq: Count | None = None

    @model_validator(mode="after")
    def _something(self) -> SyncStateCheck:
        chosen = [
            name for name in (*SYNC_STATE_FIELDS, "last_error_empty") if getattr(self, name) is not None
        ]
        if self.absent and chosen:
            raise ValueError(f"absent: true cannot be combined with {', '.join(chosen)}")
        if not self.absent and not chosen:
            raise ValueError(
                f"sync_state needs absent: true or one of {', '.join((*SYNC_STATE_FIELDS, 'last_error_empty'))}"
            )
        return self


class TriageCopiesCheck(Strict):
    """The copies the kit's own triage --apply appended (the triage log next to the database), judged on
    the database at the end of the run (explore's I4)."""

    refused: int = Field(0, ge=0, description="Waiting copies the cloud's push rules refuse.")
    missing: int = Field(
        0, ge=0, description="Rows acked as replaced (claim, repair) whose copy is not in the database."
    )
    without_session: int = Field(
        0, ge=0, description="Copied observations/prompts whose session has no row in the copy's project."
    )


class LocalCheck(Strict):
    """Rows in this device's engram database (read-only), matched by title, key or project."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules(
            only_with("title", {"properties": {"entity": {"const": "observation"}}}),
            only_with("content_contains", {"properties": {"entity": {"enum": ["observation", "prompt"]}}}),
            {
                "if": {"required": ["present"], "properties": {"present": {"const": False}}},
                "then": {"properties": {"count": {"const": 0}}},
            },
        ),
    )

    entity: Literal["observation", "session", "prompt", "relation"] = "observation"
    title: str | None = Field(None, description="observation only: its title.")
    key: str | None = Field(None, description="observation/prompt/relation: sync_id; session: its id.")
    project: str | None = Field(
        None, description='The project column ("" for none); relation: its source observation\'s project.'
    )
    content_contains: str | None = Field(None, description="observation/prompt only.")
    at: Label | None = Field(None, description="The `as` of an observe step; omitted: after the last step.")
    present: bool = Field(True, description="false: no row may match.")
    count: int | None = Field(None, ge=0, description="Exactly this many rows match.")

    @model_validator(mode="after")
    def _fits(self) -> LocalCheck:
        if self.title is not None and self.entity != "observation":
            raise ValueError(f"title is only for entity observation (got entity {self.entity})")
        if self.content_contains is not None and self.entity not in ("observation", "prompt"):
            raise ValueError(f"content_contains is only for observation and prompt (got {self.entity})")
        if not self.present and self.count not in (None, 0):
            raise ValueError("present: false means count 0; give one of them")
        return self


_RANGE_PART = r"\s*(>=|<=|==|!=|>|<)\s*v?\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?\s*"
_VERSION_RANGE = re.compile(f"^{_RANGE_PART}$")


class ExpectationFields(Strict):
    """What every expectation has besides its one check (also what a zero- or many-check one is read as)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules(
            {
                "if": {"properties": {"tag": {"const": "baseline"}}},
                "then": {"required": ["engram"], "properties": {"engram": {"type": "string"}}},
            },
            only_with("design_section", {"properties": {"tag": {"const": "design"}}}),
            only_with("predicted", {"properties": {"tag": {"const": "baseline"}}}),
        ),
    )

    #: every key an expectation may have, as a refusal of an unknown key lists them
    shown_keys: ClassVar[tuple[str, ...]] = ()

    tag: Literal["baseline", "design"]
    engram: str | None = Field(
        None,
        description="baseline: engram versions it holds for, e.g. '>=1.20.0,<2.0.0'. Required for baseline.",
        json_schema_extra={"pattern": f"^{_RANGE_PART}(,{_RANGE_PART})*$"},
    )
    why: str = Field("", description="Which measured case or design section this pins.")
    design_section: str | None = Field(
        None,
        description="design only (the library requires it): the design section it comes from (§1, §2a, §2b, §2c, §3, "
        "§4, invariant, item N, out of scope, risk) or the upstream issue a fix closes (upstream #742).",
        json_schema_extra={"pattern": SECTION_PATTERN},
    )
    predicted: str | None = Field(
        None,
        description=(
            "baseline only: this expectation is predicted from engram's source, never observed; the value "
            "names the files and commits it rests on. The first run on a version in range shows if it holds."
        ),
    )

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


class ExpectationBase(ExpectationFields):
    """One expectation: the common fields and exactly one check, named by its key (`kind`)."""

    kind: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _drop_empty_checks(cls, value: Any) -> Any:
        # `lanes: null` next to the real check was always read as no check at all.
        if isinstance(value, dict):
            return {key: item for key, item in value.items() if item is not None or key not in CHECK_KEYS}
        return value

    @model_validator(mode="after")
    def _fits(self) -> ExpectationBase:
        if self.tag == "baseline" and self.engram is None:
            raise ValueError("a baseline expectation needs engram: a version range, e.g. '>=1.20.0,<2.0.0'")
        if self.tag != "design" and self.design_section is not None:
            raise ValueError("design_section is only for design expectations")
        if self.design_section is not None and (problem := section_problem(self.design_section)):
            raise ValueError(problem)
        if self.predicted is not None and self.tag != "baseline":
            raise ValueError(
                "predicted: only a baseline can be predicted from source (a design is a requirement)"
            )
        return self

    @property
    def check(self) -> BaseModel:
        check: BaseModel = getattr(self, self.kind)
        return check


class LanesExpectation(ExpectationBase):
    kind: ClassVar[str] = "lanes"
    lanes: LanesCheck


class LostExpectation(ExpectationBase):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra=schema_rules({"properties": {"tag": {"const": "baseline"}}}),
    )

    kind: ClassVar[str] = "lost"
    lost: LostCheck

    @model_validator(mode="after")
    def _baseline_only(self) -> LostExpectation:
        if self.tag != "baseline":
            raise ValueError("lost: only a baseline states a loss (a design never loses a row)")
        return self


class AnswerExpectation(ExpectationBase):
    kind: ClassVar[str] = "answer"
    answer: AnswerCheck


class SyncStateTargetsExpectation(ExpectationBase):
    kind: ClassVar[str] = "sync_state_targets"
    sync_state_targets: SetCheck


class CanaryExpectation(ExpectationBase):
    kind: ClassVar[str] = "canary"
    canary: CanaryCheck


class InboxExpectation(ExpectationBase):
    kind: ClassVar[str] = "inbox"
    inbox: InboxCheck


class DoctorExpectation(ExpectationBase):
    kind: ClassVar[str] = "doctor"
    doctor: DoctorCheck


class StderrExpectation(ExpectationBase):
    kind: ClassVar[str] = "stderr"
    stderr: TextCheck


class CommandExpectation(ExpectationBase):
    kind: ClassVar[str] = "command"
    command: CommandCheck


class ReceivedExpectation(ExpectationBase):
    kind: ClassVar[str] = "received"
    received: ReceivedCheck


class JournalExpectation(ExpectationBase):
    kind: ClassVar[str] = "journal"
    journal: JournalCheck


class SyncStateExpectation(ExpectationBase):
    kind: ClassVar[str] = "sync_state"
    sync_state: SyncStateCheck


class LocalExpectation(ExpectationBase):
    kind: ClassVar[str] = "local"
    local: LocalCheck


class SaveAnswerExpectation(ExpectationBase):
    kind: ClassVar[str] = "save_answer"
    save_answer: SaveAnswerCheck


class EnrollHintExpectation(ExpectationBase):
    kind: ClassVar[str] = "enroll_hint"
    enroll_hint: EnrollHintCheck


class CloudStatusExpectation(ExpectationBase):
    kind: ClassVar[str] = "cloud_status"
    cloud_status: CloudStatusCheck


class DoctorCheckExpectation(ExpectationBase):
    kind: ClassVar[str] = "doctor_check"
    doctor_check: DoctorVerdictCheck


class InboxRowExpectation(ExpectationBase):
    kind: ClassVar[str] = "inbox_row"
    inbox_row: InboxRowCheck


class TriageCopiesExpectation(ExpectationBase):
    kind: ClassVar[str] = "triage_copies"
    triage_copies: TriageCopiesCheck


EXPECTATION_MODELS: dict[str, type[ExpectationBase]] = {
    model.kind: model
    for model in (
        LanesExpectation,
        LostExpectation,
        AnswerExpectation,
        SyncStateTargetsExpectation,
        CanaryExpectation,
        InboxExpectation,
        DoctorExpectation,
        StderrExpectation,
        CommandExpectation,
        ReceivedExpectation,
        JournalExpectation,
        SyncStateExpectation,
        LocalExpectation,
        SaveAnswerExpectation,
        EnrollHintExpectation,
        CloudStatusExpectation,
        DoctorCheckExpectation,
        InboxRowExpectation,
        TriageCopiesExpectation,
    )
}
CHECK_KEYS = tuple(EXPECTATION_MODELS)
ExpectationFields.shown_keys = (*ExpectationFields.model_fields, *CHECK_KEYS)
ONE_CHECK = f"an expectation needs exactly one check of {', '.join(CHECK_KEYS)}"


def expectation_kinds(data: Any) -> list[str]:
    """The checks an expectation's mapping names (a null one names none)."""
    if not isinstance(data, dict):
        return []
    return [key for key in CHECK_KEYS if data.get(key) is not None]


def _kind_of(data: Any) -> str | None:
    if isinstance(data, ExpectationBase):
        return data.kind
    kinds = expectation_kinds(data)
    return kinds[0] if len(kinds) == 1 else None


Expectation: TypeAlias = Annotated[
    Annotated[LanesExpectation, Tag("lanes")]
    | Annotated[LostExpectation, Tag("lost")]
    | Annotated[AnswerExpectation, Tag("answer")]
    | Annotated[SyncStateTargetsExpectation, Tag("sync_state_targets")]
    | Annotated[CanaryExpectation, Tag("canary")]
    | Annotated[InboxExpectation, Tag("inbox")]
    | Annotated[DoctorExpectation, Tag("doctor")]
    | Annotated[StderrExpectation, Tag("stderr")]
    | Annotated[CommandExpectation, Tag("command")]
    | Annotated[ReceivedExpectation, Tag("received")]
    | Annotated[JournalExpectation, Tag("journal")]
    | Annotated[SyncStateExpectation, Tag("sync_state")]
    | Annotated[LocalExpectation, Tag("local")]
    | Annotated[SaveAnswerExpectation, Tag("save_answer")]
    | Annotated[EnrollHintExpectation, Tag("enroll_hint")]
    | Annotated[CloudStatusExpectation, Tag("cloud_status")]
    | Annotated[DoctorCheckExpectation, Tag("doctor_check")]
    | Annotated[InboxRowExpectation, Tag("inbox_row")]
    | Annotated[TriageCopiesExpectation, Tag("triage_copies")],
    Discriminator(_kind_of, custom_error_type="one_check", custom_error_message=ONE_CHECK),
]
EXPECTATION: TypeAdapter[Expectation] = TypeAdapter(Expectation)


def parse_expectation(data: Any) -> ExpectationBase:
    """One expectation from its mapping (the loader does the same, with file:line errors)."""
    expectation: ExpectationBase = EXPECTATION.validate_python(data)
    return expectation


class Header(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    tags: list[Annotated[str, Field(pattern=_NAME)]] = Field(default_factory=list)
    cloud: CloudSpec = Field(default_factory=CloudSpec)
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
    # The expectation union under one name, as when it was one model: only $defs says it is a union.
    schema["$defs"]["Expectation"] = schema["properties"]["expect"]["items"]
    schema["properties"]["expect"]["items"] = {"$ref": "#/$defs/Expectation"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "engram-harness scenario"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True)
