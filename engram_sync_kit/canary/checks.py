"""The closed-target-space invariant, read from a live engram database in one short snapshot.

allowed = {cloud, cloud:inbox, local} ∪ {cloud:<p> | p enrolled} ∪ config extras. Every other
sync_state.target_key is a foreign_sync_target, every other sync_mutations.target_key a
foreign_mutation_target. Queries stay on engram's own indexes so a check is cheap on 1M rows:
distinct keys come from index skip-scans, unacked counts from idx_sync_mutations_pending ranges.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from engram_sync_kit.canary.baseline import Baseline
from engram_sync_kit.canary.config import CanaryConfig, keep_state, state_file_for
from engram_sync_kit.canary.db import (
    DatabaseUnavailable,
    EngramDb,
    SyncStateRow,
    describe_read_error,
    distinct_stored_values,
    last_seq,
)
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import (
    FOREIGN_CHECKS,
    FOREIGN_MUTATION_TARGET,
    FOREIGN_SYNC_TARGET,
    Finding,
    Status,
    alarming,
    apply_acknowledgements,
    overall_status,
)
from engram_sync_kit.canary.inbox.cursor import cursor_tripwire_findings
from engram_sync_kit.canary.lane_health import kept_lanes
from engram_sync_kit.canary.liveness import liveness_findings
from engram_sync_kit.canary.pull_side import pull_side_findings
from engram_sync_kit.canary.remotes import NO_REMOTES, RemoteStateKeys, remote_state_keys
from engram_sync_kit.canary.schema_support import (
    allows_unknown_remote_keys,
    identify,
    lane_note,
    repair_hint,
    waiting_filter,
)
from engram_sync_kit.canary.stage_a import stage_a_findings
from engram_sync_kit.canary.targets import INBOX_TARGET, LOCAL_TARGET, allowed_targets, project_target
from engram_sync_kit.canary.undecodable import undecodable_findings
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.remotes import REMOTE_STATE_KEY_PREFIX, is_remote_state_key

RESULT_SCHEMA = "engram-canary/check/v1"
__all__ = ["FOREIGN_CHECKS", "FOREIGN_MUTATION_TARGET", "FOREIGN_SYNC_TARGET", "overall_status"]
UNDELIVERED_PROJECT_LANE = "undelivered_project_lane"
SYNC_STATE_FIELDS = ("lifecycle", "last_enqueued_seq", "last_acked_seq", "updated_at")


class CheckResult(BaseModel):
    """The stable JSON document of `engram-canary check --format json` (schema engram-canary/check/v1)."""

    schema_: str = Field(default=RESULT_SCHEMA, alias="schema")
    status: str
    db: str
    checked_at: str
    allowed_targets: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None

    model_config = {"populate_by_name": True}

    @property
    def exit_status(self) -> Status:
        return Status[self.status.upper()]


@dataclass
class TargetSpace:
    """What the invariant needs from one snapshot: the allowed set and the keys that exist."""

    enrolled: list[str]
    allowed: frozenset[str]
    sync_state: dict[str, SyncStateRow]
    mutation_targets: set[str] = field(default_factory=set)
    last_seq: int = 0
    remotes: RemoteStateKeys = NO_REMOTES
    # The stored bytes of the mutation targets whose text is not what is stored (not valid UTF-8).
    stored_keys: dict[str, bytes] = field(default_factory=dict)

    def foreign_sync_targets(self) -> list[str]:
        return sorted(key for key in self.sync_state if key not in self.allowed)

    def foreign_mutation_targets(self) -> list[str]:
        return sorted(key for key in self.mutation_targets if key not in self.allowed)

    def foreign_keys(self) -> set[str]:
        return set(self.foreign_sync_targets()) | set(self.foreign_mutation_targets())


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def mutation_targets_since(connection: sqlite3.Connection, after_seq: int) -> tuple[set[str], int]:
    """Target keys of rows appended after `after_seq` (a primary-key range), and the new high mark."""
    # ORDER BY seq keeps the planner on the rowid range; DISTINCT alone makes it scan a whole index.
    keys = {
        str(row[0])
        for row in connection.execute(
            "SELECT target_key FROM sync_mutations WHERE seq > ? ORDER BY seq", (after_seq,)
        )
    }
    return keys, last_seq(connection)


def read_target_space(
    db: EngramDb, extra_allowed: Iterable[str] = (), *, mutations: tuple[set[str], int] | None = None
) -> TargetSpace:
    """`mutations`: the sync_mutations target keys and last seq the caller already knows (the watcher's
    incremental view); without it they are read by skip-scan."""
    connection = db.connection
    enrolled = db.enrolled_projects()
    stored: dict[str, bytes] = {}
    if mutations is None:
        stored = distinct_stored_values(connection, "target_key")
        keys, seq = set(stored), None
    else:
        keys, seq = mutations
    sync_state = db.sync_state(SYNC_STATE_FIELDS)
    remotes = remote_state_keys(connection)
    # The live remotes' `cloud@<id>` keys are allowed; while cloud.json cannot be read the remotes are
    # unknown, so no key of that shape is called foreign (engram's doctor does the same), but only on a
    # generation that has remotes: elsewhere such a key could hide a foreign one.
    remote_keys = remotes.live
    if remote_keys is None:
        remote_keys = frozenset(
            key
            for key in {*sync_state, *keys}
            if is_remote_state_key(key) and allows_unknown_remote_keys(identify(db))
        )
    return TargetSpace(
        enrolled=sorted(enrolled),
        allowed=allowed_targets(enrolled, extra_allowed) | remote_keys,
        sync_state=sync_state,
        mutation_targets=set(keys),
        last_seq=last_seq(connection) if seq is None else seq,
        remotes=remotes,
        stored_keys={key: value for key, value in stored.items() if value != key.encode()},
    )


# Past this many foreign targets' project counts, one scan of the unacked rows answers the rest.
PROJECT_QUERIES_BEFORE_ONE_SCAN = 32


class EvidenceReader:
    """Unacked-row counts for foreign targets, computed lazily and cached within one snapshot."""

    def __init__(
        self,
        db: EngramDb,
        kept: dict[str, dict[str, int]] | None = None,
        *,
        journal_targets: Set[str] | None = None,
        stored_keys: Mapping[str, bytes] | None = None,
    ) -> None:
        """`journal_targets`: every target key the journal holds in this snapshot (the target space's);
        a key outside it has no rows, and is answered without a query. `stored_keys`: the space's."""
        self.db = db
        self.journal_targets = journal_targets
        self._unacked: dict[str, int] = {}
        # project_unacked for many projects at once reads the unacked rows once, by stored project bytes
        self._unacked_by_stored_project: dict[bytes, dict[str, int]] | None = None
        self._project_queries = 0
        self.connection = db.connection
        schema = db.schema
        self.has_acked = schema.has_column("sync_mutations", "acked_at")
        self.has_project = schema.has_column("sync_mutations", "project")
        self.waiting = waiting_filter(schema)  # v2/v3: a quarantined row is not waiting for delivery
        self._projects_by_target: dict[str, list[str]] | None = None
        # Stored bytes of keys and projects that are not valid UTF-8: their rows are found by these.
        self.stored_keys: dict[str, bytes] = dict(stored_keys or {})
        self._stored_projects: dict[str, bytes] = {}
        # project_unacked answers kept from an earlier check of the same unchanged rows (the state dir)
        self.kept = kept or {}
        self.answered: dict[str, dict[str, int]] = {}

    @functools.cached_property
    def lane_note(self) -> str:
        return lane_note(identify(self.db))

    @functools.cached_property
    def repair_hint(self) -> str | None:
        return repair_hint(identify(self.db))

    def unacked_on_target(self, target_key: str) -> int | None:
        if not self.has_acked:
            return None
        if target_key in self._unacked:
            return self._unacked[target_key]
        if self.journal_targets is not None and target_key not in self.journal_targets:
            return 0
        row = self.connection.execute(
            "SELECT count(*) FROM sync_mutations WHERE target_key = CAST(? AS TEXT) AND acked_at IS NULL"
            + self.waiting,
            (self._stored_key(target_key),),
        ).fetchone()
        self._unacked[target_key] = int(row[0])
        return self._unacked[target_key]

    def _stored_key(self, target_key: str) -> bytes:
        return self.stored_keys.get(target_key) or target_key.encode()

    def rows_on_target(self, target_key: str) -> dict[str, Any]:
        row = self.connection.execute(
            "SELECT count(*), min(seq), max(seq) FROM sync_mutations WHERE target_key = CAST(? AS TEXT)",
            (self._stored_key(target_key),),
        ).fetchone()
        return {"rows": int(row[0]), "first_seq": row[1], "last_seq": row[2]}

    def projects_mapping_to(self, target_key: str) -> list[str]:
        if not self.has_project:
            return []
        if self._projects_by_target is None:
            # One pass over the distinct projects, not one per foreign target (10k targets: 100M calls).
            by_target: dict[str, list[str]] = {}
            stored = distinct_stored_values(self.connection, "project")
            for project in sorted(stored):
                if project:
                    by_target.setdefault(project_target(project), []).append(project)
            self._projects_by_target = by_target
            self._stored_projects = stored
        return list(self._projects_by_target.get(target_key, ()))

    def project_unacked(self, projects: list[str]) -> dict[str, int]:
        """Unacked rows of these projects, per lane (on v1.20 that is the legacy 'cloud' lane)."""
        if not self.has_acked or not projects:
            return {}
        memo = "\x1f".join(projects)
        if memo in self.kept:
            self.answered[memo] = dict(self.kept[memo])
            return dict(self.kept[memo])
        stored = {self._stored_projects.get(project) or project.encode() for project in projects}
        by_lane: dict[str, int] = {}
        self._project_queries += 1
        if (
            self._unacked_by_stored_project is None
            and self._project_queries > PROJECT_QUERIES_BEFORE_ONE_SCAN
        ):
            self.read_unacked_by_project()
        if self._unacked_by_stored_project is not None:
            for project in stored:
                for lane, count in self._unacked_by_stored_project.get(project, {}).items():
                    by_lane[lane] = by_lane.get(lane, 0) + count
        else:
            marks = ", ".join("CAST(? AS TEXT)" for _ in stored)
            for lane, count in self.connection.execute(
                f"SELECT target_key, count(*) FROM sync_mutations "
                f"WHERE project IN ({marks}) AND acked_at IS NULL{self.waiting} GROUP BY target_key",
                sorted(stored),
            ):
                by_lane[str(lane)] = by_lane.get(str(lane), 0) + int(count)
        self.answered[memo] = dict(by_lane)
        return by_lane

    def read_unacked_by_project(self) -> None:
        """Read every unacked row's (project, lane) once, so project_unacked asks no more queries: one
        scan instead of one indexed query per foreign target (10k targets: 10k queries)."""
        if not self.has_acked or not self.has_project or self._unacked_by_stored_project is not None:
            return
        by_project: dict[bytes, dict[str, int]] = {}
        for project, lane, count in self.connection.execute(
            "SELECT CAST(project AS BLOB), target_key, count(*) FROM sync_mutations "
            f"WHERE typeof(project) = 'text' AND acked_at IS NULL{self.waiting} GROUP BY project, target_key"
        ):
            lanes = by_project.setdefault(bytes(project), {})
            lanes[str(lane)] = lanes.get(str(lane), 0) + int(count)
        self._unacked_by_stored_project = by_project

    def sync_target_evidence(self, row: SyncStateRow) -> dict[str, Any]:
        projects = self.projects_mapping_to(row.target_key)
        by_lane = self.project_unacked(projects)
        evidence: dict[str, Any] = {"target_key": row.target_key, **row.fields}
        evidence["unacked_rows"] = self.unacked_on_target(row.target_key)
        if self.has_project:
            evidence["projects"] = projects
            evidence["project_unacked_rows"] = sum(by_lane.values())
            evidence["project_unacked_by_lane"] = by_lane
            evidence["note"] = self.lane_note
        if self.repair_hint is not None:
            evidence["repair"] = self.repair_hint
        return evidence


def orphaned_remote_note(key: str) -> str:
    remote = key.removeprefix(REMOTE_STATE_KEY_PREFIX)
    return (
        f"orphaned: no remote in cloud.json has id {remote} (a per-project remote's state key; a removed "
        "remote or a rotated token leaves one behind; engram's doctor warns orphaned remote sync state)"
    )


def stuck_rows(evidence: dict[str, Any]) -> int:
    """The rows waiting on a foreign target or mapped to it by project, each once: a legacy row on the
    target itself that carries the target's project is in both counts."""
    on_target = int(evidence.get("unacked_rows") or 0)
    of_projects = int(evidence.get("project_unacked_rows") or 0)
    by_lane = evidence.get("project_unacked_by_lane")
    both = int(by_lane.get(evidence.get("target_key"), 0)) if isinstance(by_lane, dict) else 0
    return on_target + of_projects - both


def foreign_target_findings(
    space: TargetSpace, reader: EvidenceReader, config: CanaryConfig, only: Iterable[str] | None = None
) -> list[Finding]:
    """Findings for the foreign targets of `space` (restricted to `only` when given)."""
    wanted = set(only) if only is not None else None
    reader.stored_keys.update(space.stored_keys)
    critical_rows = config.thresholds.critical_unacked_rows
    findings: list[Finding] = []
    for key in space.foreign_sync_targets():
        if wanted is not None and key not in wanted:
            continue
        evidence = reader.sync_target_evidence(space.sync_state[key])
        if is_remote_state_key(key):
            evidence["remote_state"] = orphaned_remote_note(key)
        rows = stuck_rows(evidence)
        findings.append(
            Finding(
                check=FOREIGN_SYNC_TARGET,
                severity="critical" if rows >= critical_rows else "warning",
                message=f"sync target {key} is outside the closed target space ({rows} unacked rows)",
                target_key=key,
                size=rows,
                evidence=evidence,
            )
        )
    for key in space.foreign_mutation_targets():
        if wanted is not None and key not in wanted:
            continue
        evidence = {"target_key": key, **reader.rows_on_target(key)}
        evidence["unacked_rows"] = reader.unacked_on_target(key)
        evidence["in_sync_state"] = key in space.sync_state
        rows = stuck_rows(evidence)
        findings.append(
            Finding(
                check=FOREIGN_MUTATION_TARGET,
                severity="critical" if rows >= critical_rows else "warning",
                message=(
                    f"{evidence['rows']} sync_mutations rows target {key}, outside the closed target space "
                    f"({rows} unacked)"
                ),
                target_key=key,
                size=rows,
                evidence=evidence,
            )
        )
    return findings


def undelivered_lane_findings(space: TargetSpace, reader: EvidenceReader) -> list[Finding]:
    """Unacked rows on an allowed per-project lane: engram v1.20's worker reads only the legacy lane
    (the design's Problem 6), so these rows never deliver although their target is legitimate."""
    findings: list[Finding] = []
    lanes = space.mutation_targets & space.allowed - {LEGACY_TARGET, LOCAL_TARGET, INBOX_TARGET}
    for key in sorted(lanes):
        unacked = reader.unacked_on_target(key)
        if not unacked:
            continue
        findings.append(
            Finding(
                check=UNDELIVERED_PROJECT_LANE,
                severity="warning",
                message=(
                    f"{unacked} unacked rows wait on per-project lane {key}; engram's worker delivers only "
                    f"from the legacy lane '{LEGACY_TARGET}', so they never deliver (design, Problem 6)"
                ),
                target_key=key,
                size=unacked,
                evidence={"target_key": key, **reader.rows_on_target(key), "unacked_rows": unacked},
            )
        )
    return findings


def unacked_by_target(space: TargetSpace, reader: EvidenceReader) -> dict[str, int | None]:
    return {key: reader.unacked_on_target(key) for key in sorted(space.mutation_targets)}


def summarize(
    space: TargetSpace, reader: EvidenceReader, unacked: dict[str, int | None] | None = None
) -> dict[str, Any]:
    """What the snapshot holds, independent of findings and acknowledgements."""
    unacked = unacked if unacked is not None else unacked_by_target(space, reader)
    return {
        "foreign_sync_targets": len(space.foreign_sync_targets()),
        "foreign_mutation_targets": len(space.foreign_mutation_targets()),
        "sync_state_targets": len(space.sync_state),
        "enrolled_projects": space.enrolled,
        "last_seq": space.last_seq,
        "unacked_rows_by_target": unacked,
        "unacked_rows": sum(value or 0 for value in unacked.values()),
        "legacy_target": LEGACY_TARGET,
        "remote_state_keys": space.remotes.summary(),
    }


def count_findings(findings: list[Finding]) -> dict[str, int]:
    """Counts that only unacknowledged findings enter, plus how many are acknowledged."""
    foreign = {f.target_key for f in findings if f.check in FOREIGN_CHECKS}
    alarm = {f.target_key for f in alarming(findings) if f.check in FOREIGN_CHECKS}
    never_acknowledged = {
        f.target_key for f in findings if f.check in FOREIGN_CHECKS and f.acknowledgement is None
    }
    return {
        "foreign_targets": len(foreign),
        "new_foreign_targets": len(alarm),
        "known_foreign_targets": len(foreign - alarm),
        "never_acknowledged_foreign_targets": len(never_acknowledged),
        "other_findings": len([f for f in alarming(findings) if f.check not in FOREIGN_CHECKS]),
        "unacknowledged_findings": len(alarming(findings)),
        "acknowledged_findings": len([f for f in findings if f.acknowledged]),
    }


EVIDENCE_KIND = "evidence"
EVIDENCE_MAX_AGE_SECONDS = 3600.0


def load_evidence(db_path: Path, fingerprint: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Kept per-project counts, when they were taken from the same rows less than an hour ago."""
    try:
        kept = json.loads(state_file_for(db_path, EVIDENCE_KIND).read_text(encoding="utf-8"))
        fresh = time.time() - float(kept["computed_at"]) <= EVIDENCE_MAX_AGE_SECONDS
        if fresh and kept["fingerprint"] == json.loads(json.dumps(fingerprint)):
            answers = kept["answers"]
            return {
                str(key): {str(lane): int(n) for lane, n in lanes.items()} for key, lanes in answers.items()
            }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {}


def save_evidence(db_path: Path, fingerprint: dict[str, Any], answers: dict[str, dict[str, int]]) -> None:
    path = state_file_for(db_path, EVIDENCE_KIND)
    document = {"fingerprint": fingerprint, "computed_at": time.time(), "answers": answers}
    keep_state(path, json.dumps(document))


def check_connection(
    db: EngramDb, config: CanaryConfig, baseline: Baseline | None, *, use_cursor: bool = True
) -> CheckResult:
    """One full check in one short read transaction."""
    return check_snapshot(db, config, baseline, use_cursor=use_cursor)[0]


def check_snapshot(
    db: EngramDb,
    config: CanaryConfig,
    baseline: Baseline | None,
    *,
    include_inbox: bool = True,
    use_cursor: bool = True,
) -> tuple[CheckResult, TargetSpace]:
    """The full check and the target space it saw (the watcher keeps the latter)."""
    db_path = db.path
    with db.read_transaction():
        space = read_target_space(db, config.allowed_targets)
        reader = EvidenceReader(db, journal_targets=space.mutation_targets, stored_keys=space.stored_keys)
        unacked = unacked_by_target(space, reader)
        # The per-project counts of foreign targets read every row of those projects; while no row was
        # added or acked (same last seq, same unacked count per target) the last check's answers hold.
        fingerprint = {"last_seq": space.last_seq, "unacked": unacked, "waiting": reader.waiting}
        reader.kept = load_evidence(db_path, fingerprint) if use_cursor else {}
        findings = foreign_target_findings(space, reader, config)
        kind = identify(db)
        if not kind.per_project_lanes_live:
            findings.extend(undelivered_lane_findings(space, reader))
        summary = summarize(space, reader, unacked)
        if use_cursor and reader.answered != reader.kept:
            save_evidence(db_path, fingerprint, reader.answered)
        summary["engram_schema"] = kind.version
        summary["lane_model"] = str(kind.lane_model)
    # The inbox view takes its own short read transaction.
    if include_inbox:
        # Through the cursor in the canary's state dir: an unchanged inbox is not read again.
        tripwires, summary["inbox_keys"] = cursor_tripwire_findings(db, config, use_cursor=use_cursor)
        findings.extend(tripwires)
    # Lane health (canary.lane_health) takes its own short read transaction as well, through its state.
    lanes, listed_rows = kept_lanes(db, use_cursor=use_cursor)
    findings.extend(lanes)
    # Liveness (canary.liveness) depends on the clock: read on every check, in its own read transaction;
    # the rows each lane lists come with lane health's answer (counting them costs ~0.1 s per 100k).
    alive, summary["sync_liveness"] = liveness_findings(
        db, config.thresholds.stall_after_seconds, listed_rows=listed_rows
    )
    findings.extend(alive)
    pulled, summary["pull_side"] = pull_side_findings(db, config.thresholds.stall_after_seconds)
    findings.extend(pulled)
    # Stage A's assumption (design §4): no session spans two directories. Its own read transaction.
    stage_a, summary["stage_a"] = stage_a_findings(db, use_cursor=use_cursor)
    findings.extend(stage_a)
    # Payloads that are not valid UTF-8, named by seq (the reads above replace their bad bytes).
    undecodable, counted = undecodable_findings(db, use_cursor=use_cursor)
    findings.extend(undecodable)
    summary.update(counted)
    return finish(findings, summary, db_path, config, baseline, sorted(space.allowed)), space


def finish(
    findings: list[Finding],
    summary: dict[str, Any],
    db_path: Path,
    config: CanaryConfig,
    baseline: Baseline | None,
    allowed: list[str],
) -> CheckResult:
    """Acknowledgements, counts and the status: the same policy whoever collected the findings."""
    checked_at = datetime.now(UTC)
    if baseline is not None:
        findings = apply_acknowledgements(findings, baseline.acknowledgements_for(db_path), checked_at)
    summary.update(count_findings(findings))
    return CheckResult(
        status=overall_status(findings, config.thresholds.critical_new_foreign_targets).label,
        db=str(db_path),
        checked_at=checked_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        allowed_targets=allowed,
        findings=findings,
        summary=summary,
    )


def run_check(
    db_path: Path, config: CanaryConfig, baseline: Baseline | None, *, use_cursor: bool = True
) -> CheckResult:
    """Open, check, close. An unreadable or non-engram file is UNKNOWN, never OK."""
    try:
        db = EngramDb.open(db_path)
    except DatabaseUnavailable as error:
        return unknown_result(db_path, str(error))
    try:
        return check_connection(db, config, baseline, use_cursor=use_cursor)
    except sqlite3.DatabaseError as error:
        return unknown_result(db_path, describe_read_error(db_path, error, "read failed"))
    except CanaryError as error:
        return unknown_result(db_path, str(error))
    finally:
        db.close()


def unknown_result(db_path: Path, error: str) -> CheckResult:
    return CheckResult(status=Status.UNKNOWN.label, db=str(db_path), checked_at=now_iso(), error=error)
