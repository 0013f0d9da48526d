"""Claim, drop and cleanup-phantoms: the only canary code that writes to engram's database.

Every operation is a dry run unless applied. Applying takes a backup with SQLite's online backup API,
then makes every change in ONE transaction (BEGIN IMMEDIATE, busy timeout), re-planned inside it so a
concurrent engram write is never lost or double-counted. The mutation log is append-only: rows are
retired by setting acked_at (engram's ack), never deleted or rewritten. The sync_state bookkeeping
mirrors engram v1.20's enqueueSyncMutationTx and AckSyncMutationSeqs (internal/store/store.go), except
that a triage ack never clears a lane's failure record. The backups are canary.backups, the sync_state
bookkeeping canary.sync_bookkeeping.

pause_midway() marks the halfway point of an --apply transaction and does nothing. The crash-safety test
runs the CLI through a launcher that replaces it, to SIGKILL the process at a known point.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shlex
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from engram_sync_kit.canary.db import (
    BUSY_TIMEOUT_MS,
    DatabaseUnavailable,
    EngramDb,
    discover_schema,
)
from engram_sync_kit.canary.derive import (
    UNSORTED,
    AliasMap,
    normalize_cwd,
)
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.errors import TriageError as TriageError  # its commands import it from here
from engram_sync_kit.canary.inbox.aliases import register_alias
from engram_sync_kit.canary.inbox.selection import InboxRow, InboxSnapshot, select_inbox_rows
from engram_sync_kit.canary.lanes import LANE_ROW_COLUMNS, entry_refusal, lane_row, with_project
from engram_sync_kit.canary.schema_support import identify, require_write_tested
from engram_sync_kit.canary.targets import (
    RESERVED_INBOX_PROJECT,
    allowed_targets,
    named_project,
    normalize_project,
    project_target,
)
from engram_sync_kit.canary.triage.backups import (
    DEFAULT_KEEP_BACKUPS,
    PRIVATE_FILE_MODE,
    backup_database,
    backups_of,
    private_backup_dir,
    prune_backups,
    series_start,
)
from engram_sync_kit.canary.triage.sync_bookkeeping import (
    IN_LIST_CHUNK,
    PreparedWrite,
    SyncBookkeeping,
    count_rows,
    seq_chunks,
)
from engram_sync_kit.canary.triage_log import TRIAGE_LOG_NAME as TRIAGE_LOG_NAME  # validate reads it here
from engram_sync_kit.canary.triage_log import default_backup_dir
from engram_sync_kit.engram_contract import (
    LEGACY_TARGET,
    SESSION_REFERENCING_ENTITIES,
    PushRefusal,
    enrolled_name,
)
from engram_sync_kit.engram_contract.gojson import go_json

WRITE_CACHE_KIB = 64 * 1024

Operation = Literal["claim", "drop", "cleanup-phantoms", "repair"]


@dataclass(frozen=True)
class Selection:
    key: str
    cwd: str | None = None
    telemetry_only: bool = False
    memories_only: bool = False
    all_cwds: bool = False

    def describe(self) -> str:
        text = f"inbox key {self.key!r}"
        if self.cwd is not None:
            text += f" with cwd {self.cwd}"
        if self.telemetry_only:
            text += " (noise: session and prompt rows only)"
        if self.memories_only:
            text += " (memories: observations and relations)"
        return text


def resolve_cwd(cwd: str | None) -> str | None:
    """A --cwd as engram records it: absolute, so a relative path means the caller's directory."""
    if cwd is None:
        return None
    if not cwd.strip():
        raise TriageError("--cwd must name a directory, got an empty path")
    return normalize_cwd(os.path.join(logical_cwd(), cwd))


def logical_cwd() -> str:
    """The current directory as engram records it (Go's os.Getwd): $PWD when it names this directory,
    which keeps the path through a symlink the shell went through, else the physical path."""
    shell = os.environ.get("PWD", "")
    if os.path.isabs(shell):
        with suppress(OSError):
            if os.path.samefile(shell, "."):
                return shell
    return os.getcwd()


@dataclass(frozen=True)
class RowSelection:
    """Legacy-lane rows picked by seq, or all of those without a project: not inbox rows, so no key."""

    seqs: tuple[int, ...] = ()
    unattributed: bool = False

    def describe(self) -> str:
        if self.unattributed:
            return "legacy-lane rows without a project"
        return "seq " + ",".join(str(seq) for seq in self.seqs)


@dataclass(frozen=True)
class Copy:
    """A new legacy-lane row for the enrolled project, copied from an inbox row (repaired, if `repair`)."""

    source: InboxRow
    project: str
    payload: str
    repair: str | None = None
    # a session upsert copied because claimed memories reference it (its original stays in the inbox)
    session_of_memories: bool = False


