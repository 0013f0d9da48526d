"""Acknowledgements per database, so that a machine with known debt only alarms when it changes.

Each acknowledgement names one finding by its identity (check plus target, key or lane) and records
the size it had, like an Alertmanager silence or a Nagios acknowledgement: the finding stays silent
while it is no bigger and the acknowledgement has not expired. A new identity (a new target, key or
lane, or a tripwire the acknowledgement did not cover) alarms as before.

Stored next to the config (baseline.json in the config's directory), keyed by the resolved db path.
Written atomically (tmp file + rename) so a crash never leaves half a baseline. Version 1 files (a list
of foreign targets per database) still load: each target is acknowledged at any size, without expiry.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import FOREIGN_CHECKS, Acknowledgement, Finding
from engram_sync_kit.engram_contract.files import atomic_write

BASELINE_FILE_NAME = "baseline.json"
BASELINE_SCHEMA = "engram-canary/baseline/v2"
LEGACY_SCHEMA = "engram-canary/baseline/v1"
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([hdw])\s*$")
_UNIT_SECONDS = {"h": 3600, "d": 86400, "w": 7 * 86400}


class BaselineError(CanaryError):
    """The baseline file cannot be read or written, or an acknowledgement option is invalid."""


class BaselineEntry(BaseModel):
    recorded_at: str
    targets: list[str] = Field(default_factory=list, description="v1: foreign targets known at any size")
    acknowledgements: list[Acknowledgement] = Field(default_factory=list)

    def all_acknowledgements(self) -> list[Acknowledgement]:
        legacy = [
            Acknowledgement(check=check, target_key=target, acknowledged_at=self.recorded_at)
            for target in self.targets
            for check in sorted(FOREIGN_CHECKS)
        ]
        return [*self.acknowledgements, *legacy]


class Baseline(BaseModel):
    schema_: str = Field(default=BASELINE_SCHEMA, alias="schema")
    databases: dict[str, BaselineEntry] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def acknowledgements_for(self, db_path: Path) -> dict[str, Acknowledgement]:
        entry = self.databases.get(db_key(db_path))
        if entry is None:
            return {}
        return {acknowledgement.identity: acknowledgement for acknowledgement in entry.all_acknowledgements()}

    def targets_for(self, db_path: Path) -> frozenset[str]:
        """Foreign target keys with an acknowledgement (whatever its size or expiry)."""
        return frozenset(
            ack.target_key
            for ack in self.acknowledgements_for(db_path).values()
            if ack.check in FOREIGN_CHECKS and ack.target_key is not None
        )


def db_key(db_path: Path) -> str:
    return str(db_path.expanduser().resolve())


def baseline_path_for(config_path: Path) -> Path:
    return config_path.parent / BASELINE_FILE_NAME


def load_baseline(path: Path) -> Baseline:
    try:
        if not path.exists():
            return Baseline()
        document = json.loads(path.read_text(encoding="utf-8"))
        baseline = Baseline.model_validate(document)
    except ValidationError as error:
        detail = error.errors()[0]
        where = ".".join(str(part) for part in detail["loc"])
        raise BaselineError(
            f"{path}: not a readable canary baseline ({where}: {detail['msg']}); re-record it"
        ) from error
    except (OSError, ValueError, RecursionError) as error:
        first = str(error).splitlines()[0]
        raise BaselineError(f"{path}: not a readable canary baseline ({first}); re-record it") from error
    if baseline.schema_ not in (BASELINE_SCHEMA, LEGACY_SCHEMA):
        raise BaselineError(f"{path}: unknown baseline schema {baseline.schema_!r}; re-record it")
    baseline.schema_ = BASELINE_SCHEMA
    return baseline


def parse_expiry(text: str, now: datetime) -> str:
    """`--expires`: a duration (12h, 30d, 2w) from now, a date (end of that day, UTC) or an ISO time."""
    relative = _RELATIVE.match(text)
    try:
        if relative:
            moment = now + timedelta(seconds=float(relative.group(1)) * _UNIT_SECONDS[relative.group(2)])
        else:
            try:
                parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
            except ValueError as error:
                raise BaselineError(
                    f"--expires {text!r}: expected a duration (12h, 30d, 2w), a date (2026-12-31) or an ISO time"
                ) from error
            if len(text.strip()) == 10:
                parsed += timedelta(days=1)
            moment = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError as error:
        raise BaselineError(f"--expires {text!r}: beyond the calendar (year 9999 at the latest)") from error
    if moment <= now:
        # a zero duration too: an acknowledgement that has expired when recorded silences nothing
        raise BaselineError(f"--expires {text!r}: that moment has already passed")
    return iso(moment)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def acknowledge(
    findings: list[Finding], acknowledged_at: str, *, reason: str | None, expires: str | None
) -> list[Acknowledgement]:
    """One acknowledgement per finding identity, at the finding's current size."""
    acknowledgements: dict[str, Acknowledgement] = {}
    for finding in findings:
        acknowledgements[finding.identity] = Acknowledgement(
            check=finding.check,
            target_key=finding.target_key,
            key=finding.key,
            size=finding.measure(),
            acknowledged_at=acknowledged_at,
            reason=reason,
            expires=expires,
        )
    return sorted(acknowledgements.values(), key=lambda ack: ack.identity)


def record_baseline(
    path: Path, db_path: Path, acknowledgements: list[Acknowledgement], recorded_at: str
) -> Baseline:
    """Replace the database's entry with these acknowledgements (other databases stay)."""
    baseline = load_baseline(path)
    baseline.databases[db_key(db_path)] = BaselineEntry(
        recorded_at=recorded_at, acknowledgements=acknowledgements
    )
    write_atomically(path, baseline.model_dump_json(by_alias=True, indent=2, exclude_none=True) + "\n")
    return baseline


def write_atomically(path: Path, text: str) -> None:
    try:
        atomic_write(path, text)
    except OSError as error:
        raise BaselineError(f"{path}: cannot write ({error.strerror or error})") from error
