"""`engram-canary reconcile`: does the user's own cloud hold every row the local journal says was acked?

A local ``acked_at`` only proves the client got a 200 (engram #264, #298). Reconcile reads the local
journal read-only, reads the cloud through its GET routes only, and matches each acked row to what the
cloud holds by (entity, entity_key, op, payload digest), with the harness lanes' one rule
(engram_contract.ledger): identical rows each need their own copy, given in seq order.

- delivered: acked locally and present in the cloud, through one of three doors:
  ``mutation`` (the mutation pull holds the same payload), ``chunk`` (a chunk pushed by
  `engram sync --cloud` carries it in its ``mutations``), ``current_state`` (the cloud holds the entity's
  current row, carrying every field the journal row had: the chunk path exports rows, not payloads);
- lost: acked locally and absent: CRITICAL, with seq, entity, key and acked_at as evidence;
- pending: not acked yet; not_expected: rows of projects that are not enrolled (never pushed);
- triaged: acked by the kit's own triage --apply (dropped, or replaced by a repaired copy), as its triage
  log records, so never meant for the cloud;
- cloud_only: cloud rows of entities this journal never wrote (other devices), for information.

The pull side (upstream #693, a receiver falling behind): the cloud rows of other devices above the
worker's pull cursor (engram_contract.pull_apply). When the oldest of them has waited in the cloud longer
than `thresholds.stall_after_seconds`, the status is WARNING: this machine is not receiving.

The typed result is canary.reconcile_result's; canary.report renders it (text, JSON, Prometheus).
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.cloud_client import (
    DEFAULT_TIMEOUT_SECONDS,
    CloudMutation,
    CloudReader,
    CloudSettings,
    one_line,
    resolve_settings,
)
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import Status
from engram_sync_kit.canary.reconcile_result import (
    LOST_EVIDENCE_LIMIT,
    LaneReport,
    LostRow,
    PullSide,
    ReconcileResult,
)
from engram_sync_kit.canary.report import (
    render_json,
    render_reconcile_prometheus,
    render_reconcile_text,
    write_reconcile_textfile,
)
from engram_sync_kit.canary.targets import normalize_project
from engram_sync_kit.canary.triage_log import logged_acks
from engram_sync_kit.engram_contract import LEGACY_TARGET, carries_fields, decoded_payload, payload_digest
from engram_sync_kit.engram_contract.ledger import Ledger, Need
from engram_sync_kit.engram_contract.pull_apply import APPLIED_ENTITY_ROWS, PULL_CURSOR_COLUMN, not_pulled_yet

# How far the cloud's clock may lag the local one, and how far a row may wait between its local write and
# its arrival in the cloud, for --since: the cloud side is read from (since - this).
SKEW_ALLOWANCE = timedelta(hours=1)
SQLITE_TIME = "%Y-%m-%d %H:%M:%S"
# How far a row's acked_at may be from its triage log entry's time and still be that --apply's ack.
TRIAGE_ACK_SLACK = timedelta(minutes=5)
# chunks the real server derives from mutation pushes (cloudstore.go InsertMutationBatch): the mutation
# pull already holds their rows, so reading them again would only cost requests.
MATERIALIZED_CHUNK_CREATOR = "mutation-push"
CURRENT_STATE_KEYS = {"session": "id", "observation": "sync_id", "prompt": "sync_id"}
_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

MatchKey = tuple[str, str, str, bytes]
EntityKey = tuple[str, str]


# a real cloud's current state may carry the project normalized; the journal row has it as saved
CLOUD_REWRITES = frozenset({"project"})


def _digest(payload: Any) -> bytes:
    """engram_contract.payload_digest as 32 raw bytes: a third of the hex text's memory per row."""
    return bytes.fromhex(payload_digest(payload))


class ReconcileError(CanaryError):
    """The local journal cannot be reconciled (bad --since, unreadable database)."""


