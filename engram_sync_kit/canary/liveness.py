"""Liveness: is anything still delivering a lane? Three findings that a read of the rows alone misses.

- `sync_stalled`: rows the worker sends have waited longer than `thresholds.stall_after_seconds`
  (default 1 h) and nothing was acked on the lane for as long: the oldest waiting row's age, the last ack
  and what the lease says of the worker.
- `worker_gave_up`: the lane is past the worker's give-up point (engram_contract.worker_liveness): only a
  restart makes it retry.
- `degraded_backoff_expired`: a degraded lane below that point whose backoff ran out with no retry since:
  no worker is running on it.

They depend on the clock, so they are read on every check (a few indexed reads in one short read
transaction of their own), never kept in the state dir. A lane counts once the home takes part in cloud
sync: a project is enrolled, or a worker has leased, acked or failed on it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.selection import parse_engram_time
from engram_sync_kit.canary.lane_health import ListedRows, live_lanes
from engram_sync_kit.canary.schema_support import identify, waiting_filter, worker_gives_up
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.worker_liveness import (
    MAX_CONSECUTIVE_FAILURES,
    RESTART_ADVICE,
    RESTART_COMMAND,
    RETRY_GRACE_SECONDS,
    WorkerPresence,
    WorkerRecord,
)
from engram_sync_kit.engram_contract.worker_selection import worker_lists

SYNC_STALLED = "sync_stalled"
WORKER_GAVE_UP = "worker_gave_up"
BACKOFF_EXPIRED = "degraded_backoff_expired"
LIVENESS_CHECKS = frozenset({SYNC_STALLED, WORKER_GAVE_UP, BACKOFF_EXPIRED})
_STATE_COLUMNS = (
    "lifecycle",
    "consecutive_failures",
    "backoff_until",
    "lease_owner",
    "lease_until",
    "last_error",
    "last_acked_seq",
)


@dataclass(frozen=True)
class LaneLiveness:
    target_key: str
    waiting_rows: int
    oldest_waiting_at: datetime | None
    last_ack_at: datetime | None
    record: WorkerRecord
    last_error: str | None
    takes_part: bool

    def oldest_age(self, now: datetime) -> float | None:
        return None if self.oldest_waiting_at is None else (now - self.oldest_waiting_at).total_seconds()

    def since_last_ack(self, now: datetime) -> float | None:
        return None if self.last_ack_at is None else (now - self.last_ack_at).total_seconds()

    def stalled(self, now: datetime, stall_after_seconds: float) -> bool:
        """Rows wait longer than the threshold, and no ack came within it either."""
        age = self.oldest_age(now)
        if self.waiting_rows == 0 or age is None or age <= stall_after_seconds:
            return False
        since = self.since_last_ack(now)
        return since is None or since > stall_after_seconds


def _time(value: object) -> datetime | None:
    return parse_engram_time(value) if isinstance(value, str) and value.strip() else None


def read_liveness(db: EngramDb, listed_rows: Mapping[str, ListedRows] | None = None) -> list[LaneLiveness]:
    """Every live lane's liveness facts, in the caller's read transaction. `listed_rows` is lane health's
    reading of the same rows (kept in the state dir): with it every read here is a key lookup; without
    it the lane's waiting rows are scanned (a tenth of a second per 100k)."""
    schema, connection = db.schema, db.connection
    if not schema.has_column("sync_mutations", "project") or not schema.has_column(
        "sync_mutations", "acked_at"
    ):
        return []
    enrolled = db.enrolled_projects()
    gives_up = worker_gives_up(identify(db))
    columns = [name for name in _STATE_COLUMNS if schema.has_column("sync_state", name)]
    lanes = []
    for target_key in live_lanes(db, enrolled):
        listed = ""
        if target_key == LEGACY_TARGET:
            listed = " AND " + worker_lists(enrollment_table=schema.has_table("sync_enrolled_projects"))
        listed += waiting_filter(schema)
        known = listed_rows.get(target_key) if listed_rows is not None else None
        if known is None:
            known = _scan_listed(connection, target_key, listed)
        # engram stamps occurred_at when it enqueues, so the first waiting row in seq order is the oldest.
        first = (
            connection.execute(
                "SELECT occurred_at FROM sync_mutations WHERE seq = ?", (known.first_seq,)
            ).fetchone()
            if known.first_seq is not None
            else None
        )
        waiting = known.count if first is not None else 0
        last_ack = connection.execute(
            "SELECT max(acked_at) FROM sync_mutations WHERE target_key = ? AND acked_at IS NOT NULL",
            (target_key,),
        ).fetchone()
        values: dict[str, Any] = {}
        if columns:
            row = connection.execute(
                f"SELECT {', '.join(columns)} FROM sync_state WHERE target_key = ?", (target_key,)
            ).fetchone()
            if row is not None:
                values = dict(zip(columns, row, strict=True))
        record = WorkerRecord(
            lifecycle=str(values.get("lifecycle") or "") or None,
            consecutive_failures=_int(values.get("consecutive_failures")),
            backoff_until=_time(values.get("backoff_until")),
            lease_owner=str(values.get("lease_owner") or "") or None,
            lease_until=_time(values.get("lease_until")),
            gives_up=gives_up,
        )
        last_ack_at = _time(last_ack[0] if last_ack else None)
        takes_part = (
            bool(enrolled)
            or target_key != LEGACY_TARGET
            or record.lease_owner is not None
            or record.consecutive_failures > 0
            or last_ack_at is not None
        )
        lanes.append(
            LaneLiveness(
                target_key=target_key,
                waiting_rows=waiting,
                oldest_waiting_at=_time(first[0]) if first is not None else None,
                last_ack_at=last_ack_at,
                record=record,
                last_error=str(values["last_error"]) if values.get("last_error") else None,
                takes_part=takes_part,
            )
        )
    return lanes