@dataclass(frozen=True)
class RefusedRow:
    """A row triage will not insert, because the cloud would refuse it; what the user can do instead."""

    row: InboxRow
    refusal: PushRefusal
    remedy: str

    @property
    def reason(self) -> str:
        return f"{self.refusal.status} {self.refusal.reason}"


@dataclass(frozen=True)
class PhantomTarget:
    target_key: str
    lifecycle: str


@dataclass
class Plan:
    operation: Operation
    selection: Selection | None = None
    project: str | None = None
    copies: list[Copy] = field(default_factory=list)
    acks: list[InboxRow] = field(default_factory=list)
    phantoms: list[PhantomTarget] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    alias: tuple[str, str, str] | None = None
    high_water: int = 0
    enrolled: frozenset[str] = frozenset()
    rows: RowSelection | None = None
    refused: list[RefusedRow] = field(default_factory=list)
    repair: bool = False

    @property
    def is_empty(self) -> bool:
        return not (self.copies or self.acks or self.phantoms)

    def describe(self) -> list[str]:
        lines: list[str] = []
        for copy in self.copies:
            row = copy.source
            repaired = f", repaired: {copy.repair}" if copy.repair is not None else ""
            carried = ", the session of the claimed memories" if copy.session_of_memories else ""
            lines.append(
                f"insert: legacy-lane row {row.entity} {row.entity_key} {row.op} for project {copy.project!r} "
                f"(copy of seq {row.seq}, project {row.project!r}{repaired}{carried})"
            )
        for refused in self.refused:
            row = refused.row
            lines.append(
                f"refuse: seq {row.seq} {row.entity} {row.entity_key} {row.op}: the cloud would answer "
                f"{refused.reason}; {refused.remedy}"
            )
        verb = {"drop": "ack (discarded)", "repair": "ack (replaced by its repaired copy)"}.get(
            self.operation, "ack"
        )
        for row in self.acks:
            lines.append(
                f"{verb}: seq {row.seq} {row.entity} {row.entity_key} {row.op} (project {row.project!r})"
            )
        for phantom in self.phantoms:
            lines.append(
                f"delete: sync_state row {phantom.target_key!r} (lifecycle {phantom.lifecycle}, 0 unacked rows)"
            )
        for reason in self.kept:
            lines.append(f"keep: {reason}")
        if self.alias is not None:
            section, alias, project = self.alias
            lines.append(f"alias: {section} {alias!r} -> {project!r}")
        return lines


def prepare_write(plan: Plan) -> PreparedWrite:
    last_copy_by_target: dict[str, int] = {}
    for index, copy in enumerate(plan.copies):
        last_copy_by_target[LEGACY_TARGET] = index
        last_copy_by_target[project_target(copy.project)] = index
    return PreparedWrite(
        inserts=[
            (
                LEGACY_TARGET,
                copy.source.entity,
                copy.source.entity_key,
                copy.source.op,
                copy.payload,
                copy.project,
            )
            for copy in plan.copies
        ],
        last_copy_by_target=last_copy_by_target,
        ack_seqs=[row.seq for row in plan.acks],
        acked_projects=sorted({normalize_project(row.project) for row in plan.acks} - {""}),
    )


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan
    backup: Path
    new_seqs: tuple[int, ...]
    alias_registered: bool
    lock_held_ms: float
    pruned_backups: tuple[Path, ...] = ()
    series_first: Path | None = None  # kept by the pruning: the state from before this series of applies


def connect_read_write(path: Path) -> EngramDb:
    """triage's own writable connection, with its schema discovered once (the read-only EngramDb of a
    dry run is a different connection: the write must see the file as it is now)."""
    if not path.is_file():
        raise DatabaseUnavailable(f"{path}: no such file (pass --db or set ENGRAM_DATA_DIR)")
    try:
        connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.DatabaseError as error:
        raise DatabaseUnavailable(f"{path}: cannot be opened for writing ({error})") from error
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # engram's own settings: FK checks on, and NORMAL sync so a commit holds the write lock briefly.
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("PRAGMA synchronous = NORMAL")
        schema = discover_schema(connection, path)
    except sqlite3.DatabaseError as error:
        connection.close()
        raise DatabaseUnavailable(f"{path}: cannot be opened for writing ({error})") from error
    except DatabaseUnavailable:
        connection.close()
        raise
    return EngramDb(path=path, connection=connection, schema=schema)


# ---------------------------------------------------------------- planning (pure over a snapshot)


def matching_rows(snapshot: InboxSnapshot, selection: Selection) -> list[InboxRow]:
    """Every inbox row the selection names, memories engram never journaled included (what `show` reads)."""
    wanted_key = normalize_project(selection.key)
    wanted_cwd = normalize_cwd(selection.cwd) if selection.cwd is not None else None
    return [
        row
        for row in snapshot.rows
        if normalize_project(row.key) == wanted_key
        and (wanted_cwd is None or row.cwd == wanted_cwd)
        and (not selection.telemetry_only or row.is_telemetry)
        and (not selection.memories_only or not row.is_telemetry)
    ]


