"""Steps and checks for the design's user-visible surfaces (issue 14): the save answer (§2a), engram's
own inbox commands and `cloud status` line (§2c, §3), the enroll hint (§3), doctor verdicts with their
severity and per-key detail (§2b), and the inbox rows themselves (§1).

Only engram v1.20 is released with none of these surfaces; where the design quotes an output shape
(the status line, the enroll hint, the CLI warning) the parsers in harness.design_checks read exactly
that shape, and their unit tests quote it. Models here import nothing from harness.schema (which
imports them), so they carry their own strict base.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engram_sync_kit.harness.scenario.schema_rules import is_true, only_with, schema_rules

MatchValue = str | int | float | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Step(_Strict):
    expect_error: str | None = Field(None, description="The step must fail with an error containing this.")
    label: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    if_unsupported: Literal["fail", "skip"] = Field(
        "fail", description="What to do when this engram version has no interface for the step."
    )


class CloudStatusStep(_Step):
    """`engram cloud status`: its output and the design's inbox line (§2c), parsed."""

    as_: str = Field("status", alias="as")
    in_: str | None = Field(None, alias="in")


class EngramInboxStep(_Step):
    """engram's own `engram cloud inbox list|claim|drop` (§3); unsupported where `engram cloud` lacks it."""

    action: Literal["list", "claim", "drop"]
    project: str | None = Field(None, description="--project KEY (claim and drop require it).")
    claim_as: str | None = Field(None, description="claim only: --as ENROLLED.")
    cwd: str | None = Field(None, description="--cwd: a workspace name (its absolute path is passed).")
    noise: bool = Field(False, description="drop only: --noise.")
    exit: int | None = Field(0, description="Required exit code; null accepts any.")
    as_: str = Field("engram_inbox", alias="as", description="Result name for `command` checks.")

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        json_schema_extra=schema_rules(
            {
                "if": {"properties": {"action": {"enum": ["claim", "drop"]}}},
                "then": {
                    "required": ["project"],
                    "properties": {"project": {"type": "string", "minLength": 1}},
                },
            },
            only_with("claim_as", {"properties": {"action": {"const": "claim"}}}),
            {"if": is_true("noise"), "then": {"properties": {"action": {"const": "drop"}}}},
        ),
    )

    @model_validator(mode="after")
    def _fits(self) -> EngramInboxStep:
        if self.action in ("claim", "drop") and not self.project:
            raise ValueError(f"engram_inbox {self.action} needs project (--project KEY)")
        if self.claim_as is not None and self.action != "claim":
            raise ValueError("claim_as is only for action claim")
        if self.noise and self.action != "drop":
            raise ValueError("noise is only for action drop")
        return self


class SaveAnswerCheck(_Strict):
    """What a labelled save answered: the MCP answer's fields, the CLI's stderr (§2a)."""

    of: str = Field(description="The `as` of a save step.")
    routed_to: str | None = Field(None, description='MCP answer field routed_to, e.g. "inbox".')
    project_key: str | None = Field(None, description="MCP answer field project_key.")
    fields: dict[str, MatchValue] = Field(
        default_factory=dict, description="Any other answer fields, compared as text (v1.20: project, ...)."
    )
    absent_fields: list[str] = Field(default_factory=list, description="Fields the answer must not have.")
    warning: bool | None = Field(None, description="true: the save warned; false: it did not.")
    warning_key: str | None = Field(
        None, description='The key the warning names: saved to inbox: "<key>" (cwd <path>) is not enrolled.'
    )
    warning_cwd: bool = Field(False, description="The warning names the save's own cwd.")
    stderr_contains: list[str] = Field(default_factory=list, description="cli: text on the save's stderr.")
    stderr_not_contains: list[str] = Field(default_factory=list)


class EnrollHintCheck(_Strict):
    """What `engram cloud enroll P` printed after enrolling (§3): the waiting count and the claim."""

    of: str = Field(description="The `as` of an enroll step.")
    hint: bool = Field(True, description="false: enroll printed no inbox hint.")
    waiting: int | None = Field(None, ge=0, description="-> N memories of P waiting in the inbox.")
    claim_as: str | None = Field(None, description="The --as of the suggested claim command.")


class CloudStatusCheck(_Strict):
    of: str = "status"
    inbox_line: bool | None = Field(None, description="Whether the inbox line is printed.")
    memories: int | None = Field(None, ge=0)
    keys: int | None = Field(None, ge=0, description="N unenrolled keys.")
    oldest_days_at_least: int | None = Field(None, ge=0, description="oldest non-unsorted: D days.")


class DoctorVerdictCheck(_Strict):
    """One doctor check's verdict: result, severity, reason, and which keys its detail names (§2b)."""

    of: str = "doctor"
    check: str = Field(description="check_id, e.g. inbox_depth.")
    present: bool = Field(True, description="false: the doctor has no such check.")
    result: str | None = Field(None, description="ok | warning | blocked | error ...")
    result_not: list[str] = Field(default_factory=list, description='e.g. ["blocked"]: never blocking.')
    severity: str | None = None
    reason_code: str | None = None
    mentions: list[str] = Field(default_factory=list, description="Keys its message or evidence names.")
    not_mentions: list[str] = Field(default_factory=list)
    status_not: list[str] = Field(
        default_factory=list, description="The doctor's overall status must not be one of these."
    )

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        json_schema_extra=schema_rules(
            {
                "if": {"required": ["present"], "properties": {"present": {"const": False}}},
                "then": {
                    "not": {
                        "anyOf": [
                            {"required": [key]} for key in ("result", "severity", "mentions", "reason_code")
                        ]
                    }
                },
            }
        ),
    )

    @model_validator(mode="after")
    def _absent_alone(self) -> DoctorVerdictCheck:
        if not self.present and (self.result or self.severity or self.mentions or self.reason_code):
            raise ValueError("present: false cannot be combined with result, severity, reason_code, mentions")
        return self


class InboxRowCheck(_Strict):
    """The journal rows of a labelled save on the inbox lane (§1): key, raw payload, lifecycle."""

    of: str = Field(description="The `as` of a save step.")
    target: str = Field("cloud:inbox", description="sync_mutations.target_key the rows must be on.")
    key: str | None = Field(
        None, description="The project column: the inbox key (slug, designation, unsorted)."
    )
    payload_project: str | None = Field(
        None, description="The payload's project: the raw original, byte for byte (lossless)."
    )
    payload_cwd: bool = Field(True, description="The payload keeps the save's cwd, byte for byte.")
    acked: bool | None = Field(False, description="false: never acked (the inbox is never delivered).")


DESIGN_STEP_MODELS: dict[str, type[BaseModel]] = {
    "cloud_status": CloudStatusStep,
    "engram_inbox": EngramInboxStep,
}
