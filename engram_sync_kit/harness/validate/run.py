"""`engram-harness validate`: rehearse what an engram version does with a real database, on copies.

The original is copied once (the backup API when it is live, like `run --db`) and never written. The
chosen engram runs against the fake cloud on that copy for up to N worker ticks, and the report says, per
lane and per project, what was delivered, stranded, refused (with the server's words), lost or
duplicated; the canary verdict, the inbox and engram's doctor before and after; and the migrations the
binary applied. The what-if applies a triage plan (claim/drop lines) to a second copy with the canary's
own commands, runs the worker again and compares.

The report is one typed model (harness.validate_model.ValidateReport); harness.validate_report renders it
as markdown and HTML, and its JSON form is what --json writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeVar

from engram_sync_kit.canary.checks import read_target_space, run_check
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import EngramDb, readable
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.inbox.selection import KeySummary, read_inbox, summarize
from engram_sync_kit.canary.report import headline
from engram_sync_kit.canary.triage.plan import TRIAGE_LOG_NAME
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.read_only import connect_read_only
from engram_sync_kit.engram_contract.worker_selection import legacy_unacked, worker_pushes
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.errors import HarnessError, StepFailed
from engram_sync_kit.harness.lanes import JournalledMutation, LaneTable, LocalMutation, MatchKey
from engram_sync_kit.harness.scenario.runner import copy_database
from engram_sync_kit.harness.validate.lanes import AckedSeqs, measure_lanes
from engram_sync_kit.harness.validate.model import (
    CanaryFinding,
    CanarySnapshot,
    Database,
    Doctor,
    DoctorCheck,
    Effect,
    EffectGroup,
    Engram,
    ForeignTarget,
    InboxKey,
    LaneRow,
    LanesHealth,
    LaneState,
    Migrations,
    Options,
    PlanOutcome,
    ProjectRow,
    Proof,
    ProofCheck,
    Refusal,
    Run,
    Tick,
    Totals,
    ValidateReport,
    WhatIf,
    Worker,
    rewrite_strings,
)
from engram_sync_kit.harness.validate.stuck import (
    blocked_lanes,
    project_name,
    read_lanes_health,
    runnable_commands,
    stuck_rows,
    way_out,
)
from engram_sync_kit.harness.world import CloudHandle, EngramDaemon, engram_version

REPORT_SCHEMA = "engram-harness/validate/v1"
PUSH_PATH = "/sync/mutations/push"
# engram v1.20's worker ticks every 30 s and has no trigger; one tick may take a moment past that.
TICK_SECONDS = 30.0
TICK_TIMEOUT = TICK_SECONDS + 20.0
# engram serve on a 1M-row database takes more than the harness's usual 20 s to answer /health.
SERVE_READY_TIMEOUT = 180.0
PLAN_OPERATIONS = (("inbox", "claim"), ("inbox", "drop"), ("repair",))
# The what-if supplies these itself: a plan line must not point the command at another database.
PLAN_RESERVED_OPTIONS = ("--db", "--apply", "--backup-dir", "--aliases", "--keep-backups", "--config")
STATUS_RANK = {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}

Progress = Callable[[str], None]
T = TypeVar("T")


class ValidateError(HarnessError):
    """validate cannot run (bad plan file, unreadable database, engram does not start)."""


@dataclass(frozen=True)
class ValidateOptions:
    db: Path
    binary: Path
    ticks: int = 10
    plan: Path | None = None
    what_if: bool = True
    allowed_projects: tuple[str, ...] = ("*",)
    aliases: Path | None = None
    work_dir: Path | None = None
    keep: bool = False
    tick_timeout: float = TICK_TIMEOUT
    run_doctor: bool = True


# ─── the plan ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class PlanStep:
    line: int
    args: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(["engram-canary", *self.args])


def parse_plan(text: str, source: str = "plan") -> list[PlanStep]:
    """`engram-canary inbox claim|drop ...` lines (the `engram-canary` word optional); # comments."""
    steps = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise ValidateError(f"{source}:{number}: cannot parse ({error})") from None
        if words and words[0] == "engram-canary":
            words = words[1:]
        if not any(tuple(words[: len(operation)]) == operation for operation in PLAN_OPERATIONS):
            raise ValidateError(
                f"{source}:{number}: only `inbox claim`, `inbox drop` and `repair` lines are allowed, "
                f"got {line!r}"
            )
        reserved = [word for word in words if word.split("=", 1)[0] in PLAN_RESERVED_OPTIONS]
        if reserved:
            raise ValidateError(
                f"{source}:{number}: {reserved[0].split('=', 1)[0]} is set by validate (it works on a copy)"
            )
        steps.append(PlanStep(number, tuple(words)))
    return steps


def read_plan(path: Path) -> list[PlanStep]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValidateError(f"--plan {path}: cannot read ({error})") from None
    return parse_plan(text, path.name)


def suggested_plan(summaries: Sequence[KeySummary], way_out: Sequence[str] = ()) -> list[PlanStep]:
    """The canary's way out of a blocked lane first (WAY_OUT: `repair`, `inbox drop --unattributed`,
    `inbox drop --seq`), then every key's telemetry noise dropped, then the memories of every key
    `inbox list` can claim claimed."""
    lines: list[str] = list(way_out)
    for summary in summaries:
        if summary.telemetry:
            lines.append(shlex.join(["inbox", "drop", "--project", summary.key, "--noise"]))
    for summary in summaries:
        if summary.count == 0:
            continue
        commands = [summary.claim_command] if summary.claim_command else []
        commands += list(summary.cwd_claim_commands.values())
        lines += [command for command in commands if command]
    return parse_plan("\n".join(lines), "suggested plan")


# ─── read-only snapshots ─────────────────────────────────────────────────────


def _read(db: Path, read: Callable[[sqlite3.Connection], T]) -> T:
    with EngramDb.open(db) as engram, engram.read_transaction() as connection:
        return read(connection)


