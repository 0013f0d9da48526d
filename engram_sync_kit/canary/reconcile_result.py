"""The stable JSON document of `engram-canary reconcile` (schema engram-canary/reconcile/v1): the typed
result that reconcile builds and canary.report renders. A module of its own so that report need not load
reconcile's cloud client, and a one-shot `check` none of these models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engram_sync_kit.canary.findings import Status

RESULT_SCHEMA = "engram-canary/reconcile/v1"


LOST_EVIDENCE_LIMIT = 1000


class LaneReport(BaseModel):
    lane: str
    project: str
    enrolled: bool
    acked: int = 0
    delivered: int = 0
    lost: int = 0
    pending: int = 0
    not_expected: int = 0
    triaged: int = 0


class LostRow(BaseModel):
    seq: int
    lane: str
    project: str
    entity: str
    entity_key: str
    op: str
    acked_at: str | None


class PullSide(BaseModel):
    """How far this machine's worker has pulled what the cloud holds for it (upstream #693)."""

    lane: str
    last_pulled_seq: int
    cloud_newest_seq: int | None = Field(
        description="the newest seq the cloud's pull answered this token; null: none above where the read began"
    )
    not_pulled: int = Field(
        description="entities of other devices with rows above the cursor that this machine lacks (one per entity key)"
    )
    own_not_pulled: int = Field(
        description="this device's own pushes above the cursor (pulled back, harmless)"
    )
    held_already: int = Field(
        default=0,
        description="rows of other devices above the cursor that this machine holds (a chunk import)",
    )
    oldest_not_pulled_seconds: int | None = Field(
        description="how long the oldest of not_pulled has been in the cloud (its occurred_at, the cloud's stamp)"
    )
    behind_after_seconds: float
    behind: bool = Field(description="not_pulled > 0 and the oldest waited longer than behind_after_seconds")


class ReconcileResult(BaseModel):
    """The stable JSON document of `engram-canary reconcile --format json` (schema engram-canary/reconcile/v1)."""

    schema_: str = Field(default=RESULT_SCHEMA, alias="schema")
    status: str
    db: str
    cloud_url: str | None = None
    checked_at: str
    since: str | None = Field(default=None, description="start of the --since window (UTC), null: everything")
    lanes: list[LaneReport] = Field(default_factory=list)
    lost: list[LostRow] = Field(default_factory=list, description=f"first {LOST_EVIDENCE_LIMIT} lost rows")
    cloud_only: dict[str, int] = Field(default_factory=dict, description="per cloud project")
    summary: dict[str, Any] = Field(default_factory=dict)
    pull: PullSide | None = Field(default=None, description="null: this file has no pull cursor to read")
    error: str | None = None

    model_config = {"populate_by_name": True}

    @property
    def exit_status(self) -> Status:
        return Status[self.status.upper()]
