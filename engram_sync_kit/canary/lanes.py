"""The rows a sync lane lists and what the push contract says of them: read-side, never writes.

check's lane health reads a lane through here; triage and repair build their plans on the same reading,
so what check calls blocked and what repair corrects are one answer. The Deriver looks up, in the
caller's read transaction, the value engram recorded for a refused field; derive_fix only computes the
corrected copy (repair is what appends it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import CandidateSource, Derivation, Resolution
from engram_sync_kit.canary.inbox.selection import NO_PROJECT_KEY, InboxRow
from engram_sync_kit.canary.schema_support import waiting_filter
from engram_sync_kit.canary.targets import normalize_project
from engram_sync_kit.engram_contract import LEGACY_TARGET, PushRefusal, refusal_for_entry
from engram_sync_kit.engram_contract.gojson import go_json
from engram_sync_kit.engram_contract.worker_selection import worker_lists


def entry_refusal(project: str, row: InboxRow, payload: str) -> PushRefusal | None:
    """The shared contract's answer for this row pushed under `project` (engram_contract.push_rules)."""
    return refusal_for_entry(
        project=project, entity=row.entity, entity_key=row.entity_key, op=row.op, payload=payload
    )


LANE_ROW_COLUMNS = "seq, target_key, entity, entity_key, op, payload, project, occurred_at, acked_at"


def lane_row(values: Sequence[Any]) -> InboxRow:
    """A legacy-lane row outside the inbox (no key): carried as an InboxRow so ack/log treat it alike."""
    seq, _, entity, entity_key, op, payload, project, occurred_at, _ = values
    return InboxRow(
        seq=int(seq),
        entity=str(entity),
        entity_key=str(entity_key),
        op=str(op),
        payload=str(payload),
        project=str(project or ""),
        occurred_at=str(occurred_at),
        cwd=None,
        derivation=Derivation(None, CandidateSource.NONE, NO_PROJECT_KEY, Resolution.INBOX, None),
    )


def with_project(payload: str, project: str) -> str:
    """The same payload with its project set to the enrolled name; key order and other values kept."""
    try:
        decoded = json.loads(payload)
    except (ValueError, RecursionError):
        return payload
    if not isinstance(decoded, dict):
        return payload
    decoded["project"] = project
    return go_json(decoded, sort_keys=False)


# The worker's own listing (ListPendingSyncMutations in v1.20): unacked legacy-lane rows whose project is
# empty or enrolled, in seq order, on idx_sync_mutations_pending.
_PENDING_SQL = (
    "SELECT seq, target_key, entity, entity_key, op, payload, project, occurred_at, acked_at "
    "FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL {listed} ORDER BY seq"
)
_OBSERVATION_FIELDS = frozenset({"type", "title", "content", "scope"})
_MAX_FIXES_PER_ROW = 4  # an entry can lack several fields; each fix is checked again by the contract


@dataclass(frozen=True)
class Fix:
    project: str
    payload: str
    description: str


def pending_listed_rows(db: EngramDb, target_key: str = LEGACY_TARGET) -> list[InboxRow]:
    """The rows the worker lists for `target_key`; on the legacy lane, those whose project is empty or
    enrolled (a per-project lane lists all of its unacked rows)."""
    schema = db.schema
    listed = ""
    if target_key == LEGACY_TARGET and schema.has_column("sync_mutations", "project"):
        listed = "AND " + worker_lists(enrollment_table=schema.has_table("sync_enrolled_projects"))
    listed += waiting_filter(schema)  # v2/v3 never send a quarantined row again
    return [
        lane_row(values)
        for values in db.connection.execute(_PENDING_SQL.format(listed=listed), (target_key,))
    ]


def _payload(text: str) -> dict[str, Any] | None:
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _text_of(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    return value.strip() if isinstance(value, str) else ""


class Deriver:
    """Looks up the value engram recorded for a refused field (read-only, in the caller's snapshot)."""

    def __init__(self, db: EngramDb, enrolled: frozenset[str]) -> None:
        self.connection = db.connection
        self.schema = db.schema
        self.enrolled = {normalize_project(name): name for name in enrolled}

    def _one(self, sql: str, *parameters: object) -> str:
        row = self.connection.execute(sql, parameters).fetchone()
        return str(row[0]).strip() if row is not None and row[0] is not None else ""

    def session_of(self, row: InboxRow, body: dict[str, Any]) -> str:
        return row.entity_key if row.entity == "session" else _text_of(body, "session_id")

    def value(self, row: InboxRow, body: dict[str, Any], name: str) -> tuple[str, str] | None:
        """(value, where it came from) for payload field `name`, or None when engram does not know it."""
        if row.entity == "session" and name == "directory" and self.schema.has_table("sessions"):
            found = self._one("SELECT directory FROM sessions WHERE id = ?", row.entity_key)
            return (found, "the sessions table") if found else None
        sync_id = _text_of(body, "sync_id")
        if row.entity == "observation" and sync_id and name in _OBSERVATION_FIELDS:
            found = self._one(f'SELECT "{name}" FROM observations WHERE sync_id = ?', sync_id)
            return (found, "the observations table") if found else None
        if row.entity == "prompt" and name == "content" and sync_id and self.schema.has_table("user_prompts"):
            found = self._one("SELECT content FROM user_prompts WHERE sync_id = ?", sync_id)
            return (found, "the user_prompts table") if found else None
        return None

    def project(self, row: InboxRow, body: dict[str, Any]) -> tuple[str, str] | str:
        """The enrolled project engram recorded for the row's session or memory, else why there is none."""
        candidates: list[tuple[str, str]] = []
        session = self.session_of(row, body)
        if session and self.schema.has_table("sessions"):
            candidates.append(
                (self._one("SELECT project FROM sessions WHERE id = ?", session), f"session {session!r}")
            )
        sync_id = _text_of(body, "sync_id")
        if row.entity == "observation" and sync_id and self.schema.has_column("observations", "project"):
            candidates.append(
                (self._one("SELECT project FROM observations WHERE sync_id = ?", sync_id), "the observation")
            )
        named = [(normalize_project(name), source) for name, source in candidates if normalize_project(name)]
        for name, source in named:
            if name in self.enrolled:
                return self.enrolled[name], source
        if named:
            name, source = named[0]
            return f"{source} belongs to {name!r}, which is not enrolled (engram cloud enroll {name}, then repair)"
        return "engram recorded no project for it"


def derive_fix(row: InboxRow, refusal: PushRefusal, deriver: Deriver) -> Fix | str:
    """A corrected copy the contract accepts, or the reason none can be derived."""
    project, payload = row.project, row.payload
    changes: list[str] = []
    current: PushRefusal | None = refusal
    for _ in range(_MAX_FIXES_PER_ROW):
        if current is None:
            return Fix(project, payload, "; ".join(changes))
        body = _payload(payload)
        if body is None:
            return f"its payload is not a JSON object ({current.reason})"
        if current.field == "project":
            found = deriver.project(row, body)
            if isinstance(found, str):
                return found
            project, source = found
            payload = with_project(payload, project)
            changes.append(f"project {project!r} from {source}")
        elif current.field is not None:
            value = deriver.value(row, body, current.field)
            if value is None:
                return f"engram's tables do not record its {current.field}"
            body[current.field] = value[0]
            payload = go_json(body, sort_keys=False)
            changes.append(f"{current.field} {value[0]!r} from {value[1]}")
        else:
            return "the refusal names no field to derive"
        current = entry_refusal(project, row, payload)
    return "too many fields are missing"