def select_rows(snapshot: InboxSnapshot, selection: Selection) -> list[InboxRow]:
    """The rows triage acts on: those with a journal row to ack or copy."""
    matched = matching_rows(snapshot, selection)
    journaled = [row for row in matched if row.journaled]
    if matched and not journaled:
        # engram v2.0.0-rc.12+/v3 journal nothing for an unenrolled project: no row to ack or copy.
        raise TriageError(
            f"{selection.describe()} holds {len(matched)} memories engram never journaled (v2.0.0-rc.12 and "
            "later journal only enrolled projects): nothing to claim or drop; enroll the project to send them "
            "(engram backfills its memories at enrollment)"
        )
    return journaled


def _enrolled_name(snapshot: InboxSnapshot, project: str) -> str | None:
    return enrolled_name(project, snapshot.enrolled)


def _refuse_reserved(project: str) -> None:
    if normalize_project(project) == RESERVED_INBOX_PROJECT:
        raise TriageError(f"{RESERVED_INBOX_PROJECT!r} is a reserved name; rows cannot be claimed into it")


def _nothing_selected(operation: str, selection: Selection) -> TriageError:
    return TriageError(
        f"nothing to {operation}: no unacked inbox rows match {selection.describe()} (see: engram-canary inbox list)"
    )


def plan_claim(
    snapshot: InboxSnapshot, selection: Selection, as_project: str | None, *, repair: bool = False
) -> Plan:
    if as_project is not None:
        _refuse_reserved(as_project)
        if not normalize_project(as_project):
            raise TriageError("--as must name an enrolled project, got an empty name")
    rows = select_rows(snapshot, selection)
    if not rows:
        raise _nothing_selected("claim", selection)
    _refuse_scattered_unsorted(rows, selection, "claim")
    if as_project is None:
        resolved = {row.derivation.project for row in rows}
        if len(resolved) != 1 or None in resolved:
            raise TriageError(
                f"{selection.describe()} does not resolve to one enrolled project (no alias, no enrolled match); "
                "pass --as <enrolled project>"
            )
        (target,) = resolved
        assert target is not None
    else:
        target = as_project
    _refuse_reserved(target)
    enrolled_name = _enrolled_name(snapshot, target)
    if enrolled_name is None:
        enrolled = ", ".join(sorted(snapshot.enrolled)) or "none"
        near = near_enrolled_name(target, snapshot.enrolled)
        suggestion = f"did you mean {near!r}? else " if near is not None else ""
        raise TriageError(
            f"cannot claim into {normalize_project(target)!r}: it is not enrolled (enrolled: {enrolled}); "
            f"{suggestion}run: engram cloud enroll {normalize_project(target)}"
        )
    plan = Plan(
        operation="claim",
        selection=selection,
        project=enrolled_name,
        high_water=snapshot.high_water,
        enrolled=snapshot.enrolled,
        repair=repair,
    )
    for row in rows:
        outcome = preflight_copy(row, enrolled_name, repair=repair)
        if isinstance(outcome, Copy):
            plan.copies.append(outcome)
            plan.acks.append(row)
        else:
            plan.refused.append(outcome)
    if selection.memories_only:
        telemetry = select_rows(
            snapshot, dataclasses.replace(selection, memories_only=False, telemetry_only=True)
        )
        if telemetry:
            words = ["engram-canary", "inbox", "drop", "--project", selection.key, "--noise"]
            if selection.cwd is not None:
                words[5:5] = ["--cwd", selection.cwd]
            plan.kept.append(
                f"{len(telemetry)} session/prompt rows stay in the inbox (telemetry is never sent to the cloud by "
                f"design); drop them ({shlex.join(words)}) or claim with --with-telemetry"
            )
    if not plan.copies:
        raise TriageError(
            f"nothing to claim: the cloud would refuse all {len(rows)} rows of {selection.describe()} "
            f"(first: seq {plan.refused[0].row.seq}, {plan.refused[0].reason}; {plan.refused[0].remedy})"
        )
    if as_project is not None:
        if selection.cwd is not None:
            plan.alias = ("cwds", normalize_cwd(selection.cwd), enrolled_name)
        elif selection.key != UNSORTED and normalize_project(selection.key) != enrolled_name:
            plan.alias = ("keys", selection.key, enrolled_name)
    return plan


