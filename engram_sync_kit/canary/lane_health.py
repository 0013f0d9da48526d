"""Lane health: is a sync lane stuck behind a row the cloud refuses?

engram's worker lists a lane's pending rows in seq order and stops its cycle at the first push the
cloud refuses, so one refused row holds back every later row of every enrolled project, tick after
tick. A lane is blocked when a row it lists fails the shared push contract
(engram_contract.refusal_for_entry), or when its sync_state is degraded with a last_error while rows
wait. The finding names the blocking seqs, the reason, the rows held back per project and the command
that clears it. v1.20 has one live lane, the legacy `cloud` lane (`legacy_lane_blocked`); a per-project
lane `cloud:<p>` that a later engram makes live gets the same check (`project_lane_blocked`).

Reading a lane's pending rows costs a tenth of a second per 100k rows, so `check` keeps the findings in
the canary's state dir with a fingerprint of what they were read from (the high-water seq, each lane's
waiting rows, the enrolled set, every sync_state row's lifecycle/last_error/failures, the tables a fix is
derived from) and reads the lanes again only when the fingerprint moved or the answer is an hour old.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.config import keep_state, state_file_for
from engram_sync_kit.canary.db import EngramDb, quote_identifier, readable, readable_int
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.selection import InboxRow
from engram_sync_kit.canary.lanes import Deriver, Fix, derive_fix, entry_refusal, pending_listed_rows
from engram_sync_kit.canary.schema_support import identify, waiting_filter, worker_gives_up
from engram_sync_kit.canary.targets import project_target
from engram_sync_kit.engram_contract import LEGACY_TARGET, PushRefusal
from engram_sync_kit.engram_contract.prompt_preflight import PROMPT_PROVENANCE_BLOCKED
from engram_sync_kit.engram_contract.worker_liveness import MAX_CONSECUTIVE_FAILURES, RESTART_ADVICE

LEGACY_LANE_BLOCKED = "legacy_lane_blocked"
PROJECT_LANE_BLOCKED = "project_lane_blocked"
LANE_CHECKS = frozenset({LEGACY_LANE_BLOCKED, PROJECT_LANE_BLOCKED})
_SHOWN_SEQS = 20
PER_PROJECT_LANE_ADVICE = (
    "engram doctor --check sync_mutation_required_fields (triage writes only v1.20's legacy lane)"
)


@dataclass(frozen=True)
class Blocker:
    row: InboxRow
    refusal: PushRefusal
    repairable: bool

    @property
    def reason(self) -> str:
        return f"{self.refusal.status} {self.refusal.reason}"


@dataclass
class LaneHealth:
    target_key: str
    lifecycle: str | None = None
    last_error: str | None = None
    consecutive_failures: int = 0
    reason_code: str | None = None
    pending: int = 0
    blockers: list[Blocker] = field(default_factory=list)
    held_back: Counter[str] = field(default_factory=Counter)
    first_pending_seq: int | None = None
    worker_gives_up: bool = True

    @property
    def degraded(self) -> bool:
        return self.lifecycle == "degraded" and bool((self.last_error or "").strip())

    @property
    def blocked(self) -> bool:
        return bool(self.blockers) or (self.degraded and self.pending > 0)


def read_lane_health(db: EngramDb) -> list[LaneHealth]:
    """Every live lane's health, in the caller's read transaction."""
    if not db.schema.has_column("sync_mutations", "project"):
        return []
    enrolled = db.enrolled_projects()
    deriver = Deriver(db, enrolled)
    gives_up = worker_gives_up(identify(db))
    return [_lane(db, deriver, target, gives_up) for target in live_lanes(db, enrolled)]


def live_lanes(db: EngramDb, enrolled: frozenset[str]) -> list[str]:
    lanes = [LEGACY_TARGET]
    # Per-project lanes only where a later engram made them live; on a legacy-only file their rows are
    # undelivered_project_lane's business (v1.20's worker never reads them, so they block nothing).
    for project in sorted(enrolled) if identify(db).per_project_lanes_live else ():
        target = project_target(project)
        if db.connection.execute(
            "SELECT 1 FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL LIMIT 1", (target,)
        ).fetchone():
            lanes.append(target)
    return lanes


def _lane(db: EngramDb, deriver: Deriver, target_key: str, gives_up: bool) -> LaneHealth:
    health = LaneHealth(target_key, worker_gives_up=gives_up)
    connection, schema = db.connection, db.schema
    columns = [
        name
        for name in ("lifecycle", "last_error", "consecutive_failures", "reason_code")
        if schema.has_column("sync_state", name)
    ]
    if columns:
        state = connection.execute(
            f"SELECT {', '.join(columns)} FROM sync_state WHERE target_key = ?", (target_key,)
        ).fetchone()
        if state is not None:
            values = dict(zip(columns, (readable(value) for value in state), strict=True))
            health.lifecycle = str(values.get("lifecycle") or "") or None
            health.last_error = str(values["last_error"]) if values.get("last_error") else None
            health.consecutive_failures = readable_int(values.get("consecutive_failures"))
            health.reason_code = str(values.get("reason_code") or "").strip() or None
    for row in pending_listed_rows(db, target_key):
        health.pending += 1
        if health.first_pending_seq is None:
            health.first_pending_seq = row.seq
        refusal = entry_refusal(row.project, row, row.payload)
        if refusal is not None:
            health.blockers.append(Blocker(row, refusal, isinstance(derive_fix(row, refusal, deriver), Fix)))
        elif health.blockers or health.degraded:
            health.held_back[row.project] += 1
    return health


def clear_commands(health: LaneHealth, db: Path | None = None) -> list[str]:
    """The commands that clear the blockers, the most specific first (each is a dry run without --apply)."""
    if health.target_key != LEGACY_TARGET:
        return []  # triage writes only the legacy lane of the engram it is tested on (v1.20)
    suffix = ["--db", str(db)] if db is not None else []
    commands: list[str] = []
    if any(blocker.repairable for blocker in health.blockers):
        commands.append(shlex.join(["engram-canary", "repair", *suffix, "--apply"]))
    unrepairable = [blocker for blocker in health.blockers if not blocker.repairable]
    if any(not blocker.row.project.strip() for blocker in unrepairable):
        commands.append(shlex.join(["engram-canary", "inbox", "drop", "--unattributed", *suffix, "--apply"]))
    named = [str(blocker.row.seq) for blocker in unrepairable if blocker.row.project.strip()]
    if named:
        commands.append(
            shlex.join(["engram-canary", "inbox", "drop", "--seq", ",".join(named), *suffix, "--apply"])
        )
    return commands


def lane_finding(health: LaneHealth, db: Path | None = None) -> Finding | None:
    if not health.blocked:
        return None
    held = sum(health.held_back.values())
    by_project = dict(sorted(health.held_back.items()))
    evidence: dict[str, Any] = {
        "target_key": health.target_key,
        "lifecycle": health.lifecycle,
        "last_error": health.last_error,
        "consecutive_failures": health.consecutive_failures,
        "reason_code": health.reason_code,
        "pending_rows": health.pending,
        "held_back_rows": held,
        "held_back_by_project": by_project,
    }
    if health.blockers:
        first = health.blockers[0]
        commands = clear_commands(health, db) or [PER_PROJECT_LANE_ADVICE]
        evidence.update(
            blocking_seqs=[blocker.row.seq for blocker in health.blockers[:_SHOWN_SEQS]],
            blocking_rows=len(health.blockers),
            reason=first.reason,
            reasons=dict(Counter(blocker.reason for blocker in health.blockers).most_common()),
            clear_command=commands[0],
            clear_commands=commands,
        )
        message = (
            f"lane {health.target_key!r} is blocked: the cloud refuses seq {first.row.seq} "
            f"({first.row.entity}, project {first.row.project!r}: {first.reason})"
            + (f" and {len(health.blockers) - 1} more" if len(health.blockers) > 1 else "")
            + f"; {held} rows wait behind it ({_projects_text(by_project)}); clear it with: {commands[0]}"
        )
    else:
        evidence.update(
            blocking_seqs=[health.first_pending_seq],
            blocking_rows=0,
            reason=health.last_error,
            reasons={},
            clear_command=None,
            clear_commands=[],
        )
        message = degraded_message(health)
    return Finding(
        check=LEGACY_LANE_BLOCKED if health.target_key == LEGACY_TARGET else PROJECT_LANE_BLOCKED,
        severity="critical",
        message=message,
        target_key=health.target_key,
        # What an acknowledgement compares: the rows the block keeps from the cloud.
        size=len(health.blockers) + held if health.blockers else health.pending,
        evidence=evidence,
    )


def degraded_message(health: LaneHealth) -> str:
    if health.reason_code == PROMPT_PROVENANCE_BLOCKED:
        # v2/v3 (predicted from source): a local preflight denial, not a failed push (MarkSyncBlocked).
        rows = "1 row" if health.pending == 1 else f"{health.pending} rows"
        return (
            f"lane {health.target_key!r} holds back a prompt engram's provenance preflight refused "
            f"({PROMPT_PROVENANCE_BLOCKED}: {health.last_error}): engram keeps it pending and never sends it "
            "until its local origin and session owner verify, while the lane's other rows keep delivering; "
            f"retrying does not clear it ({rows} pending)"
        )
    if health.consecutive_failures >= MAX_CONSECUTIVE_FAILURES and health.worker_gives_up:
        retry = (
            f"engram does not retry it: after {MAX_CONSECUTIVE_FAILURES} consecutive failures v1.20's worker "
            f"stops until the process restarts ({health.consecutive_failures} recorded); once the error is "
            f"fixed, {RESTART_ADVICE}"
        )
    else:
        retry = (
            "a running worker retries when its backoff ends (v1.20 stops after "
            f"{MAX_CONSECUTIVE_FAILURES} consecutive failures until it restarts)"
            if health.worker_gives_up
            else "a running worker retries when its backoff ends, at most 5 minutes apart (predicted from "
            "source: v2/v3 keep retrying past 10 failures)"
        )
    return (
        f"lane {health.target_key!r} is degraded with {health.pending} rows pending: the last push failed "
        f"({health.last_error}); no pending row fails the push contract, so fix what the error names; {retry}"
    )


def _projects_text(by_project: dict[str, int]) -> str:
    if not by_project:
        return "no enrolled project"
    return ", ".join(f"{project}: {count}" for project, count in by_project.items())


def lane_findings(db: EngramDb) -> list[Finding]:
    """The lane-blocked findings of one short read transaction of their own."""
    return read_lanes(db)[0]


@dataclass(frozen=True)
class ListedRows:
    """The rows a lane's worker lists: how many, and the first in seq order (None while none waits)."""

    count: int
    first_seq: int | None