def _scan_listed(connection: sqlite3.Connection, target_key: str, listed: str) -> ListedRows:
    """The lane's waiting rows the worker lists, on idx_sync_mutations_pending (target_key, acked_at, seq)."""
    count, first = connection.execute(
        f"SELECT count(*), min(seq) FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL{listed}",
        (target_key,),
    ).fetchone()
    return ListedRows(int(count), None if first is None else int(first))


def _int(value: object) -> int:
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def _iso(moment: datetime | None) -> str | None:
    return (
        None
        if moment is None
        else moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def duration_text(seconds: float) -> str:
    """A short, rounded-down duration: 59s, 61m, 25h, 10d."""
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole}s"
    if whole < 2 * 3600:
        return f"{whole // 60}m"
    if whole < 2 * 86400:
        return f"{whole // 3600}h"
    return f"{whole // 86400}d"


def worker_text(lane: LaneLiveness, now: datetime) -> str:
    record = lane.record
    presence = record.presence(now)
    if record.backoff_until is not None and record.backoff_until > now:
        return f"the worker backs off until {_iso(record.backoff_until)} ({presence})"
    if presence is WorkerPresence.HOLDS_LEASE:
        return f"a worker holds the lease until {_iso(record.lease_until)}: engram serve or engram mcp runs"
    if presence is WorkerPresence.LEASE_LAPSED:
        return (
            f"the lease of {record.lease_owner} lapsed at {_iso(record.lease_until)}: that worker stopped "
            "cycling (gave up, or was killed)"
        )
    return "no worker holds the lease: no engram serve or engram mcp with ENGRAM_CLOUD_AUTOSYNC=1 runs"


def _evidence(lane: LaneLiveness, now: datetime, stall_after_seconds: float) -> dict[str, Any]:
    record = lane.record
    age, since = lane.oldest_age(now), lane.since_last_ack(now)
    return {
        "target_key": lane.target_key,
        "waiting_rows": lane.waiting_rows,
        "oldest_waiting_at": _iso(lane.oldest_waiting_at),
        "oldest_waiting_seconds": None if age is None else int(age),
        "last_ack_at": _iso(lane.last_ack_at),
        "seconds_since_last_ack": None if since is None else int(since),
        "stall_after_seconds": stall_after_seconds,
        "worker": str(record.presence(now)),
        "lease_owner": record.lease_owner,
        "lease_until": _iso(record.lease_until),
        "lifecycle": record.lifecycle,
        "consecutive_failures": record.consecutive_failures,
        "backoff_until": _iso(record.backoff_until),
        "last_error": lane.last_error,
    }


_ERROR_CHARS = 300


def _bounded(text: str) -> str:
    """engram's last_error in one finding line: the first 300 characters (the evidence keeps it all)."""
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "\u2026"


def _rows(count: int) -> str:
    return "1 row" if count == 1 else f"{count} rows"