def parse_since(text: str, now: datetime) -> datetime:
    """'24h', '7d', '90m', '1d12h', or an ISO time (UTC unless it says otherwise)."""
    raw = text.strip()
    try:
        if _DURATION.fullmatch(raw) or (raw and re.fullmatch(r"(\d+\s*[smhdw]\s*)+", raw)):
            seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION.findall(raw))
            moment = now - timedelta(seconds=seconds)
        else:
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        _ = moment - SKEW_ALLOWANCE  # the cloud-side window starts there: it must be a date too
    except ValueError:
        raise ReconcileError(
            f"--since {text!r}: expected a duration like 24h, 7d, 90m or an ISO time like 2026-11-30T12:00:00Z"
        ) from None
    except OverflowError:
        raise ReconcileError(f"--since {text!r}: reaches beyond the calendar (year 1 to 9999)") from None
    return moment


@dataclass(slots=True)
class LocalRow:
    seq: int
    lane: str
    project: str
    key: MatchKey  # (entity, entity_key, op, payload digest); the same tuple keys the matcher's index
    acked_at: str

    @property
    def entity(self) -> str:
        return self.key[0]

    @property
    def entity_key(self) -> str:
        return self.key[1]

    @property
    def op(self) -> str:
        return self.key[2]


@dataclass
class Journal:
    rows: list[LocalRow]  # the acked rows of enrolled projects: the ones that must be in the cloud
    tallies: dict[tuple[str, str], Counter[str]]  # (lane, project) -> acked / pending / not_expected
    # entity_key of every local-source row, in or out of the window: a cloud row with one of these keys
    # is this device's, never "cloud-only"
    written_keys: set[str]
    enrolled: frozenset[str]
    acked_before_window: int = 0
    pull_cursor: int | None = None  # the legacy lane's last_pulled_seq; None: no such row or column


def read_journal(db: EngramDb, acked_since: datetime | None) -> Journal:
    """Every local-source row acked in the window plus every unacked row, in one short read transaction."""
    triaged = logged_acks(db.path)
    try:
        with db.read_transaction():
            return _journal(db, acked_since, triaged)
    except sqlite3.DatabaseError as error:
        raise ReconcileError(f"{db.path}: read failed ({error})") from None


def _journal(db: EngramDb, acked_since: datetime | None, triaged: dict[int, datetime]) -> Journal:
    connection, schema = db.connection, db.schema
    enrolled = frozenset(normalize_project(p) for p in db.enrolled_projects())

    def has(column: str) -> bool:
        return schema.has_column("sync_mutations", column)

    project = "COALESCE(project, '')" if has("project") else "''"
    settled = (
        "COALESCE(disposition, 'pending') NOT IN ('superseded', 'quarantined')" if has("disposition") else "1"
    )
    local = "source = 'local'" if has("source") else "1"
    written: set[str] = set()
    acked_before = 0
    window = ""
    parameters: list[str] = []
    if acked_since is not None:
        stamp = acked_since.astimezone(UTC).strftime(SQLITE_TIME)
        window, parameters = "AND (acked_at IS NULL OR acked_at >= ?)", [stamp]
        older = connection.execute(
            f"SELECT COUNT(*) FROM sync_mutations WHERE {local} AND acked_at < ?", [stamp]
        ).fetchone()
        acked_before = int(older[0])
        written.update(
            str(key)
            for (key,) in connection.execute(f"SELECT DISTINCT entity_key FROM sync_mutations WHERE {local}")
        )
    cursor = connection.execute(
        f"SELECT seq, target_key, {project}, entity, entity_key, op, payload, acked_at, {settled} "
        f"FROM sync_mutations WHERE {local} {window} ORDER BY seq",
        parameters,
    )
    shared: dict[str, str] = {}  # one object per repeated value (lanes, projects, entities, ack times)
    expected_project: dict[str, bool] = {}
    tallies: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    rows = []
    for seq, lane, proj, entity, entity_key, op, payload, acked_at, live in cursor:
        proj = shared.setdefault(str(proj), str(proj))
        lane = shared.setdefault(str(lane), str(lane))
        if proj not in expected_project:
            expected_project[proj] = normalize_project(proj) in enrolled
        entity_key = str(entity_key)
        written.add(entity_key)
        tally = tallies[(lane, proj)]
        if not (live and expected_project[proj]):
            tally["not_expected"] += 1
        elif acked_at is None:
            tally["pending"] += 1
        elif _acked_by_triage(int(seq), acked_at, triaged):
            tally["triaged"] += 1
        else:  # only rows that must be in the cloud need their digest
            tally["acked"] += 1
            key = (shared.setdefault(entity, entity), entity_key, shared.setdefault(op, op), _digest(payload))
            rows.append(LocalRow(int(seq), lane, proj, key, shared.setdefault(acked_at, acked_at)))
    return Journal(rows, dict(tallies), written, enrolled, acked_before, _pull_cursor(db))