def read_lanes(db: EngramDb) -> tuple[list[Finding], dict[str, ListedRows]]:
    """The lane findings and each live lane's rows the worker lists, in one short read transaction."""
    with db.read_transaction():
        healths = read_lane_health(db)
    return _answer(healths, db.path)


def _answer(healths: list[LaneHealth], db: Path) -> tuple[list[Finding], dict[str, ListedRows]]:
    findings = [finding for health in healths if (finding := lane_finding(health, db)) is not None]
    return findings, {
        health.target_key: ListedRows(health.pending, health.first_pending_seq) for health in healths
    }


LANE_STATE_KIND = "lane-health"
# Bumped whenever a lane finding's shape changes, so a kept answer of an older canary is never reused.
LANE_STATE_SCHEMA = "engram-canary/lane-health/v5"
# A bound on what the fingerprint cannot see (a sessions or observations row rewritten in place, which
# can turn an unrepairable blocker into a repairable one).
LANE_STATE_MAX_AGE_SECONDS = 3600.0
_SYNC_STATE_COLUMNS = ("target_key", "lifecycle", "last_error", "consecutive_failures", "reason_code")
_DERIVED_FROM = ("sessions", "observations", "user_prompts")


def lane_fingerprint(db: EngramDb) -> dict[str, Any]:
    """What lane health is computed from, in indexed reads (call inside the read transaction)."""
    connection, schema = db.connection, db.schema
    enrolled = db.enrolled_projects()
    waiting = (
        "SELECT count(*) FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL"
        + waiting_filter(schema)
    )
    high = connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()
    columns = [name for name in _SYNC_STATE_COLUMNS if schema.has_column("sync_state", name)]
    states = (
        [
            [f"x'{value.hex()}'" if isinstance(value, bytes) else value for value in row]  # a BLOB, exactly
            for row in connection.execute(f"SELECT {', '.join(columns)} FROM sync_state ORDER BY target_key")
        ]
        if "target_key" in columns
        else []
    )
    fingerprint = {
        "db": str(db.path),
        # an engram upgrade may migrate the file in place without touching a row: the answer then differs
        "schema": {"user_version": schema.user_version, "cookie": schema.cookie},
        "high_water": high[0] if high else None,
        "enrolled": sorted(enrolled),
        "waiting": {
            lane: int(connection.execute(waiting, (lane,)).fetchone()[0]) for lane in live_lanes(db, enrolled)
        },
        "sync_state": states,
        "derived_from": {
            table: connection.execute(f"SELECT max(rowid) FROM {quote_identifier(table)}").fetchone()[0]
            for table in _DERIVED_FROM
            if schema.has_table(table)
        },
    }
    normalized: dict[str, Any] = json.loads(json.dumps(fingerprint))
    return normalized


