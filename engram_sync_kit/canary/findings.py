"""Findings, acknowledgements and the one status policy shared by `check` and `watch`.

Statuses follow the monitoring-plugin convention. A finding is identified by its check plus what it is
about (target, inbox key or lane), so any finding, including ones other modules add, can be acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

FOREIGN_SYNC_TARGET = "foreign_sync_target"
FOREIGN_MUTATION_TARGET = "foreign_mutation_target"
FOREIGN_CHECKS = frozenset({FOREIGN_SYNC_TARGET, FOREIGN_MUTATION_TARGET})
# Evidence fields that measure a finding's size when its producer did not set `size`, in order.
_SIZE_EVIDENCE = ("unacked_rows", "rows", "count", "total")


EXPIRED_REALARM = "acknowledgement expired at"


class Status(IntEnum):
    """Exit codes of the monitoring-plugin convention; a larger value is worse."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


def identity_of(check: str, target_key: str | None, key: str | None) -> str:
    return f"{check}|{target_key or ''}|{key or ''}"


class Acknowledgement(BaseModel):
    """One acknowledged finding: silent while no bigger than `size` and not past `expires`."""

    check: str
    target_key: str | None = None
    key: str | None = None
    size: int | None = Field(default=None, description="rows when acknowledged; null: any size")
    acknowledged_at: str
    reason: str | None = None
    expires: str | None = Field(default=None, description="ISO time (UTC); null: never")

    @property
    def identity(self) -> str:
        return identity_of(self.check, self.target_key, self.key)

    @field_validator("expires")
    @classmethod
    def _an_iso_time(cls, expires: str | None) -> str | None:
        # A hand-edited baseline: a time without a zone is UTC, as `--expires` reads one.
        if expires is None:
            return None
        try:
            moment = datetime.fromisoformat(expires.strip().replace("Z", "+00:00"))
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        except (ValueError, OverflowError) as error:
            raise ValueError(f"not an ISO time: {expires!r}") from error
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    def expired(self, now: datetime) -> bool:
        if self.expires is None:
            return False
        return datetime.fromisoformat(self.expires.replace("Z", "+00:00")) <= now


class Finding(BaseModel):
    """One finding, a value: acknowledging it makes a new Finding (apply_acknowledgements)."""

    model_config = ConfigDict(frozen=True)

    check: str
    severity: str = Field(description="warning | critical")
    message: str
    target_key: str | None = None
    key: str | None = Field(default=None, description="inbox key, for inbox tripwires")
    new: bool = Field(default=True, description="true when it counts toward the status (not acknowledged)")
    size: int | None = Field(default=None, description="rows the finding is about (what an ack compares)")
    acknowledgement: Acknowledgement | None = Field(default=None, description="the matching acknowledgement")
    realarm: str | None = Field(default=None, description="why an acknowledged finding alarms again")
    evidence: dict[str, Any] = Field(default_factory=dict)

    @property
    def status(self) -> Status:
        return Status.CRITICAL if self.severity == "critical" else Status.WARNING

    @property
    def identity(self) -> str:
        return identity_of(self.check, self.target_key, self.key)

    @property
    def acknowledgement_expired(self) -> bool:
        """It alarms again because its acknowledgement expired (whether or not it also grew)."""
        return self.realarm is not None and self.realarm.startswith(EXPIRED_REALARM)

    @property
    def acknowledged(self) -> bool:
        """Silenced by an acknowledgement (it does not count toward the status)."""
        return self.acknowledgement is not None and not self.new

    def measure(self) -> int:
        if self.size is not None:
            return self.size
        for name in _SIZE_EVIDENCE:
            value = self.evidence.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0


def apply_acknowledgements(
    findings: Iterable[Finding], acknowledgements: Mapping[str, Acknowledgement], now: datetime
) -> list[Finding]:
    """The findings with each one its acknowledgement covers silenced, and why the others alarm again."""
    return [_acknowledged(finding, acknowledgements.get(finding.identity), now) for finding in findings]


def _acknowledged(finding: Finding, acknowledgement: Acknowledgement | None, now: datetime) -> Finding:
    realarm: str | None = None
    if acknowledgement is not None:
        size = finding.measure()
        if acknowledgement.expired(now):
            realarm = f"{EXPIRED_REALARM} {acknowledgement.expires}"
        elif acknowledgement.size is not None and size > acknowledgement.size:
            realarm = f"grew from {acknowledgement.size} to {size} rows since acknowledged"
    new = acknowledgement is None or realarm is not None
    if (finding.acknowledgement, finding.realarm, finding.new) == (acknowledgement, realarm, new):
        return finding  # a value: nothing to change (10k unacknowledged findings: 10k copies saved)
    return finding.model_copy(update={"acknowledgement": acknowledgement, "realarm": realarm, "new": new})


def alarming(findings: Iterable[Finding]) -> list[Finding]:
    return [finding for finding in findings if finding.new]


def counted_severities(findings: Iterable[Finding], critical_new_foreign_targets: int) -> dict[str, Status]:
    """Each unacknowledged finding's weight in the status, by identity: its own severity, and CRITICAL for
    every foreign target when that many unacknowledged foreign targets exist at once (the fleet view pages
    with these, so an alert's severity is the status it stands for)."""
    counted = alarming(findings)
    foreign = {finding.target_key for finding in counted if finding.check in FOREIGN_CHECKS}
    many = len(foreign) >= critical_new_foreign_targets
    return {
        finding.identity: Status.CRITICAL if many and finding.check in FOREIGN_CHECKS else finding.status
        for finding in counted
    }


def overall_status(findings: Iterable[Finding], critical_new_foreign_targets: int) -> Status:
    """The status policy of both `check` and `watch`: the worst unacknowledged finding, and CRITICAL
    when that many unacknowledged foreign targets exist at once."""
    return max(counted_severities(findings, critical_new_foreign_targets).values(), default=Status.OK)