def _pull_cursor(db: EngramDb) -> int | None:
    if not db.schema.has_column("sync_state", PULL_CURSOR_COLUMN):
        return None
    row = db.connection.execute(
        f"SELECT {PULL_CURSOR_COLUMN} FROM sync_state WHERE target_key = ?", (LEGACY_TARGET,)
    ).fetchone()
    return row[0] if row is not None and isinstance(row[0], int) and not isinstance(row[0], bool) else None


def _acked_by_triage(seq: int, acked_at: str, triaged: dict[int, datetime]) -> bool:
    logged = triaged.get(seq)
    if logged is None:
        return False
    try:
        moment = datetime.strptime(str(acked_at), SQLITE_TIME).replace(tzinfo=UTC)
    except ValueError:
        return False
    return abs(moment - logged) <= TRIAGE_ACK_SLACK


def read_payloads(db: EngramDb, seqs: Sequence[int]) -> dict[int, Any]:
    """The decoded payloads of a few rows (the unmatched ones), read again instead of held in memory."""
    out: dict[int, Any] = {}
    if not seqs:
        return out
    with db.read_transaction() as connection:
        for start in range(0, len(seqs), 500):
            part = list(seqs[start : start + 500])
            marks = ",".join("?" * len(part))
            for seq, payload in connection.execute(
                f"SELECT seq, payload FROM sync_mutations WHERE seq IN ({marks})", part
            ):
                try:
                    out[int(seq)] = json.loads(payload)
                except (TypeError, ValueError):
                    out[int(seq)] = payload
    return out


# ----- the result -----


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def unknown(db_path: Path, error: str, cloud_url: str | None = None) -> ReconcileResult:
    return ReconcileResult(
        status=Status.UNKNOWN.label,
        db=str(db_path),
        cloud_url=cloud_url,
        checked_at=now_iso(),
        error=one_line(error, 400),
    )


# ----- matching -----


def _rank(row: LocalRow) -> tuple[int, int]:
    return Need.OWED, row.seq  # every row read here is acked: each is owed its copy


@dataclass
class Matcher:
    """Acked, expected local rows waiting for their copy in the cloud, given copies by
    engram_contract.ledger's one rule as the cloud's rows stream past."""

    journal: Journal
    waiting: Ledger[MatchKey, LocalRow] = field(default_factory=lambda: Ledger(_rank))
    waiting_keys: set[str] = field(default_factory=set)
    via: Counter[str] = field(default_factory=Counter)
    states: defaultdict[EntityKey, list[Any]] = field(default_factory=lambda: defaultdict(list))
    cloud_only: Counter[str] = field(default_factory=Counter)
    cloud_rows: int = 0

    def __post_init__(self) -> None:
        for row in self.journal.rows:
            self.waiting.add(row.key, row)
            self.waiting_keys.add(row.entity_key)

    def _take(self, key: MatchKey, door: str) -> bool:
        if self.waiting.take(key) is None:
            return False
        self.via[door] += 1
        return True

    def remaining(self) -> list[LocalRow]:
        return self.waiting.remaining()

    def _keep_state(self, entity: str, entity_key: str, payload: Any) -> None:
        if entity_key in self.waiting_keys:
            self.states[(entity, entity_key)].append(decoded_payload(payload))

    def pulled(self, mutation: CloudMutation) -> None:
        self.cloud_rows += 1
        key = (mutation.entity, mutation.entity_key, mutation.op, _digest(mutation.payload))
        if self._take(key, "mutation"):
            return
        if mutation.entity_key not in self.journal.written_keys:
            self.cloud_only[mutation.project] += 1
            return
        self._keep_state(mutation.entity, mutation.entity_key, mutation.payload)

    def chunk(self, document: dict[str, Any]) -> None:
        for raw in document.get("mutations") or []:
            if not isinstance(raw, dict):
                continue
            entity, entity_key, op = (str(raw.get(n) or "").strip() for n in ("entity", "entity_key", "op"))
            payload = raw.get("payload")
            if not self._take((entity, entity_key, op, _digest(payload)), "chunk"):
                self._keep_state(entity, entity_key, payload)
        for entity, id_field in CURRENT_STATE_KEYS.items():
            for row in document.get(entity + "s") or []:
                if isinstance(row, dict):
                    self._keep_state(entity, str(row.get(id_field) or "").strip(), row)

    def settle(self, payloads: dict[int, Any]) -> list[LocalRow]:
        """Match what is left against the entities' current states; return the rows still missing."""
        missing = []
        for row in self.remaining():
            local = payloads.get(row.seq)
            states = self.states.get((row.entity, row.entity_key), [])
            if row.op == "upsert" and any(
                carries_fields(state, local, ignoring=CLOUD_REWRITES) for state in states
            ):
                self.via["current_state"] += 1
            else:
                missing.append(row)
        return sorted(missing, key=lambda r: r.seq)