def lane_liveness_findings(lane: LaneLiveness, now: datetime, stall_after_seconds: float) -> list[Finding]:
    if not lane.takes_part:
        return []
    record = lane.record
    evidence = _evidence(lane, now, stall_after_seconds)
    findings: list[Finding] = []
    error = f"; last error: {_bounded(lane.last_error)}" if lane.last_error else ""
    if record.gave_up(now):
        over = record.backoff_over_for(now) or 0.0
        findings.append(
            Finding(
                check=WORKER_GAVE_UP,
                severity="critical",
                message=(
                    f"engram's worker has given up on lane {lane.target_key!r}: "
                    f"{record.consecutive_failures} consecutive failures (v1.20 stops retrying after "
                    f"{MAX_CONSECUTIVE_FAILURES} until the process restarts), and no retry came in the "
                    f"{duration_text(over)} since its last backoff ran out at {_iso(record.backoff_until)}"
                    f"{error}; {_rows(lane.waiting_rows)} wait; restart it: {RESTART_ADVICE}"
                ),
                target_key=lane.target_key,
                size=lane.waiting_rows,
                evidence={**evidence, "clear_command": RESTART_COMMAND},
            )
        )
    elif record.stopped_while_degraded(now) and lane.waiting_rows:
        over = record.backoff_over_for(now) or 0.0
        findings.append(
            Finding(
                check=BACKOFF_EXPIRED,
                severity="warning",
                message=(
                    f"lane {lane.target_key!r} is degraded ({record.consecutive_failures} consecutive "
                    f"failures{error}) and its backoff ran out at {_iso(record.backoff_until)}, "
                    f"{duration_text(over)} ago, with no retry since (a running worker retries within "
                    f"{int(RETRY_GRACE_SECONDS)}s): {worker_text(lane, now)}; {_rows(lane.waiting_rows)} "
                    f"wait; start it: {RESTART_ADVICE}"
                ),
                target_key=lane.target_key,
                size=lane.waiting_rows,
                evidence={**evidence, "clear_command": RESTART_COMMAND},
            )
        )
    if lane.stalled(now, stall_after_seconds):
        age = lane.oldest_age(now) or 0.0
        since = lane.since_last_ack(now)
        acked = (
            "nothing on it was ever acked"
            if since is None
            else f"its last ack was {duration_text(since)} ago ({_iso(lane.last_ack_at)})"
        )
        findings.append(
            Finding(
                check=SYNC_STALLED,
                severity="critical",
                message=(
                    f"sync on lane {lane.target_key!r} has stalled: {_rows(lane.waiting_rows)} the worker "
                    f"sends wait, the oldest for {duration_text(age)} (since {_iso(lane.oldest_waiting_at)}), "
                    f"and {acked}; {worker_text(lane, now)}"
                ),
                target_key=lane.target_key,
                size=lane.waiting_rows,
                evidence=evidence,
            )
        )
    return findings


def liveness_findings(
    db: EngramDb,
    stall_after_seconds: float,
    now: datetime | None = None,
    *,
    listed_rows: Mapping[str, ListedRows] | None = None,
) -> tuple[list[Finding], dict[str, Any]]:
    """The liveness findings and the per-lane facts the textfile plots, in one short read transaction."""
    with db.read_transaction():
        lanes = read_liveness(db, listed_rows)
    moment = now or datetime.now(UTC)
    findings = [
        finding for lane in lanes for finding in lane_liveness_findings(lane, moment, stall_after_seconds)
    ]
    facts = {
        lane.target_key: {
            key: value
            for key, value in _evidence(lane, moment, stall_after_seconds).items()
            if key not in ("target_key", "last_error", "stall_after_seconds")
        }
        for lane in lanes
        if lane.takes_part
    }
    return findings, {"stall_after_seconds": stall_after_seconds, "lanes": facts}


@dataclass(frozen=True)
class LivenessTransition:
    event: str  # "appeared" | "gone"
    target_key: str
    line: str
    severity: str  # "critical" | "warning" | "ok"


def liveness_transitions(before: list[Finding], after: list[Finding], db: Path) -> list[LivenessTransition]:
    """What `watch` says when a liveness finding appears or clears between two full checks."""
    was = {(f.check, f.target_key or ""): f for f in before if f.check in LIVENESS_CHECKS}
    now = {(f.check, f.target_key or ""): f for f in after if f.check in LIVENESS_CHECKS}
    transitions = [
        LivenessTransition(
            "appeared",
            lane,
            f"engram-canary {finding.severity.upper()}: {check} {finding.message} db={db}",
            finding.severity,
        )
        for (check, lane), finding in sorted(now.items())
        if (check, lane) not in was
    ]
    transitions += [
        LivenessTransition(
            "gone", lane, f"engram-canary OK: {check} on lane {lane!r} has cleared db={db}", "ok"
        )
        for check, lane in sorted(set(was) - set(now))
    ]
    return transitions