def with_referenced_sessions(db: EngramDb, plan: Plan) -> Plan:
    """A claim's memories with the session they reference, in the same project.

    The cloud checks a chunk's session references per project (`engram sync --cloud` then fails with
    'references missing session_id'), and a claim without --with-telemetry leaves the session rows in the
    inbox. So the latest upsert of each referenced session the project's lane does not carry yet is copied
    too, ahead of the memories; its originals stay in the inbox. A memory whose session cannot be copied
    (refused, or never journaled) is refused with the reason."""
    if plan.operation != "claim" or plan.project is None:
        return plan
    project = plan.project
    in_plan = {copy.source.entity_key for copy in plan.copies if copy.source.entity == "session"}
    wanted: dict[str, list[Copy]] = {}
    for copy in plan.copies:
        session_id = _session_reference(copy)
        if session_id and session_id not in in_plan:
            wanted.setdefault(session_id, []).append(copy)
    if not wanted:
        return plan
    carried, latest = _journaled_sessions(db.connection, sorted(wanted), project)
    sessions: list[Copy] = []
    refused: dict[int, RefusedRow] = {}
    for session_id, memories in wanted.items():
        if session_id in carried:
            continue
        source = latest.get(session_id)
        outcome = preflight_copy(source, project, repair=plan.repair) if source is not None else None
        if isinstance(outcome, Copy):
            sessions.append(dataclasses.replace(outcome, session_of_memories=True))
            continue
        for memory in memories:
            row = memory.source
            if outcome is None:
                why = f"has no upsert in engram's journal to copy; drop it (engram-canary inbox drop --seq {row.seq})"
            else:
                why = (
                    f"cannot be copied (seq {outcome.row.seq}: {outcome.reason}); drop both "
                    f"(engram-canary inbox drop --seq {row.seq},{outcome.row.seq})"
                )
            remedy = f"its session {session_id!r} {why}"
            refusal = PushRefusal(400, f'references missing session_id "{session_id}"', "session_id")
            refused[row.seq] = RefusedRow(row, refusal, remedy)
    if not sessions and not refused:
        return plan
    kept = [copy for copy in plan.copies if copy.source.seq not in refused]
    if not kept:
        first = [*plan.refused, *refused.values()][0]
        what = plan.selection.describe() if plan.selection is not None else "the selection"
        raise TriageError(
            f"nothing to claim: the cloud would refuse all {len(plan.refused) + len(refused)} rows of {what} "
            f"(first: seq {first.row.seq}, {first.reason}; {first.remedy})"
        )
    return dataclasses.replace(
        plan,
        copies=[*sessions, *kept],
        acks=[row for row in plan.acks if row.seq not in refused],
        refused=[*plan.refused, *refused.values()],
    )


def _session_reference(copy: Copy) -> str | None:
    if copy.source.entity not in SESSION_REFERENCING_ENTITIES or copy.source.op != "upsert":
        return None
    try:
        decoded = json.loads(copy.payload)
    except (ValueError, RecursionError):
        return None
    session_id = decoded.get("session_id") if isinstance(decoded, dict) else None
    return session_id.strip() or None if isinstance(session_id, str) else None


def _journaled_sessions(
    connection: sqlite3.Connection, session_ids: Sequence[str], project: str
) -> tuple[set[str], dict[str, InboxRow]]:
    """Which of the sessions the project's legacy lane already carries (an upsert journaled under it, acked
    or not), and the latest upsert of each on the legacy lane (with the sessions table's directory)."""
    carried: set[str] = set()
    latest: dict[str, InboxRow] = {}
    for start in range(0, len(session_ids), IN_LIST_CHUNK):
        chunk = session_ids[start : start + IN_LIST_CHUNK]
        marks = ",".join("?" * len(chunk))
        upserts = (
            "FROM sync_mutations WHERE target_key = ? AND entity = 'session' AND op = 'upsert' "
            f"AND entity_key IN ({marks})"
        )
        carried.update(
            str(key)
            for (key,) in connection.execute(
                f"SELECT DISTINCT entity_key {upserts} AND project = ?", (LEGACY_TARGET, *chunk, project)
            )
        )
        columns = ", ".join(f"m.{name.strip()}" for name in LANE_ROW_COLUMNS.split(","))
        for values in connection.execute(
            f"SELECT {columns}, s.directory FROM sync_mutations AS m LEFT JOIN sessions AS s ON s.id = m.entity_key "
            f"WHERE m.seq IN (SELECT MAX(seq) {upserts} GROUP BY entity_key)",
            (LEGACY_TARGET, *chunk),
        ):
            directory = values[-1]
            row = lane_row(values[:-1])
            if isinstance(directory, str) and directory.strip():
                row = dataclasses.replace(row, cwd=normalize_cwd(directory))
            latest[row.entity_key] = row
    return carried, latest