# Rows of other devices looked up on this machine at a time, and the most distinct keys kept: past it the
# rows are counted without telling one entity from another (a machine that never pulled a huge cloud).
HELD_LOOKUP_BATCH = 500
NOT_PULLED_KEYS_LIMIT = 100_000

EntityRef = tuple[str, str]


@dataclass
class PullLag:
    """The cloud rows above the worker's pull cursor, as the cloud's pull streams past. Another device's
    rows are looked up here in batches (`holds`): one this machine already holds (a chunk import) is not
    behind. Memory stays bounded by NOT_PULLED_KEYS_LIMIT whatever the cloud sends."""

    cursor: int
    written_keys: set[str]
    holds: Callable[[Sequence[EntityRef]], set[EntityRef]]
    floor: int = 0  # rows at or below it are not looked at (the --since window's start)
    newest_seq: int | None = None
    own_not_pulled: int = 0
    held_already: int = 0
    pending: dict[EntityRef, datetime | None] = field(default_factory=dict)
    missing: dict[EntityRef, datetime | None] = field(default_factory=dict)
    missing_past_limit: int = 0  # rows, not entities
    oldest_past_limit: datetime | None = None

    @property
    def start(self) -> int:
        return max(self.cursor, self.floor)

    def saw(self, mutation: CloudMutation) -> None:
        self.newest_seq = max(self.newest_seq or 0, mutation.seq)
        if mutation.seq <= self.floor or not not_pulled_yet(mutation.seq, self.cursor):
            return
        if mutation.entity_key in self.written_keys:
            self.own_not_pulled += 1
            return
        key = (mutation.entity, mutation.entity_key)
        stored = _cloud_time(mutation.occurred_at)
        if key in self.missing:
            self.missing[key] = _earlier(self.missing[key], stored)
            return
        self.pending[key] = _earlier(self.pending[key], stored) if key in self.pending else stored
        if len(self.pending) >= HELD_LOOKUP_BATCH:
            self.settle()

    def settle(self) -> None:
        """Look the pending rows up on this machine; call once more after the last row."""
        if not self.pending:
            return
        held = self.holds(list(self.pending))
        for key, stored in self.pending.items():
            if key in held:
                self.held_already += 1
            elif key in self.missing or len(self.missing) < NOT_PULLED_KEYS_LIMIT:
                self.missing[key] = _earlier(self.missing.get(key), stored)
            else:
                self.missing_past_limit += 1
                self.oldest_past_limit = _earlier(self.oldest_past_limit, stored)
        self.pending = {}

    def side(self, behind_after_seconds: float, now: datetime) -> PullSide:
        oldest = self.oldest_past_limit
        for stored in self.missing.values():
            oldest = _earlier(oldest, stored)
        waited = None if oldest is None else max(0, int((now - oldest).total_seconds()))
        not_pulled = len(self.missing) + self.missing_past_limit
        return PullSide(
            lane=LEGACY_TARGET,
            last_pulled_seq=self.cursor,
            cloud_newest_seq=self.newest_seq,
            not_pulled=not_pulled,
            own_not_pulled=self.own_not_pulled,
            held_already=self.held_already,
            oldest_not_pulled_seconds=waited,
            behind_after_seconds=behind_after_seconds,
            behind=not_pulled > 0 and waited is not None and waited > behind_after_seconds,
        )