def _kept_answer(
    path: Path, fingerprint: dict[str, Any]
) -> tuple[list[Finding], dict[str, ListedRows]] | None:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        age = time.time() - float(kept["computed_at"])
        fresh = 0 <= age <= LANE_STATE_MAX_AGE_SECONDS  # a stamp from the future: the clock stepped back
        if kept["schema"] == LANE_STATE_SCHEMA and fresh and kept["fingerprint"] == fingerprint:
            findings = [Finding.model_validate(document) for document in kept["findings"]]
            listed = {
                str(lane): ListedRows(int(count), None if first is None else int(first))
                for lane, (count, first) in kept["listed_rows"].items()
            }
            return findings, listed
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # pydantic's ValidationError is a ValueError
    return None


def _keep_answer(
    path: Path, fingerprint: dict[str, Any], findings: list[Finding], listed: dict[str, ListedRows]
) -> None:
    document = {
        "schema": LANE_STATE_SCHEMA,
        "fingerprint": fingerprint,
        "computed_at": time.time(),
        "findings": [finding.model_dump(mode="json") for finding in findings],
        "listed_rows": {lane: [rows.count, rows.first_seq] for lane, rows in listed.items()},
    }
    keep_state(path, json.dumps(document))


def kept_lane_findings(db: EngramDb, *, use_cursor: bool = True) -> list[Finding]:
    return kept_lanes(db, use_cursor=use_cursor)[0]