def near_enrolled_name(project: str, enrolled: frozenset[str]) -> str | None:
    """The enrolled project a mistyped --as most likely meant ('client-portal' for 'client_portal')."""
    wanted = normalize_project(project)
    by_shape = {normalize_project(name).replace("_", "-"): name for name in enrolled}
    if wanted.replace("_", "-") in by_shape:
        return by_shape[wanted.replace("_", "-")]
    close = difflib.get_close_matches(wanted, sorted(enrolled), n=1, cutoff=0.8)
    return close[0] if close else None


def _refuse_scattered_unsorted(rows: Sequence[InboxRow], selection: Selection, verb: str) -> None:
    """`unsorted` gathers unrelated directories; claiming or dropping the memories of them all at once
    is rarely what was meant (telemetry noise is dropped across directories freely)."""
    if (
        normalize_project(selection.key) != UNSORTED
        or selection.cwd is not None
        or selection.all_cwds
        or selection.telemetry_only
    ):
        return
    cwds = sorted({row.cwd or "(unknown)" for row in rows})
    if len(cwds) > 1:
        shown = ", ".join(cwds[:5]) + (", ..." if len(cwds) > 5 else "")
        raise TriageError(
            f"inbox key 'unsorted' holds rows from {len(cwds)} directories ({shown}); "
            f"pick one with --cwd, or pass --all-cwds to {verb} them all"
        )


def plan_drop(snapshot: InboxSnapshot, selection: Selection) -> Plan:
    rows = select_rows(snapshot, selection)
    if not rows:
        raise _nothing_selected("drop", selection)
    _refuse_scattered_unsorted(rows, selection, "drop")
    return Plan(
        operation="drop",
        selection=selection,
        acks=rows,
        high_water=snapshot.high_water,
        enrolled=snapshot.enrolled,
    )


def preflight_copy(row: InboxRow, project: str, *, repair: bool) -> Copy | RefusedRow:
    """The copy claim would insert, checked against the cloud contract before any lock is taken.

    A refused copy is repaired only with `repair` and only from what engram itself recorded: a session
    without a directory gets the directory of its sessions row."""
    payload = with_project(row.payload, project)
    refusal = entry_refusal(project, row, payload)
    if refusal is None:
        return Copy(row, project, payload)
    fix = derived_session_directory(row, refusal)
    if fix is not None:
        repaired = _set_field(payload, "directory", fix)
        if entry_refusal(project, row, repaired) is None:
            if repair:
                return Copy(row, project, repaired, repair=f"directory {fix!r} from the sessions table")
            remedy = (
                f"its directory {fix!r} is known from the sessions table: run again with --repair to copy it "
                f"with that directory, or drop it (engram-canary inbox drop --seq {row.seq})"
            )
            return RefusedRow(row, refusal, remedy)
    remedy = f"the correct value cannot be derived from engram's tables; drop it (engram-canary inbox drop --seq {row.seq})"
    return RefusedRow(row, refusal, remedy)


def derived_session_directory(row: InboxRow, refusal: PushRefusal) -> str | None:
    """The session's known directory, for a session row refused for its missing directory."""
    if row.entity != "session" or refusal.field != "directory" or not row.cwd:
        return None
    return row.cwd


def _set_field(payload: str, name: str, value: object) -> str:
    decoded = json.loads(payload)
    decoded[name] = value
    return go_json(decoded, sort_keys=False)


def select_lane_rows(db: EngramDb, rows: RowSelection) -> list[InboxRow]:
    """The rows `drop --seq/--unattributed` acks, refusing any row engram could still deliver.

    Dropping only ever takes rows the worker cannot deliver: inbox rows (project not enrolled) and rows
    the cloud refuses. A deliverable row is refused by name, so a drop never shrinks what reaches the
    cloud."""
    connection = db.connection
    if not db.schema.has_column("sync_mutations", "project"):
        raise TriageError("sync_mutations has no project column: this engram predates per-project sync")
    if rows.unattributed:
        found = connection.execute(
            f"SELECT {LANE_ROW_COLUMNS} FROM sync_mutations "
            "WHERE +target_key = ? AND acked_at IS NULL AND project = '' ORDER BY seq",
            (LEGACY_TARGET,),
        ).fetchall()
        if not found:
            raise TriageError("nothing to drop: no unacked legacy-lane rows without a project")
        return [lane_row(values) for values in found]
    enrolled = {normalize_project(name) for name in db.enrolled_projects()}
    selected: list[InboxRow] = []
    for chunk, marks in seq_chunks(rows.seqs):
        by_seq = {
            int(values[0]): values
            for values in connection.execute(
                f"SELECT {LANE_ROW_COLUMNS} FROM sync_mutations WHERE seq IN ({marks})", tuple(chunk)
            )
        }
        for seq in chunk:
            values = by_seq.get(seq)
            if values is None:
                raise TriageError(f"seq {seq}: no such row in sync_mutations (nothing was changed)")
            if values[1] != LEGACY_TARGET:
                raise TriageError(
                    f"seq {seq} is on lane {values[1]!r}; drop --seq selects legacy-lane rows only"
                )
            if values[8] is not None:
                raise TriageError(f"seq {seq} is already acked (at {values[8]}); nothing was changed")
            row = lane_row(values)
            if (
                normalize_project(row.project) in enrolled
                and entry_refusal(row.project, row, row.payload) is None
            ):
                raise TriageError(
                    f"seq {seq} is deliverable (project {row.project!r} is enrolled and the cloud accepts it); "
                    "drop selects only rows engram cannot deliver"
                )
            selected.append(row)
    return selected


