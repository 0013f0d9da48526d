"""Inbox tripwire thresholds, kept apart from canary.config so both can import them without a cycle."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class InboxSettings(BaseModel):
    """The design's §2b defaults: a non-unsorted key waiting 7 days, unsorted growing by 100 in 7 days."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    age_days: float = Field(default=7.0, gt=0, description="oldest row of a non-unsorted key older than this")
    unsorted_growth_rows: int = Field(default=100, ge=1, description="more new unsorted rows than this ...")
    # At most a century: the window start is a datetime, which ends at year 9999.
    unsorted_window_days: float = Field(default=7.0, gt=0, le=36_500, description="... within this many days")
    aliases: Path | None = Field(default=None, description="alias map; default is the documented location")