def kept_lanes(db: EngramDb, *, use_cursor: bool = True) -> tuple[list[Finding], dict[str, ListedRows]]:
    """read_lanes through the canary's state dir: equal to a full read, which happens only when the
    fingerprint moved (rows appended, acked or quarantined, an enrollment, a sync_state change)."""
    if not use_cursor or not db.schema.has_column("sync_mutations", "project"):
        return read_lanes(db)
    path = state_file_for(db.path, LANE_STATE_KIND)
    with db.read_transaction():
        fingerprint = lane_fingerprint(db)
        kept = _kept_answer(path, fingerprint)
        if kept is not None:
            return kept
        healths = read_lane_health(db)
    findings, listed = _answer(healths, db.path)
    _keep_answer(path, fingerprint, findings, listed)
    return findings, listed


@dataclass(frozen=True)
class LaneTransition:
    event: str  # "appeared" | "gone"
    target_key: str
    line: str
    critical: bool


def lane_transitions(before: list[Finding], after: list[Finding], db: Path) -> list[LaneTransition]:
    """What `watch` says when a lane becomes blocked or clears between two full checks."""
    was = {finding.target_key: finding for finding in before if finding.check in LANE_CHECKS}
    now = {finding.target_key: finding for finding in after if finding.check in LANE_CHECKS}
    transitions = [
        LaneTransition(
            "appeared",
            str(key),
            f"engram-canary CRITICAL: {finding.check} {finding.message} db={db}",
            critical=True,
        )
        for key, finding in sorted(now.items(), key=lambda item: str(item[0]))
        if key not in was
    ]
    transitions += [
        LaneTransition(
            "gone", str(key), f"engram-canary OK: lane {key!r} is no longer blocked db={db}", False
        )
        for key in sorted(set(was) - set(now), key=str)
    ]
    return transitions