def parse_seqs(text: str) -> tuple[int, ...]:
    """`N[,N...]` as distinct positive seqs in the given order (a pasted list of 100k stays instant)."""
    seqs: dict[int, None] = {}
    for part in text.split(","):
        word = part.strip()
        if not (word.isascii() and word.isdigit() and len(word) <= 18 and int(word) >= 1):
            shown = part if len(part) <= 40 else part[:40] + "..."
            raise TriageError(
                f"--seq expects positive row numbers separated by commas (N[,N...]), got {shown!r}"
            )
        seqs[int(word)] = None
    return tuple(seqs)


def plan_cleanup(db: EngramDb, keep: Sequence[str] = (), aliases: AliasMap | None = None) -> Plan:
    """sync_state rows outside the allowed set that hold no unacked row (and no row at all, for the FK)."""
    connection, schema = db.connection, db.schema
    enrolled = db.enrolled_projects()
    allowed = allowed_targets(enrolled, keep)
    plan = Plan(operation="cleanup-phantoms", enrolled=enrolled)
    inbox: dict[str, dict[str, int]] | None = None
    for target_key, lifecycle in connection.execute(
        "SELECT target_key, lifecycle FROM sync_state ORDER BY target_key"
    ).fetchall():
        if target_key in allowed:
            continue
        unacked, referencing = _held_rows(db, str(target_key))
        if unacked:
            if (
                inbox is None
                and schema.has_column("sync_mutations", "project")
                and schema.has_table("sessions")
            ):
                inbox = _selectors_by_target(select_inbox_rows(db, aliases or AliasMap()))
            plan.kept.append(
                f"{target_key!r} still holds {unacked} unacked rows "
                f"({_triage_hint((inbox or {}).get(str(target_key), {}))})"
            )
        elif referencing:
            plan.kept.append(
                f"{target_key!r} is referenced by {referencing} acked rows (foreign key); left alone"
            )
        else:
            plan.phantoms.append(PhantomTarget(str(target_key), str(lifecycle)))
    return plan


def _selectors_by_target(inbox: InboxSnapshot) -> dict[str, dict[str, int]]:
    """Per target key, the inbox selectors (key and cwd that `claim`/`drop` select by) of its rows, and
    how many rows each: one pass over the inbox, not one per kept target."""
    by_target: dict[str, dict[str, int]] = {}
    for row in inbox.rows:
        words = ["--project", row.key]
        if row.key == UNSORTED and row.cwd is not None:
            words += ["--cwd", row.cwd]
        selectors = by_target.setdefault(project_target(row.project), {})
        selector = shlex.join(words)
        selectors[selector] = selectors.get(selector, 0) + 1
    return by_target


def _triage_hint(selectors: dict[str, int]) -> str:
    """Where the target's rows really sit in the inbox: the key and cwd that `claim`/`drop` select by."""
    if not selectors:
        return "triage them with inbox claim/drop"
    where = "; ".join(f"{selector} ({count} rows)" for selector, count in sorted(selectors.items()))
    return f"triage them with engram-canary inbox claim/drop {where}"


def _held_rows(db: EngramDb, target_key: str) -> tuple[int, int]:
    """(unacked rows of the target, counting its project's legacy-lane rows; rows referencing it)."""
    connection = db.connection
    unacked = count_rows(
        connection,
        "SELECT COUNT(*) FROM sync_mutations WHERE target_key = ? AND acked_at IS NULL",
        target_key,
    )
    project = named_project(target_key)
    if db.schema.has_column("sync_mutations", "project") and project is not None:
        unacked += count_rows(
            connection,
            "SELECT COUNT(*) FROM sync_mutations WHERE target_key = ? AND project = ? AND acked_at IS NULL",
            LEGACY_TARGET,
            project,
        )
    referencing = count_rows(
        connection, "SELECT COUNT(*) FROM sync_mutations WHERE target_key = ?", target_key
    )
    return unacked, referencing


# ---------------------------------------------------------------- applying


