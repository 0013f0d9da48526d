"""Findings and statuses shared by every canary check (the monitoring-plugin convention)."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from pydantic import BaseModel, Field


class Status(IntEnum):
    """Exit codes of the monitoring-plugin convention; a larger value is worse."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class Finding(BaseModel):
    check: str
    severity: str = Field(description="warning | critical")
    message: str
    target_key: str | None = None
    key: str | None = Field(default=None, description="inbox key, for inbox tripwires")
    new: bool = Field(default=True, description="false when the baseline already knew it")
    evidence: dict[str, Any] = Field(default_factory=dict)

    @property
    def status(self) -> Status:
        return Status.CRITICAL if self.severity == "critical" else Status.WARNING