def _earlier(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None:
        return second
    return first if second is None else min(first, second)


def held_entities(db: EngramDb, keys: Sequence[EntityRef]) -> set[EntityRef]:
    """Which of these (entity, entity key) this machine holds, in one short read transaction."""
    held: set[EntityRef] = set()
    by_entity: dict[str, list[str]] = defaultdict(list)
    for entity, key in keys:
        by_entity[entity].append(key)
    with db.read_transaction() as connection:
        for entity, entity_keys in by_entity.items():
            table, column = APPLIED_ENTITY_ROWS.get(entity, ("", ""))
            if not table or not db.schema.has_column(table, column):
                continue
            for start in range(0, len(entity_keys), HELD_LOOKUP_BATCH):
                part = entity_keys[start : start + HELD_LOOKUP_BATCH]
                marks = ",".join("?" * len(part))
                held.update(
                    (entity, str(key))
                    for (key,) in connection.execute(
                        f"SELECT {column} FROM {table} WHERE {column} IN ({marks})", part
                    )
                )
    return held


def _cloud_time(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# ----- the run -----


@dataclass(frozen=True)
class ReconcileOptions:
    db_path: Path
    settings: CloudSettings
    since: datetime | None = None
    timeout: float = DEFAULT_TIMEOUT_SECONDS  # the whole cloud read, from the start of the run
    behind_after_seconds: float = 3600.0  # the config's thresholds.stall_after_seconds


def reconcile(options: ReconcileOptions) -> ReconcileResult:
    """Read the journal, read the cloud, match. Any failure on either side is UNKNOWN, never a traceback.

    The database is opened once; its connection holds no snapshot while the cloud is read (each read is
    its own short transaction)."""
    started = time.monotonic()
    url = options.settings.url
    try:
        with EngramDb.open(options.db_path) as db:
            journal = read_journal(db, options.since)
            with CloudReader(options.settings, options.timeout, started) as cloud:
                matcher, lag, since_seq, chunks_read = _read_cloud(
                    cloud, journal, options.since, functools.partial(held_entities, db)
                )
                requests = cloud.requests
            missing = matcher.settle(read_payloads(db, [row.seq for row in matcher.remaining()]))
    except CanaryError as error:
        return unknown(options.db_path, str(error), url)
    return _result(
        options, journal, matcher, lag, missing, since_seq, chunks_read, requests, time.monotonic() - started
    )


def _read_cloud(
    cloud: CloudReader,
    journal: Journal,
    since: datetime | None,
    holds: Callable[[Sequence[EntityRef]], set[EntityRef]],
) -> tuple[Matcher, PullLag | None, int, int]:
    matcher = Matcher(journal)
    cutoff = None if since is None else since - SKEW_ALLOWANCE
    since_seq = 0 if cutoff is None or not matcher.waiting else cloud.start_seq_for(cutoff)
    matching = bool(matcher.waiting) or since is None
    lag = None
    if journal.pull_cursor is not None:
        # With --since the pull side looks at the window's rows only: a routine run stays cheap on a
        # machine that never pulls, and the run of the day they arrived saw the older ones.
        window_seq = since_seq if matching or cutoff is None else cloud.start_seq_for(cutoff)
        lag = PullLag(journal.pull_cursor, journal.written_keys, holds, floor=window_seq)
    if matching or lag is not None:
        # One pass from the lower of the two starts; the matcher sees only the window's rows.
        starts = ([since_seq] if matching else []) + ([lag.start] if lag is not None else [])
        start = min(starts)
        for mutation in cloud.pull_from(start):
            if matching and mutation.seq > since_seq:
                matcher.pulled(mutation)
            if lag is not None:
                lag.saw(mutation)
        if lag is not None:
            lag.settle()
    chunks_read = 0
    for project in _chunk_projects(journal, matcher):
        for entry in cloud.manifest(project):
            if entry.created_by == MATERIALIZED_CHUNK_CREATOR:
                continue
            if cutoff is not None and entry.created_at and _older(entry.created_at, cutoff):
                continue
            if not matcher.waiting:
                break
            matcher.chunk(cloud.chunk(project, entry.chunk_id))
            chunks_read += 1
    return matcher, lag, since_seq, chunks_read


def _chunk_projects(journal: Journal, matcher: Matcher) -> list[str]:
    """Enrolled projects that still have acked rows without a copy: only those need their chunks read."""
    projects = {normalize_project(row.project) for row in matcher.remaining()}
    return sorted(p for p in projects if p in journal.enrolled)


def _older(created_at: str, cutoff: datetime) -> bool:
    moment = _cloud_time(created_at)
    return moment is not None and moment < cutoff


def _result(
    options: ReconcileOptions,
    journal: Journal,
    matcher: Matcher,
    lag: PullLag | None,
    missing: list[LocalRow],
    since_seq: int,
    chunks_read: int,
    requests: int,
    seconds: float,
) -> ReconcileResult:
    lost_by_lane = Counter((row.lane, row.project) for row in missing)
    counts = {lane: Counter(tally) for lane, tally in journal.tallies.items()}
    for lane, tally in counts.items():
        tally["lost"] = lost_by_lane[lane]
        tally["delivered"] = tally["acked"] - tally["lost"]
    reports = [
        LaneReport(
            lane=lane,
            project=project,
            enrolled=normalize_project(project) in journal.enrolled,
            **{
                name: tally[name]
                for name in ("acked", "delivered", "lost", "pending", "not_expected", "triaged")
            },
        )
        for (lane, project), tally in sorted(counts.items())
    ]
    via = matcher.via
    lost = len(missing)
    summary = {
        "acked": sum(r.acked for r in reports),
        "delivered": sum(r.delivered for r in reports),
        "delivered_via": {door: via.get(door, 0) for door in ("mutation", "chunk", "current_state")},
        "lost": lost,
        "pending": sum(r.pending for r in reports),
        "not_expected": sum(r.not_expected for r in reports),
        "triaged": sum(r.triaged for r in reports),
        "cloud_only": sum(matcher.cloud_only.values()),
        "acked_before_window": journal.acked_before_window,
        "enrolled_projects": sorted(journal.enrolled),
        "cloud_rows_read": matcher.cloud_rows,
        "chunks_read": chunks_read,
        "cloud_requests": requests,
        "pull_since_seq": since_seq,
        "seconds": round(seconds, 3),
    }
    evidence = [
        LostRow(
            seq=row.seq,
            lane=row.lane,
            project=row.project,
            entity=row.entity,
            entity_key=row.entity_key,
            op=row.op,
            acked_at=row.acked_at,
        )
        for row in missing[:LOST_EVIDENCE_LIMIT]
    ]
    pull = None if lag is None else lag.side(options.behind_after_seconds, datetime.now(UTC))
    status = Status.CRITICAL if lost else Status.WARNING if pull is not None and pull.behind else Status.OK
    return ReconcileResult(
        status=status.label,
        db=str(options.db_path),
        cloud_url=options.settings.url,
        checked_at=now_iso(),
        since=None
        if options.since is None
        else options.since.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        lanes=reports,
        lost=evidence,
        cloud_only=dict(sorted(matcher.cloud_only.items())),
        summary=summary,
        pull=pull,
    )


# ----- the command -----


def run_reconcile_command(
    db_path: Path,
    cloud_url: str | None,
    token_file: Path | None,
    ca_file: Path | None,
    since_text: str | None,
    output_format: str,
    textfile_dir: Path | None,
    timeout: float,
    config_error: str | None = None,
    behind_after_seconds: float = 3600.0,
) -> tuple[str, int]:
    """What the CLI prints and its exit status; every problem becomes an UNKNOWN result, never a traceback."""

    settings: CloudSettings | None = None
    try:
        if config_error is not None:
            raise ReconcileError(config_error)
        since = None if since_text is None else parse_since(since_text, datetime.now(UTC))
        settings = resolve_settings(
            db_path.expanduser().parent, url=cloud_url, token_file=token_file, ca_file=ca_file
        )
        result = reconcile(ReconcileOptions(db_path, settings, since, timeout, behind_after_seconds))
    except CanaryError as error:
        result = unknown(db_path, str(error), settings.url if settings else None)
    if textfile_dir is not None:
        try:
            write_reconcile_textfile(result, textfile_dir)
        except CanaryError as error:
            result = unknown(db_path, str(error), result.cloud_url)
    if output_format == "json":
        return render_json(result), int(result.exit_status)
    if output_format == "prometheus":
        return render_reconcile_prometheus(result).rstrip("\n"), int(result.exit_status)
    return render_reconcile_text(result), int(result.exit_status)