@contextmanager
def immediate_transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def checkpoint_outside_lock(connection: sqlite3.Connection) -> None:
    """The WAL checkpoint engram's auto-checkpoint would have run, after COMMIT released the write lock.

    PASSIVE neither waits for nor blocks engram's readers and writers; one that cannot finish now is
    finished by engram's next commit, so a failure here is not the claim's failure."""
    with suppress(sqlite3.Error):
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def pause_midway() -> None:
    """The halfway point of an --apply transaction (a seam for the crash-safety test; no-op here)."""


def execute_plan(db: EngramDb, plan: Plan, prepared: PreparedWrite | None = None) -> tuple[int, ...]:
    """Every change of `plan`, inside the caller's open transaction (`prepared`: prepare_write(plan))."""
    if prepared is None:
        prepared = prepare_write(plan)
    state = SyncBookkeeping(db)
    new_seqs = state.enqueue_all(prepared)
    # Looked up at call time, so the crash-safety test's launcher can replace it.
    if plan.copies:
        pause_midway()
        state.ack(prepared)
    elif plan.acks:
        state.ack(prepared, on_half=pause_midway)
    for index, phantom in enumerate(plan.phantoms):
        db.connection.execute("DELETE FROM sync_state WHERE target_key = ?", (phantom.target_key,))
        if index == len(plan.phantoms) // 2:
            pause_midway()
    return new_seqs


class Planner(Protocol):
    def plan(self, db: EngramDb) -> Plan:
        """The full plan, from the caller's current snapshot."""

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        """Under the write lock: `plan` if it still holds, else a fresh one. Must be quick."""


@dataclass(frozen=True)
class InboxPlanner:
    aliases: AliasMap
    build: Callable[[InboxSnapshot], Plan]

    def plan(self, db: EngramDb) -> Plan:
        return with_referenced_sessions(db, self.build(select_inbox_rows(db, self.aliases)))

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        """The preview holds if enrollment is unchanged, its rows are still unacked and no row journaled
        since the preview joined the selection; otherwise plan again (slower, still correct)."""
        if db.enrolled_projects() != plan.enrolled:
            return self.plan(db)
        if not _all_still_unacked(db.connection, [row.seq for row in plan.acks]):
            return self.plan(db)
        newer = select_inbox_rows(db, self.aliases, after_seq=plan.high_water)
        if plan.selection is not None and select_rows(newer, plan.selection):
            return self.plan(db)
        return plan


def _all_still_unacked(connection: sqlite3.Connection, seqs: Sequence[int]) -> bool:
    unacked = sum(
        count_rows(
            connection,
            f"SELECT COUNT(*) FROM sync_mutations WHERE acked_at IS NULL AND seq IN ({marks})",
            *chunk,
        )
        for chunk, marks in seq_chunks(seqs)
    )
    return unacked == len(seqs)


@dataclass(frozen=True)
class LaneRowsPlanner:
    """drop --seq / --unattributed: rows outside the inbox, acked as discarded."""

    rows: RowSelection

    def plan(self, db: EngramDb) -> Plan:
        selected = select_lane_rows(db, self.rows)
        return Plan(
            operation="drop",
            rows=self.rows,
            acks=selected,
            high_water=count_rows(db.connection, "SELECT ifnull(MAX(seq), 0) FROM sync_mutations"),
            enrolled=db.enrolled_projects(),
        )

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        """Holds if enrollment is unchanged, every row is still unacked and, for --unattributed, no row
        without a project was journaled since; otherwise plan again."""
        if db.enrolled_projects() != plan.enrolled:
            return self.plan(db)
        if not _all_still_unacked(db.connection, [row.seq for row in plan.acks]):
            return self.plan(db)
        if self.rows.unattributed and count_rows(
            db.connection,
            "SELECT COUNT(*) FROM sync_mutations WHERE seq > ? AND target_key = ? AND project = ''",
            plan.high_water,
            LEGACY_TARGET,
        ):
            return self.plan(db)
        return plan


@dataclass(frozen=True)
class CleanupPlanner:
    keep: tuple[str, ...] = ()
    aliases: AliasMap = field(default_factory=AliasMap)

    def plan(self, db: EngramDb) -> Plan:
        return plan_cleanup(db, self.keep, self.aliases)

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        """Recheck only the planned phantoms; a target that became foreign meanwhile waits for next time."""
        if db.enrolled_projects() != plan.enrolled:
            return self.plan(db)
        existing = {str(row[0]) for row in db.connection.execute("SELECT target_key FROM sync_state")}
        still_empty = [
            phantom
            for phantom in plan.phantoms
            if phantom.target_key in existing and _held_rows(db, phantom.target_key) == (0, 0)
        ]
        return dataclasses.replace(plan, phantoms=still_empty)