@dataclass(frozen=True)
class SchemaSnapshot:
    user_version: int
    objects: dict[str, str]  # "table name" -> its SQL, whitespace folded
    columns: dict[str, list[str]]


def schema_snapshot(db: Path) -> SchemaSnapshot:
    def read(connection: sqlite3.Connection) -> SchemaSnapshot:
        objects = {
            f"{kind} {name}": " ".join(str(sql or "").split())
            for kind, name, sql in connection.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 1, 2"
            )
        }
        columns = {
            str(name): [str(row[1]) for row in connection.execute(f"PRAGMA table_info('{name}')")]
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        return SchemaSnapshot(version, objects, columns)

    return _read(db, read)


def schema_diff(before: SchemaSnapshot, after: SchemaSnapshot) -> Migrations:
    """What the binary changed in the copy's schema: new, dropped and changed objects, new columns."""
    old, new = before.objects, after.objects
    added_columns = {
        table: [column for column in columns if column not in before.columns.get(table, [])]
        for table, columns in after.columns.items()
        if table in before.columns
    }
    return Migrations(
        user_version=[before.user_version, after.user_version],
        added=sorted(name for name in new if name not in old),
        dropped=sorted(name for name in old if name not in new),
        changed=sorted(name for name in new if name in old and new[name] != old[name]),
        added_columns={table: columns for table, columns in added_columns.items() if columns},
    )


def canary_snapshot(db: Path) -> CanarySnapshot:
    # The canary's cursor (its state dir, which _canary_state points into validate's work dir) makes the
    # check after the run incremental over the one before it: seconds, not a full read, on 1M rows.
    result = run_check(db, CanaryConfig(), None)
    return CanarySnapshot(
        status=result.status,
        headline=headline(result),
        findings=[
            CanaryFinding(
                check=finding.check,
                severity=finding.severity,
                target_key=finding.target_key,
                key=finding.key,
                size=finding.size,
                message=finding.message,
            )
            for finding in result.findings
        ],
    )


def inbox_key(summary: KeySummary) -> InboxKey:
    """One key of `inbox list`, as the canary's JSON gives it (times in UTC, ages to the millisecond)."""
    return InboxKey(
        key=summary.key,
        count=summary.count,
        telemetry=summary.telemetry,
        total=summary.total,
        oldest=summary.oldest.strftime("%Y-%m-%dT%H:%M:%SZ") if summary.oldest is not None else None,
        oldest_age_days=round(summary.oldest_age_days, 3),
        entities=dict(sorted(summary.entities.items())),
        cwds=dict(sorted(summary.cwds.items())),
        resolved_to=summary.resolved_to,
        claim_command=summary.claim_command,
        cwd_claim_commands=dict(sorted(summary.cwd_claim_commands.items())),
        hint=summary.hint,
        missing_cwds=list(summary.missing_cwds),
    )


def inbox_snapshot(db: Path, aliases: AliasMap) -> tuple[list[InboxKey], list[KeySummary]]:
    with EngramDb.open(db) as engram:
        snapshot = read_inbox(engram, aliases)
    summaries = summarize(snapshot)
    listed = [*summaries, *([snapshot.unattributed] if snapshot.unattributed else [])]
    return [inbox_key(summary) for summary in listed], summaries


def _pending_sql(connection: sqlite3.Connection) -> str:
    columns = {row[1] for row in connection.execute("PRAGMA table_info(sync_mutations)")}
    return worker_pushes() if "project" in columns else legacy_unacked()


def worker_pending(db: Path) -> int:
    """Unacked rows engram v1.20's worker reads (the legacy lane, project empty or enrolled)."""

    def read(connection: sqlite3.Connection) -> int:
        sql = f"SELECT COUNT(*) FROM sync_mutations WHERE {_pending_sql(connection)}"
        return int(connection.execute(sql).fetchone()[0])

    try:
        return _read(db, read)
    except (CanaryError, sqlite3.Error):
        return -1


def _optional_int(value: object) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else None


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def foreign_targets(db: Path) -> list[ForeignTarget]:
    """sync_state targets outside the allowed space, with the seq and time engram last touched them."""

    with EngramDb.open(db) as engram, engram.read_transaction():
        space = read_target_space(engram)
    rows = []
    for key in space.foreign_sync_targets():
        fields = space.sync_state[key].fields
        rows.append(
            ForeignTarget(
                target_key=key,
                lifecycle=_optional_str(fields.get("lifecycle")),
                last_enqueued_seq=_optional_int(fields.get("last_enqueued_seq")),
                updated_at=_optional_str(fields.get("updated_at")),
            )
        )
    return sorted(rows, key=lambda row: (row.updated_at or "", row.target_key))


@dataclass(frozen=True)
class CloudState:
    """The legacy lane's sync_state row: what a tick reads of it."""

    lease_until: object = None
    last_error: str | None = None


def _sync_state_cloud(db: Path) -> CloudState:
    def read(connection: sqlite3.Connection) -> CloudState:
        # Named stored columns only: `SELECT *` computes every generated column a crafted file declares.
        present = {str(row[1]) for row in connection.execute("PRAGMA table_xinfo(sync_state)") if row[6] == 0}
        columns = [name for name in ("lease_until", "last_error") if name in present]
        if not columns:
            return CloudState()
        row = connection.execute(
            f"SELECT {', '.join(columns)} FROM sync_state WHERE target_key = ?", (LEGACY_TARGET,)
        ).fetchone()
        if row is None:
            return CloudState()
        values = dict(zip(columns, (readable(value) for value in row), strict=True))
        return CloudState(values.get("lease_until"), str(values.get("last_error") or "") or None)

    try:
        return _read(db, read)
    except (CanaryError, sqlite3.Error):
        return CloudState()


DOCTOR_SKIPPED = Doctor(status="skipped")


def doctor(env: EngramEnvironment) -> Doctor:
    """`engram doctor --json`: its status, summary and the checks that are not ok."""
    try:
        result = env.run(["doctor", "--json"], timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        return Doctor(status="error", error=f"engram doctor could not run: {error}")
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        detail = meaningful_stderr(result.stderr) or result.stdout.strip()
        return Doctor(status="error", error=f"engram doctor exited {result.returncode}: {detail[:300]}")
    if not isinstance(data, dict):
        return Doctor(status="error", error=f"engram doctor printed no object: {result.stdout[:300]}")
    summary = data.get("summary")
    checks = data.get("checks")
    return Doctor(
        status=str(data.get("status", "?")),
        summary={str(k): v for k, v in summary.items() if isinstance(v, int)}
        if isinstance(summary, dict)
        else {},
        checks=[
            DoctorCheck(
                check_id=_optional_str(check.get("check_id")),
                result=_optional_str(check.get("result")),
                severity=_optional_str(check.get("severity")),
                message=_optional_str(check.get("message")),
                findings=len(check.get("findings") or []),
            )
            for check in (checks if isinstance(checks, list) else [])
            if isinstance(check, dict)
        ],
    )


# ─── one rehearsal: the worker on one copy ───────────────────────────────────


@dataclass(frozen=True)
class _TickState:
    last_sync_at: object
    failures: int | None
    phase: str | None
    lease: object


def _tick_state(daemon: EngramDaemon, db: Path) -> _TickState:
    status = daemon.sync_status()
    return _TickState(
        status.get("last_sync_at"),
        _optional_int(status.get("consecutive_failures")),
        _optional_str(status.get("phase")),
        _sync_state_cloud(db).lease_until,
    )


def _tick_done(before: _TickState, now: _TickState) -> bool:
    if now.last_sync_at != before.last_sync_at or now.failures != before.failures:
        return True
    # A cycle with only unenrolled rows pending sends nothing: it shows as a new lease, then degraded.
    return bool(now.lease != before.lease and now.phase == "degraded")


@dataclass(frozen=True)
class CopyRead:
    """What validate reads of one copy, before or after a run. The what-if copy is read light before its
    run (its lanes only): the plan's effect says what it did to the inbox."""

    lane_state: list[LaneState]
    lane_health: LanesHealth
    canary: CanarySnapshot | None = None
    inbox: list[InboxKey] = field(default_factory=list)
    summaries: list[KeySummary] = field(default_factory=list)
    foreign_targets: list[ForeignTarget] = field(default_factory=list)


@dataclass(frozen=True)
class Measured:
    """What one rehearsal measured; Run (the report's) adds the reading of the copy before it."""

    ticks: list[Tick]
    ended: str
    lanes: list[LaneRow]
    refused: list[Refusal]
    unmatched_received: int
    journal_overflow: int
    doctor_before: Doctor
    doctor_after: Doctor
    worker_pending_after: int
    serve_log: str
    seconds: float
    timings: dict[str, float]
    after: CopyRead

    def run(self, before: CopyRead, migrations: Migrations | None = None) -> Run:
        after = self.after
        if after.canary is None:
            raise ValidateError("the copy after a run is read in full")  # _snapshot_copy always is
        return Run(
            ticks=self.ticks,
            ended=self.ended,
            lanes=self.lanes,
            refused=self.refused,
            unmatched_received=self.unmatched_received,
            journal_overflow=self.journal_overflow,
            doctor_before=self.doctor_before,
            doctor_after=self.doctor_after,
            worker_pending_after=self.worker_pending_after,
            serve_log=self.serve_log,
            seconds=self.seconds,
            timings=self.timings,
            canary_before=before.canary,
            canary_after=after.canary,
            inbox_before=before.inbox,
            inbox_after=after.inbox,
            foreign_targets_before=before.foreign_targets,
            foreign_targets_after=after.foreign_targets,
            lane_state_before=before.lane_state,
            lane_state_after=after.lane_state,
            lane_health_before=before.lane_health,
            lane_health=after.lane_health,
            worker=worker_words(after.lane_health),
            stuck=stuck_rows(self.lanes, after.lane_health),
            migrations=migrations,
            projects=per_project(self.lanes),
            totals=totals(self.lanes),
        )


@dataclass
class Rehearsal:
    label: str
    env: EngramEnvironment
    allowed_projects: tuple[str, ...]
    ticks: int
    tick_timeout: float
    progress: Progress
    run_doctor: bool
    # Reads the copy once engram is done with it, in this run's thread: it overlaps the other run.
    read_after: Callable[[Path], CopyRead]
    ended: str = "tick limit"  # idle | stalled | tick limit

    def run(self) -> Measured:
        db = self.env.db_path
        started = time.monotonic()
        acked_before = AckedSeqs.read(db)
        if self.run_doctor:
            self.progress(f"{self.label}: engram doctor (before)")
        doctor_before = doctor(self.env) if self.run_doctor else DOCTOR_SKIPPED
        timings = {"doctor_before": time.monotonic() - started}
        mark = time.monotonic()
        logs = self.env.root / "logs"
        logs.mkdir(exist_ok=True)
        token = secrets.token_hex(16)
        cloud = CloudHandle("process", token, list(self.allowed_projects), logs / "fake-cloud.log")
        daemon = EngramDaemon(
            self.env,
            {"ENGRAM_CLOUD_SERVER": cloud.base_url, "ENGRAM_CLOUD_TOKEN": token},
            logs / "serve.log",
        )
        ticks: list[Tick] = []
        daemon.ready_timeout = SERVE_READY_TIMEOUT
        try:
            daemon.start(autosync=True)
            timings["serve_start"] = time.monotonic() - mark
            self._play_ticks(daemon, cloud, ticks)
            daemon.stop()
            received = cloud.client.received()
            journal = cloud.client.journal()
        except (StepFailed, FakeCloudError) as error:
            # engram serve that does not start or dies, a fake cloud that stops answering: one line.
            raise ValidateError(f"{self.label}: {_one_line(str(error))}") from None
        finally:
            daemon.close()
            cloud.close()
        timings["worker"] = time.monotonic() - mark
        mark = time.monotonic()
        if self.run_doctor:
            self.progress(f"{self.label}: engram doctor (after)")
        doctor_after = doctor(self.env) if self.run_doctor else DOCTOR_SKIPPED
        timings["doctor_after"] = time.monotonic() - mark
        mark = time.monotonic()
        # Rows are streamed (harness.validate_lanes): the two runs count their lanes side by side.
        refused_keys = [
            (str(e.entity), str(e.entity_key), str(e.op), str(e.payload_digest))
            for e in journal.entries
            if e.path == PUSH_PATH and e.status >= 400
        ]
        lanes, local = measure_lanes(db, received, refused_keys, acked_before)
        refused = refused_rows(journal.entries, ticks, local)
        lane_rows = _lane_rows(lanes, local, refused)
        unmatched = lanes.unmatched_received
        del local, lanes, received
        timings["lanes"] = time.monotonic() - mark
        pending_after = worker_pending(db)
        serve_log = meaningful_stderr(daemon.log_text())[-2000:]
        seconds = round(time.monotonic() - started, 2)
        rounded = {name: round(value, 2) for name, value in timings.items()}
        mark = time.monotonic()
        after = self.read_after(db)
        rounded["read_after"] = round(time.monotonic() - mark, 2)
        return Measured(
            ticks=ticks,
            ended=self.ended,
            lanes=lane_rows,
            refused=refused.by_project,
            unmatched_received=unmatched,
            journal_overflow=journal.overflow,
            doctor_before=doctor_before,
            doctor_after=doctor_after,
            worker_pending_after=pending_after,
            serve_log=serve_log,
            seconds=seconds,
            timings=rounded,
            after=after,
        )

    def _play_ticks(self, daemon: EngramDaemon, cloud: CloudHandle, ticks: list[Tick]) -> None:
        db = self.env.db_path
        before = _tick_state(daemon, db)
        previous_pending = worker_pending(db)
        journal_mark = 0
        for number in range(1, self.ticks + 1):
            mark = time.monotonic()
            deadline = mark + self.tick_timeout
            while True:
                now = _tick_state(daemon, db)
                if _tick_done(before, now):
                    break
                if time.monotonic() > deadline or not daemon.running:
                    raise ValidateError(
                        f"{self.label}: engram's worker did not finish tick {number} within "
                        f"{self.tick_timeout:.0f}s; serve log: {_one_line(daemon.log_text())}"
                    )
                time.sleep(0.2)
            before = now
            entries = cloud.client.journal(since_id=journal_mark).entries
            journal_mark = max((entry.id for entry in entries), default=journal_mark)
            pushes = [entry for entry in entries if entry.path == PUSH_PATH]
            pending = worker_pending(db)
            tick = Tick(
                tick=number,
                seconds=round(time.monotonic() - mark, 2),
                phase=now.phase,
                consecutive_failures=now.failures,
                pushed=len(pushes),
                accepted=sum(1 for entry in pushes if entry.status == 200),
                refused=sum(1 for entry in pushes if entry.status >= 400),
                refused_projects=refused_projects(pushes),
                last_error=_sync_state_cloud(db).last_error,
                worker_pending=pending,
            )
            ticks.append(tick)
            self.progress(
                f"{self.label}: tick {number}: {tick.accepted} accepted, "
                f"{tick.refused} refused, {pending} waiting for the worker"
            )
            if pending == 0 or pending == previous_pending:
                # idle: nothing left that this worker reads, or it stopped making progress
                self.ended = "idle" if pending == 0 else "stalled"
                return
            previous_pending = pending
        self.ended = "tick limit"


def _one_line(log: str, limit: int = 500) -> str:
    return " | ".join(meaningful_stderr(log).splitlines())[-limit:] or "(empty)"


class Push(JournalledMutation, Protocol):
    """A journal entry of the fake cloud, as validate reads it."""

    @property
    def path(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def project(self) -> str | None: ...


def refused_projects(pushes: Sequence[Push]) -> list[str]:
    """Projects whose push the cloud answered >= 400; a row without a project is ''."""
    return sorted({str(entry.project or "") for entry in pushes if entry.status >= 400})


@dataclass(frozen=True)
class RefusedRows:
    keys: set[MatchKey]  # the refused mutations, as the lane table matches local rows
    by_project: list[Refusal]


def refused_rows(
    entries: Sequence[Push], ticks: Sequence[Tick], local: Sequence[LocalMutation] = ()
) -> RefusedRows:
    """Push entries the cloud answered >= 400: the rows, the attempts and engram's record of the reason.

    With LOCAL, rows are the unacked local rows the refusals matched (byte-identical rows, such as two
    saves' identical session rows, are counted each); without it, the distinct refused mutations.
    """
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    for tick in ticks:
        for project in tick.refused_projects:
            if tick.last_error:
                reasons[project][tick.last_error] += 1
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    distinct: dict[str, set[MatchKey]] = defaultdict(set)
    for entry in entries:
        if entry.path != PUSH_PATH or entry.status < 400:
            continue
        project = str(entry.project or "")
        statuses[project][str(entry.status)] += 1
        distinct[project].add(
            (str(entry.entity), str(entry.entity_key), str(entry.op), str(entry.payload_digest))
        )
    keys = set().union(*distinct.values())
    matched: Counter[str] = Counter(m.project for m in local if not m.acked and m.key in keys)
    listed = [
        Refusal(
            project=project,
            rows=matched[project] if local else len(distinct[project]),
            attempts=sum(counts.values()),
            statuses=dict(counts),
            reasons=[reason for reason, _ in reasons[project].most_common()],
        )
        for project, counts in sorted(statuses.items())
    ]
    return RefusedRows(keys, listed)


def _lane_rows(lanes: LaneTable, local: Sequence[LocalMutation], refused: RefusedRows) -> list[LaneRow]:
    refused_here: Counter[tuple[str, str]] = Counter(
        (mutation.lane, mutation.project)
        for mutation in local
        if not mutation.acked and mutation.key in refused.keys
    )
    rows = []
    for row in lanes.rows:
        held = min(row.stranded, refused_here[(row.lane, row.project)])
        rows.append(
            LaneRow(
                lane=row.lane,
                project=row.project,
                enqueued=row.enqueued,
                acked_before_run=row.acked_before_run,
                delivered=row.delivered,
                stranded=row.stranded - held,
                refused=held,
                lost=row.lost,
                duplicated=row.duplicated,
            )
        )
    return rows


COUNT_FIELDS = ("enqueued", "acked_before_run", "delivered", "stranded", "refused", "lost", "duplicated")


def _summed(lanes: Sequence[LaneRow]) -> dict[str, int]:
    return {name: sum(int(getattr(row, name)) for row in lanes) for name in COUNT_FIELDS}


def per_project(lanes: Sequence[LaneRow]) -> list[ProjectRow]:
    by_project: dict[str, list[LaneRow]] = defaultdict(list)
    for row in lanes:
        by_project[row.project].append(row)
    return [ProjectRow(project=project, **_summed(rows)) for project, rows in sorted(by_project.items())]


def totals(lanes: Sequence[LaneRow]) -> Totals:
    return Totals(**_summed(lanes))


# ─── the what-if ─────────────────────────────────────────────────────────────


def apply_plan(db: Path, steps: Sequence[PlanStep], aliases: Path, backup_dir: Path) -> list[PlanOutcome]:
    """Each plan line through the canary's own command, --apply, on the what-if copy.

    The canary's click group runs in this process (no interpreter start per line), so a plan line
    accepts exactly what `engram-canary` accepts, including options added after this was written.
    """
    # the canary's whole CLI loads only when a plan is checked line by line
    from click.testing import CliRunner

    from engram_sync_kit.canary.cli import cli as canary_cli

    runner = CliRunner()
    outcomes = []
    # A disposable copy: one backup at a time is plenty.
    settings = {"inbox": {"aliases": str(aliases)}, "backups": {"dir": str(backup_dir), "keep": 1}}
    config = backup_dir.parent / "what-if-canary.yaml"
    config.write_text(json.dumps(settings), encoding="utf-8")  # JSON is YAML
    for step in steps:
        args = ["--config", str(config), *step.args, "--db", str(db)]
        result = runner.invoke(canary_cli, [*args, "--apply"], catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise ValidateError(
                f"plan line {step.line}: {step.text}: {type(result.exception).__name__}: {result.exception}"
            )
        output = result.output.strip().splitlines()
        nothing = result.exit_code != 0 and any("nothing to" in line for line in output)
        outcomes.append(
            PlanOutcome(
                line=step.line,
                command=step.text,
                exit=result.exit_code,
                outcome="applied" if result.exit_code == 0 else ("empty" if nothing else "refused"),
                message=next(
                    (line for line in output if line.startswith(("applied", "Error", "error"))),
                    output[0] if output else "",
                )[:300],
            )
        )
    return outcomes


@dataclass(frozen=True)
class TriageEntry:
    """One line of the canary's triage log (canary.triage): the rows one --apply acked."""

    discarded: bool
    acked_seqs: tuple[int, ...]
    kept_by_preflight: int  # rows the canary's pre-flight refused to touch


def _triage_log(backup_dir: Path) -> list[TriageEntry]:
    path = backup_dir / TRIAGE_LOG_NAME
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        entries.append(
            TriageEntry(
                discarded=bool(entry.get("discarded")),
                acked_seqs=tuple(int(seq) for seq in entry.get("acked_seqs") or ()),
                kept_by_preflight=len(entry.get("refused") or []),
            )
        )
    return entries


def _rows_by_seq(db: Path, seqs: Sequence[int]) -> dict[int, tuple[str, str, bool]]:
    """seq -> (project, entity, acked) for the rows the plan touched, by primary key."""
    wanted = sorted(set(seqs))

    def read(connection: sqlite3.Connection) -> dict[int, tuple[str, str, bool]]:
        found = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT seq, project, entity, acked_at IS NOT NULL FROM sync_mutations WHERE seq IN ({marks})"
            for seq, project, entity, acked in connection.execute(sql, chunk):
                found[int(seq)] = (str(project), str(entity), bool(acked))
        return found

    return _read(db, read)


def _seqs_between(db: Path, low: int, high: int) -> list[int]:
    sql = "SELECT seq FROM sync_mutations WHERE seq > ? AND seq <= ? ORDER BY seq"
    return _read(db, lambda connection: [int(row[0]) for row in connection.execute(sql, (low, high))])


def _max_seq(db: Path) -> int:
    sql = "SELECT ifnull(MAX(seq), 0) FROM sync_mutations"
    return _read(db, lambda connection: int(connection.execute(sql).fetchone()[0]))


def plan_effect(db: Path, log: Sequence[TriageEntry], high_water: tuple[int, int]) -> Effect:
    """Which rows the applied plan discards and which it hands to the worker, per project and entity.

    Discards and claims come from the canary's triage log; the rows handed to the worker are every row
    the plan appended (seq between the high-water marks before and after it), whatever wrote them.
    """
    discarded = [seq for entry in log if entry.discarded for seq in entry.acked_seqs]
    claimed = [seq for entry in log if not entry.discarded for seq in entry.acked_seqs]
    added = _seqs_between(db, *high_water)
    rows = _rows_by_seq(db, [*discarded, *claimed, *added])

    def grouped(seqs: Sequence[int]) -> list[EffectGroup]:
        counts: Counter[tuple[str, str]] = Counter((rows[s][0], rows[s][1]) for s in seqs if s in rows)
        return [EffectGroup(project=p, entity=e, rows=n) for (p, e), n in sorted(counts.items())]

    delivered = [seq for seq in added if seq in rows and rows[seq][2]]
    return Effect(
        kept_by_preflight=sum(entry.kept_by_preflight for entry in log),
        discarded=grouped(discarded),
        discarded_rows=len(discarded),
        claimed=grouped(claimed),
        claimed_rows=len(claimed),
        to_deliver=grouped(added),
        to_deliver_rows=len(added),
        delivered_in_run=len(delivered),
        still_waiting=len(added) - len(delivered),
    )


def blocked_proof(current: Run, what_if: Run, effect: Effect) -> Proof:
    """The triage invariant, checked on the two runs: the plan makes no row worse off."""
    now = {(row.lane, row.project): row for row in current.lanes}
    then = {(row.lane, row.project): row for row in what_if.lanes}

    def delivered(rows: dict[tuple[str, str], LaneRow], key: tuple[str, str]) -> int:
        return rows[key].delivered if key in rows else 0

    def refused(rows: dict[tuple[str, str], LaneRow], key: tuple[str, str]) -> int:
        return rows[key].refused if key in rows else 0

    fewer = [
        f"lane {lane} project {project_name(project)}: {row.delivered} -> {delivered(then, (lane, project))}"
        for (lane, project), row in now.items()
        if delivered(then, (lane, project)) < row.delivered
    ]
    more_refused = [
        f"lane {lane} project {project_name(project)}: {refused(now, (lane, project))} -> {row.refused}"
        for (lane, project), row in then.items()
        if row.refused > refused(now, (lane, project))
    ]
    lost = sum(row.lost for row in then.values())
    rank_now = STATUS_RANK.get(current.canary_after.status, 3)
    rank_then = STATUS_RANK.get(what_if.canary_after.status, 3)
    waiting, ended = effect.still_waiting, what_if.ended
    remaining = [
        f"lane {lane.target_key}: "
        + (
            "; ".join(f"seq {b.seq} ({project_name(b.project)}: {b.reason})" for b in lane.blockers[:5])
            or f"{lane.lifecycle}: {lane.last_error}"
        )
        for lane in blocked_lanes(what_if.lane_health)
    ]
    checks = [
        ProofCheck(
            check="nothing blocked after the plan",
            ok=not remaining,
            detail="; ".join(remaining) or "no lane the worker reads is blocked after the plan",
        ),
        ProofCheck(
            check="no lane delivers less",
            ok=not fewer,
            detail="; ".join(fewer) or "every (lane, project) delivers at least as much",
        ),
        ProofCheck(
            check="no new refusals",
            ok=not more_refused,
            detail="; ".join(more_refused) or "no (lane, project) has more refused rows",
        ),
        ProofCheck(check="nothing lost", ok=lost == 0, detail=f"{lost} row(s) acked but never received"),
        ProofCheck(
            check="every claimed copy is read by the worker",
            ok=waiting <= max(0, what_if.worker_pending_after),
            detail=(
                f"{effect.delivered_in_run} delivered in the run, {waiting} still waiting, "
                f"{what_if.worker_pending_after} rows the worker reads are pending"
            ),
        ),
        # Copies still waiting are fine while the worker makes progress (100 rows a tick); not when it
        # stalled with them pending (a refusal or a row without a project holds the lane).
        ProofCheck(
            check="claimed copies are delivered or still flowing",
            ok=waiting == 0 or ended == "tick limit",
            detail=f"{waiting} waiting; the worker {'stalled' if ended == 'stalled' else 'ended: ' + ended}",
        ),
        ProofCheck(
            check="canary verdict no worse",
            ok=rank_then <= rank_now,
            detail=f"{current.canary_after.status} -> {what_if.canary_after.status}",
        ),
    ]
    return Proof(ok=all(check.ok for check in checks), checks=checks)


# ─── the whole validation ────────────────────────────────────────────────────


def _stat(path: Path) -> list[tuple[str, int, int]]:
    found = []
    for candidate in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(OSError):
            info = candidate.stat()
            found.append((candidate.name, info.st_size, info.st_mtime_ns))
    return found


def _aliases_copy(source: Path | None, target: Path) -> tuple[AliasMap, Path]:
    """The user's alias map, copied: a claim registers its alias, and that must land in the copy."""
    from engram_sync_kit.canary.inbox.aliases import load_aliases  # PyYAML only when a copy is made

    aliases, resolved = load_aliases(source)
    if resolved is not None and resolved.exists():
        shutil.copyfile(resolved, target)
    else:
        target.write_text(
            "# the what-if's own alias map (claims register their aliases here)\n", encoding="utf-8"
        )
    return aliases, target


@contextlib.contextmanager
def _canary_state(directory: Path) -> Iterator[None]:
    """The canary's state (its cursors) for validate's copies lives in the work dir, never in the
    tester's canary state dir; restored after. validate owns the process while it runs."""
    name = "ENGRAM_CANARY_STATE_DIR"
    saved = os.environ.get(name)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[name] = str(directory)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _light_snapshot(db: Path) -> CopyRead:
    """What the what-if copy is read for before its run: the lanes only (the plan's effect says what it
    did to the inbox; a canary check and an inbox listing cost seconds each on a large file)."""
    return CopyRead(lane_state=lane_state(db), lane_health=read_lanes_health(db))


def _snapshot_copy(db: Path, aliases: AliasMap) -> CopyRead:
    inbox, summaries = inbox_snapshot(db, aliases)
    return CopyRead(
        summaries=summaries,
        canary=canary_snapshot(db),
        inbox=inbox,
        foreign_targets=foreign_targets(db),
        lane_state=lane_state(db),
        lane_health=read_lanes_health(db),
    )


def lane_state(db: Path) -> list[LaneState]:
    """Rows per lane right now: acked, and waiting (unacked), for the before/after picture."""

    def read(connection: sqlite3.Connection) -> list[LaneState]:
        sql = (
            "SELECT target_key, SUM(acked_at IS NOT NULL), SUM(acked_at IS NULL) "
            "FROM sync_mutations GROUP BY target_key ORDER BY target_key"
        )
        return [
            LaneState(lane=str(lane), acked=int(acked), waiting=int(waiting))
            for lane, acked, waiting in connection.execute(sql)
        ]

    return _read(db, read)


# A database another process holds locked (a rollback journal under BEGIN EXCLUSIVE, say) is waited
# for this long, then refused: a copy taken under someone else's write is not the tester's data.
LOCK_WAIT_SECONDS = 5.0
SQLITE_HEADER = b"SQLite format 3\x00"


def is_live(db: Path) -> bool:
    """A -wal with frames in it means a writer has the database open (or crashed with it). An empty -wal
    (and -shm) is what a reader, such as the canary, leaves beside a closed database: not live."""
    try:
        return db.with_name(db.name + "-wal").stat().st_size > 0
    except OSError:
        return False


def refuse_irregular_db(db: Path) -> None:
    """A FIFO, a socket, a device or a directory is never opened (a FIFO's open blocks until a writer
    comes): only a regular file (or a link to one) is a database to copy."""
    try:
        mode = db.stat().st_mode
    except OSError as error:
        raise ValidateError(f"--db {db}: cannot read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ValidateError(f"--db {db}: not a regular file; expected engram's engram.db")


def copy_original(source: Path, target: Path, lock_wait: float = LOCK_WAIT_SECONDS) -> None:
    """Copy the tester's database, refusing (one line, nothing copied) one that another process holds
    locked. A rollback-journal file is byte-copied under a shared lock of our own, so no writer can
    change it mid-copy; a WAL file goes through harness.runner.copy_database (bytes when closed, the
    backup API when a -wal exists)."""
    try:
        with source.open("rb") as handle:
            header = handle.read(100)
    except OSError as error:
        raise ValidateError(f"--db {source}: cannot read ({error.strerror})") from None
    if not header.startswith(SQLITE_HEADER) or len(header) < 100 or header[18] != 1:
        copy_database(source, target)  # WAL (header[18] == 2) or not SQLite: its own one-line errors
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.closing(connect_read_only(source, timeout=lock_wait)) as original:
            original.execute("BEGIN")
            original.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the shared lock
            shutil.copyfile(source, target)
            original.rollback()
        with contextlib.closing(sqlite3.connect(target)) as check:
            verdict = check.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.OperationalError as error:
        target.unlink(missing_ok=True)
        if "locked" in str(error) or "busy" in str(error):
            raise ValidateError(
                f"--db {source}: locked by another process (waited {lock_wait:.0f} s); nothing was copied: "
                "run validate again once it lets go"
            ) from None
        raise ValidateError(f"--db {source}: cannot copy ({error})") from None
    except (OSError, sqlite3.Error) as error:
        target.unlink(missing_ok=True)
        raise ValidateError(f"--db {source}: cannot copy ({error})") from None
    if verdict != "ok":
        raise ValidateError(f"--db {source}: the copy fails SQLite's quick_check ({verdict})")


def copy_own_copy(source: Path, target: Path) -> None:
    """validate's own checked copy, which nothing else opens: its bytes, unless a -wal holds frames
    (then SQLite's backup API folds them in). On a 1M-row file this skips a backup and a quick_check."""
    if is_live(source):
        copy_database(source, target)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def validate(options: ValidateOptions, progress: Progress = lambda _message: None) -> ValidateReport:
    """Rehearse on copies of options.db; returns the typed report. Errors name the tester's own file,
    never validate's copy of it."""
    base = options.work_dir or Path(tempfile.mkdtemp(prefix="engram-validate-"))
    copies = {base / "current" / "engram-data" / "engram.db": options.db}
    try:
        with _canary_state(base / "canary-state"):
            return _validate(options, progress, base)
    except (HarnessError, CanaryError) as error:
        temporary = base if options.work_dir is None else None
        raise ValidateError(_name_in_text(str(error), copies, temporary)) from None
    finally:
        if options.work_dir is None and not options.keep:
            shutil.rmtree(base, ignore_errors=True)
        elif options.work_dir is None:
            progress(f"copies, logs and backups kept in {base}")


def _validate(options: ValidateOptions, progress: Progress, base: Path) -> ValidateReport:
    started = time.monotonic()
    if options.ticks < 1:
        raise ValidateError(f"--ticks {options.ticks}: at least one tick")
    refuse_irregular_db(options.db)
    steps = read_plan(options.plan) if options.plan is not None else None
    original_stat = _stat(options.db)
    version = engram_version(options.binary)
    base.mkdir(parents=True, exist_ok=True)
    current_env = EngramEnvironment(binary=options.binary, root=base / "current").prepare()
    progress(f"copying {options.db}")
    copy_original(options.db, current_env.db_path)
    phases = {"copy": time.monotonic() - started}
    mark = time.monotonic()
    aliases, aliases_file = _aliases_copy(options.aliases, base / "aliases.yaml")
    schema_before = schema_snapshot(current_env.db_path)
    before = _snapshot_copy(current_env.db_path, aliases)
    phases["read_before"] = time.monotonic() - mark
    rehearsals = [
        Rehearsal(
            "current",
            current_env,
            options.allowed_projects,
            options.ticks,
            options.tick_timeout,
            progress,
            options.run_doctor,
            lambda db: _snapshot_copy(db, aliases),
        )
    ]
    plan_outcomes: list[PlanOutcome] = []
    what_if_env: EngramEnvironment | None = None
    what_if_before: CopyRead | None = None
    high_water = (0, 0)
    if options.what_if:
        what_if_env = EngramEnvironment(binary=options.binary, root=base / "what-if").prepare()
        mark = time.monotonic()
        copy_own_copy(current_env.db_path, what_if_env.db_path)
        phases["what_if_copy"] = time.monotonic() - mark
        if steps is None:
            steps = suggested_plan(before.summaries, way_out(before.lane_health))
        progress(f"what-if: applying {len(steps)} plan line(s) to a second copy")
        plan_started = time.monotonic()
        before_plan = _max_seq(what_if_env.db_path)
        plan_outcomes = apply_plan(what_if_env.db_path, steps, aliases_file, base / "what-if-backups")
        high_water = (before_plan, _max_seq(what_if_env.db_path))
        phases["what_if_plan"] = time.monotonic() - plan_started
        mark = time.monotonic()
        what_if_before = _light_snapshot(what_if_env.db_path)
        phases["what_if_read_before"] = time.monotonic() - mark
        rehearsals.append(
            Rehearsal(
                "what-if",
                what_if_env,
                options.allowed_projects,
                options.ticks,
                options.tick_timeout,
                progress,
                options.run_doctor,
                lambda db: _snapshot_copy(db, aliases),
            )
        )
    mark = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(rehearsals)) as pool:
        measured = list(pool.map(lambda rehearsal: rehearsal.run(), rehearsals))
    phases["rehearsals"] = time.monotonic() - mark
    mark = time.monotonic()
    current = measured[0].run(before, schema_diff(schema_before, schema_snapshot(current_env.db_path)))
    what_if: WhatIf | None = None
    if what_if_env is not None and what_if_before is not None:
        run = measured[1].run(what_if_before)
        effect = plan_effect(what_if_env.db_path, _triage_log(base / "what-if-backups"), high_water)
        what_if = WhatIf(
            plan_source=options.plan.name if options.plan else "suggested",
            plan=plan_outcomes,
            effect=effect,
            run=run,
            proof=blocked_proof(current, run, effect),
        )
    commands = what_to_run(current, what_if, steps or [], options)
    phases["report"] = time.monotonic() - mark
    phases["total"] = time.monotonic() - started
    # engram's own time (doctor, serve's start and the worker's ticks) apart from validate's own phases;
    # the two runs go side by side, so the longer run's engram time is what validate waited.
    phases["engram"] = max(
        sum(run.timings.get(name, 0.0) for name in ENGRAM_PHASES) for run in _runs(current, what_if)
    )
    phases["own"] = max(0.0, phases["total"] - phases["engram"])
    report = ValidateReport(
        schema_=REPORT_SCHEMA,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        database=Database(
            path=str(options.db),
            size_bytes=options.db.stat().st_size,
            # validate only reads the original; a live engram may still write it meanwhile, which is said.
            original_untouched=_stat(options.db) == original_stat,
            live=is_live(options.db),
        ),
        engram=Engram(binary=str(options.binary), version=version),
        options=Options(ticks=options.ticks, allowed_projects=list(options.allowed_projects)),
        current=current,
        what_if=what_if,
        what_to_run=commands,
        timings={name: round(value, 2) for name, value in phases.items()},
    )
    temporary = base if options.work_dir is None else None
    return _name_the_testers_file(report, {current_env.db_path: options.db}, temporary)


def alarms(model: ValidateReport) -> list[str]:
    """What a script must not pass over (validate exits 3): rows lost or duplicated in a run, or a
    what-if plan that fails its proof. Stranded and refused rows are what the report is for."""
    runs = [("current", model.current)] + ([("what-if", model.what_if.run)] if model.what_if else [])
    found = [
        f"{name}: {count} row(s) {label}"
        for name, run in runs
        for label, count in (("lost", run.totals.lost), ("duplicated", run.totals.duplicated))
        if count
    ]
    if model.what_if is not None and not model.what_if.proof.ok:
        found.append("the what-if plan fails its proof")
    return found


def _runs(current: Run, what_if: WhatIf | None) -> list[Run]:
    return [current] if what_if is None else [current, what_if.run]


ENGRAM_PHASES = ("doctor_before", "worker", "doctor_after")  # "worker" includes serve's start


def worker_words(health: LanesHealth) -> Worker:
    """engram's own record of its cloud worker (the legacy lane's sync_state), in its own words."""
    lane = next((lane for lane in health.lanes if lane.target_key == LEGACY_TARGET), None)
    if lane is None:
        return Worker()
    return Worker(
        lifecycle=lane.lifecycle,
        last_error=lane.last_error,
        consecutive_failures=lane.consecutive_failures,
        pending=lane.pending,
    )


def what_to_run(
    current: Run, what_if: WhatIf | None, steps: Sequence[PlanStep], options: ValidateOptions
) -> list[str]:
    """The complete commands, in order, on the tester's own database: the what-if's lines that applied
    (the lane's way out first), or without a what-if the canary's way out of every blocked lane."""
    if what_if is not None:
        applied = {outcome.line for outcome in what_if.plan if outcome.outcome == "applied"}
        chosen = [step.args for step in steps if step.line in applied]
    else:
        chosen = [tuple(shlex.split(line)) for line in way_out(current.lane_health_before)]
        chosen = [args[1:] if args[:1] == ("engram-canary",) else args for args in chosen]
    return runnable_commands(chosen, options.db, options.aliases)


def _name_the_testers_file(
    report: ValidateReport, copies: dict[Path, Path], base: Path | None
) -> ValidateReport:
    """Every path of validate's disposable copy, as the tester knows it: the copy of their database by
    its real path, anything else under the work dir as `<validate copy>/...`."""
    return rewrite_strings(report, lambda text, _mark: _name_in_text(text, copies, base))


def _name_in_text(text: str, copies: dict[Path, Path], base: Path | None) -> str:
    for copy, real in copies.items():
        text = text.replace(str(copy), str(real))
    return text.replace(str(base), "<validate copy>") if base is not None else text