def apply(
    db_path: Path,
    planner: Planner,
    *,
    backup_dir: Path | None = None,
    aliases_path: Path | None = None,
    keep_backups: int = DEFAULT_KEEP_BACKUPS,
) -> ApplyResult:
    """Plan from a read snapshot, back up, then revalidate and apply in one short IMMEDIATE transaction.

    engram v1.20 retries a busy write for only ~85 ms (10, 25, 50 ms backoffs) and a deferred
    transaction that must upgrade to write fails at once while another connection holds the lock, so
    the slow work (planning, the contract pre-flight, backup) happens before the lock and the locked
    part stays short. A failed apply removes its backup: it protects nothing.
    """
    if keep_backups < 1:
        raise TriageError(f"--keep-backups must be at least 1 (the backup just taken), got {keep_backups}")
    db = connect_read_write(db_path)
    connection = db.connection
    try:
        require_write_tested(identify(db))
        with db.read_transaction():
            preview = planner.plan(db)
        if preview.is_empty:
            raise TriageError(f"nothing to {preview.operation}: the selection is empty")
        directory = private_backup_dir(backup_dir or default_backup_dir(db_path), ours=backup_dir is None)
        backup = backup_database(db, directory, preview.operation)
        prepared = prepare_write(preview)
        # The commit of a large claim passes the WAL's auto-checkpoint threshold, and an automatic
        # checkpoint runs inside our COMMIT call; it is run after the lock instead (below).
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        # SQLite's default 2 MB page cache spills a 5,000-row claim's dirty pages to the WAL mid-transaction.
        connection.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")
        try:
            try:
                with immediate_transaction(connection):
                    locked_at = time.perf_counter()
                    plan = planner.revalidate(db, preview)
                    if plan.is_empty:
                        raise TriageError(f"nothing to {plan.operation}: the selection emptied meanwhile")
                    if plan is not preview:
                        prepared = prepare_write(plan)
                    new_seqs = execute_plan(db, plan, prepared)
                lock_held_ms = (time.perf_counter() - locked_at) * 1000
            except sqlite3.Error as error:
                raise TriageError(
                    f"{db_path}: the change was rolled back ({error}); nothing was changed"
                ) from error
        except BaseException:
            backup.unlink(missing_ok=True)
            raise
        checkpoint_outside_lock(connection)
        alias_registered = False
        if plan.alias is not None and aliases_path is not None:
            section, alias, project = plan.alias
            try:
                alias_registered = register_alias(aliases_path, section, alias, project)
            except (OSError, CanaryError) as error:
                raise TriageError(
                    f"applied (backup {backup}), but the alias {alias!r} -> {project!r} could not be written to "
                    f"{aliases_path} ({getattr(error, 'strerror', None) or error}); add it by hand"
                ) from error
        pruned = prune_backups(db_path, directory, keep_backups)
        series_first = series_start(backups_of(db_path, directory)) if pruned else None
        _log(directory / TRIAGE_LOG_NAME, db_path, backup, plan, new_seqs, pruned)
        return ApplyResult(
            plan=plan,
            backup=backup,
            new_seqs=new_seqs,
            alias_registered=alias_registered,
            lock_held_ms=lock_held_ms,
            pruned_backups=tuple(pruned),
            series_first=series_first,
        )
    finally:
        connection.close()


def _log(
    path: Path, db_path: Path, backup: Path, plan: Plan, new_seqs: Sequence[int], pruned: Sequence[Path]
) -> None:
    """One JSON line per applied operation: the forensic record of which acks were discards, and of the
    backup that can undo it (a 0600 file, like the backups)."""
    entry = {
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "operation": plan.operation,
        "db": str(db_path.resolve()),
        "backup": str(backup),
        "backup_protects": {
            "db": str(db_path.resolve()),
            "state": f"the database as it was just before this {plan.operation}",
            "restore": f"stop engram, then copy {backup} over {db_path.resolve()}",
        },
        "pruned_backups": [str(old) for old in pruned],
        "selection": None
        if plan.selection is None
        else {
            "key": plan.selection.key,
            "cwd": plan.selection.cwd,
            "noise": plan.selection.telemetry_only,
            "memories_only": plan.selection.memories_only,
        },
        "rows": None if plan.rows is None else plan.rows.describe(),
        "project": plan.project,
        "acked_seqs": [row.seq for row in plan.acks],
        "discarded": plan.operation == "drop",
        "copies": [[copy.source.seq, seq] for copy, seq in zip(plan.copies, new_seqs, strict=True)],
        "repairs": [[copy.source.seq, copy.repair] for copy in plan.copies if copy.repair is not None],
        "refused": [[refused.row.seq, refused.reason] for refused in plan.refused],
        "deleted_targets": [phantom.target_key for phantom in plan.phantoms],
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
    with os.fdopen(descriptor, "a", encoding="utf-8") as stream:
        if stat.S_IMODE(os.fstat(descriptor).st_mode) & 0o077:
            os.fchmod(descriptor, PRIVATE_FILE_MODE)
        stream.write(json.dumps(entry, ensure_ascii=False) + "\n")
