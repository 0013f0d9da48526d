"""Real-time watch: file events on engram.db / engram.db-wal, confirmed by a look at the rows.

It holds no SQLite connection between checks. A reader that stays open keeps SQLite's shared lock, so
engram's last close cannot checkpoint and remove its `-wal`; after a restore with `mv` engram's next
open would replay that `-wal` over the restored file. Each check opens, reads in short transactions and
closes; before it opens, it lets a writer that is closing (an `engram save` a moment after its commit)
leave first. A replace or delete of the file aborts a check in progress.

Why it cannot trigger itself: a wake-up leads to a check only when the files' fingerprint changed (stat
of engram.db and its -wal, and the wal-index header in -shm; a reader changes none of them, except that
the first opener rebuilds the wal-index once), and only a change of the rows counts as a commit.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import TextIO

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from engram_sync_kit.canary.baseline import Baseline
from engram_sync_kit.canary.checks import (
    FOREIGN_CHECKS,
    EvidenceReader,
    TargetSpace,
    check_snapshot,
    foreign_target_findings,
    mutation_targets_since,
    read_target_space,
    stuck_rows,
)
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import DatabaseUnavailable, EngramDb, Schema, describe_read_error
from engram_sync_kit.canary.db_files import (
    FileFingerprint,
    lock_holder,
    process_age_seconds,
    wal_frame_bytes,
    wal_path,
)
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import Finding, Status, overall_status
from engram_sync_kit.canary.lane_health import lane_transitions
from engram_sync_kit.canary.liveness import liveness_transitions
from engram_sync_kit.canary.notify import Alert, HookRunner, Pinger
from engram_sync_kit.canary.text import printable
from engram_sync_kit.canary.undecodable import UNDECODABLE_PAYLOAD

WRITE_EVENTS = frozenset({"modified", "created", "deleted", "moved", "closed"})
# Events that put another file at --db, or none: the check in progress is abandoned at once.
REPLACE_EVENTS = frozenset({"created", "deleted", "moved"})
# A commit's last write to -wal can land a moment before the wal-index says it is committed;
# look again a few times when a write showed no new rows.
CONFIRM_RETRIES_SECONDS = (0.005, 0.02, 0.1)
# A holder that started less than this long ago is an engram command (an `engram save`) that is about to
# leave, even when a busy machine keeps it inside for a second or more: wait for it. One that stays past
# this age is a long-lived engram (serve, an MCP session), read beside it from then on.
SHORT_LIVED_SECONDS = 5.0
# Where a holder's age cannot be read (no /proc), one still inside after this long counts as long-lived.
WRITER_SETTLE_SECONDS = 0.25
SETTLE_POLL_SECONDS = 0.002
LONG_LIVED_REMEMBERED = 64
# SQLite calls the progress handler every this many VM steps: a replace or a stop aborts a read this fast.
PROGRESS_STEPS = 1_000
# A stop (SIGTERM, SIGINT) ends the watcher within this many seconds, whatever the hook queue holds.
STOP_WITHIN_SECONDS = 2.0
# syslog priorities; journald reads a "<N>" line prefix on a stream it owns (SyslogLevelPrefix=yes).
CRITICAL, ERROR, WARNING, NOTICE, INFO = 2, 3, 4, 5, 6


def stream_is_journal(stream: TextIO) -> bool:
    """True when systemd connected this stream to the journal ($JOURNAL_STREAM names its device:inode)."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return expected == f"{status.st_dev}:{status.st_ino}"


@dataclass
class WatchOptions:
    db_path: Path
    config: CanaryConfig
    baseline: Baseline | None
    poll: bool = False
    exec_command: str | None = None
    ping_url: str | None = None
    verbose: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)

    @property
    def debounce_seconds(self) -> float:
        return self.config.watch.debounce_ms / 1000

    @property
    def known_targets(self) -> frozenset[str]:
        return self.baseline.targets_for(self.db_path) if self.baseline is not None else frozenset()


def rows_seen(space: TargetSpace) -> tuple[object, ...]:
    """What a check read that any engram commit changes: every write journals a sync_mutations row, and
    the worker's progress and enrollments land in sync_state and sync_enrolled_projects."""
    states = tuple(sorted((key, tuple(sorted(row.fields.items()))) for key, row in space.sync_state.items()))
    return (space.last_seq, tuple(space.enrolled), states)


@dataclass
class WatchStats:
    file_events: int = 0
    confirmed_changes: int = 0
    incremental_checks: int = 0
    full_checks: int = 0
    alerts: int = 0


def gone(path: Path) -> str:
    return f"{path}: no such file or directory; engram's database is gone"


class FileState(Enum):
    UNCHANGED = "unchanged"  # nobody wrote since the last look (a reader's events, the canary's own)
    WRITTEN = "written"
    REPLACED = "replaced"  # another file is at --db: read it from scratch
    GONE = "gone"


class _DatabaseFileHandler(FileSystemEventHandler):
    def __init__(self, db_name: str, on_event: Callable[[], None], on_replace: Callable[[], None]) -> None:
        self.db_name = db_name
        self.names = frozenset({db_name, f"{db_name}-wal"})
        self.on_event = on_event
        self.on_replace = on_replace

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in WRITE_EVENTS:
            return
        names = [
            os.path.basename(os.fsdecode(path)) for path in (event.src_path, getattr(event, "dest_path", ""))
        ]
        if event.event_type in REPLACE_EVENTS and self.db_name in names:
            self.on_replace()
        if any(name in self.names for name in names):
            self.on_event()


class Watcher:
    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.stats = WatchStats()
        self.stop_event = threading.Event()
        self.wake_event = threading.Event()
        self.replaced_event = threading.Event()  # set by the observer thread: abandon the current read
        self.alerted: dict[str, list[Finding]] = {}
        # The last full check's other findings (lanes, inbox, ...): they keep counting toward the status
        # between full checks, so an incremental check never flaps the status it cannot see.
        self.standing: list[Finding] = []
        self.status = Status.OK
        self.mutation_targets: set[str] = set()
        self.last_seq = 0
        # The files as the last look found them; None after they went away (what comes back is new).
        self.fingerprint: FileFingerprint | None = None
        self.rows_seen: tuple[object, ...] | None = None  # what the last check read; a commit changes it
        self.schema: Schema | None = None  # the file's, reused by each open while its cookie matches
        self.long_lived: dict[int, None] = {}  # pids of engram processes that stay inside the file
        self.stop_asked_at: float | None = None
        self.say_lock = threading.Lock()  # the hook and ping threads say things too
        self.hooks: HookRunner | None = None
        self.pinger: Pinger | None = None
        # Resolved once: the baseline's key is the db's resolved path (file-system calls). Acknowledged
        # targets stay silent between full checks; a full check re-alarms the ones that grew or expired.
        self.known_targets = options.known_targets
        self.silenced = set(self.known_targets)
        self.journal = stream_is_journal(options.stream)

    # -- lifecycle -------------------------------------------------------------------------------

    def stop(self) -> None:
        if self.stop_asked_at is None:
            self.stop_asked_at = time.monotonic()
        self.stop_event.set()
        self.wake_event.set()

    def file_replaced(self) -> None:
        """From the observer thread: a file was moved to, moved from, created at or deleted from --db."""
        self.replaced_event.set()
        self.wake_event.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _observer(self) -> BaseObserver:
        if self.options.poll:
            return PollingObserver(timeout=self.options.config.watch.poll_interval_seconds)
        return Observer()

    def run(self) -> int:
        """Watch until stop(); returns the exit code (0 after a clean stop)."""
        db = self.options.db_path
        EngramDb.open(db).close()  # a missing or foreign file is one line (DatabaseUnavailable), as before
        observer = self._observer()
        # The real file in the real directory: inotify does not follow a symlink (watchdog asks it not
        # to), so a linked ~/.engram or a linked --db would give no event at all.
        real = db.resolve()
        handler = _DatabaseFileHandler(real.name, self.wake_event.set, self.file_replaced)
        observer.schedule(handler, str(real.parent), recursive=False)
        try:
            observer.start()  # before the first check, so a replace during it is seen
        except OSError as error:
            raise CanaryError(
                f"cannot watch {real.parent}: {(error.strerror or str(error)).lower()}"
            ) from error
        if self.options.exec_command:
            self.hooks = HookRunner(self.options.exec_command, db, self._say_from_thread)
        if self.options.ping_url:
            self.pinger = Pinger(self.options.ping_url, self._say_from_thread)
        try:
            self._full_check(initial=True)
            if not self.stop_event.is_set():  # a stop during the first check ends here
                mode = "polling" if self.options.poll else "native file events"
                self._say(
                    f"engram-canary: watching {db} ({mode}); "
                    f"{len(self.alerted)} foreign targets open, {len(self.known_targets)} known in baseline"
                )
                self._loop()
        finally:
            self._close_notifiers()
            observer.stop()
            observer.join(timeout=5)
        stats = self.stats
        self._say(
            f"engram-canary: stopped ({stats.file_events} file events, {stats.confirmed_changes} commits seen, "
            f"{stats.incremental_checks} incremental and {stats.full_checks} full checks, {stats.alerts} alerts)"
        )
        return 0

    def _loop(self) -> None:
        full_every = self.options.config.watch.full_recheck_seconds
        next_full = time.monotonic() + full_every
        retries: list[float] = []
        while not self.stop_event.is_set():
            now = time.monotonic()
            deadline = min([next_full, *retries]) if retries else next_full
            woke = self.wake_event.wait(timeout=max(0.0, deadline - now))
            if self.stop_event.is_set():
                return
            if woke:
                self.wake_event.clear()
                self.stats.file_events += 1
                if self.options.debounce_seconds:
                    time.sleep(self.options.debounce_seconds)
                    self.wake_event.clear()
            now = time.monotonic()
            if now >= next_full:
                self._full_check(initial=False)
                next_full = now + full_every
                retries = []
                continue
            retry = bool(retries) and now >= retries[0]
            if not woke and not retry:
                continue
            if retry:
                retries.pop(0)
            state = self._file_state()
            if state is FileState.UNCHANGED and not retry:
                continue
            if state is FileState.GONE and self.fingerprint is None:
                continue  # said so already; the next full check says it again
            if state in (FileState.GONE, FileState.REPLACED):
                retries = []
                self._full_check(initial=False, state=state)
                continue
            if self._incremental_check():
                retries = []
            elif state is FileState.WRITTEN and self._commit_may_be_pending():
                retries = [time.monotonic() + delay for delay in CONFIRM_RETRIES_SECONDS]

    # -- reading ---------------------------------------------------------------------------------

    def _file_state(self) -> FileState:
        found = FileFingerprint.read(self.options.db_path)
        replaced = self.replaced_event.is_set()
        self.replaced_event.clear()
        if found is None:
            return FileState.GONE
        if self.fingerprint is None or replaced or found.identity != self.fingerprint.identity:
            return FileState.REPLACED
        return FileState.UNCHANGED if found == self.fingerprint else FileState.WRITTEN

    def _let_writer_close(self) -> None:
        """Wait (bounded) while another process is inside the file: reading now would hold SQLite's shared
        lock at the moment an `engram save` closes, and its -wal would outlive it."""
        holder = lock_holder(self.options.db_path)
        if holder is None or holder in self.long_lived:
            return
        unknown_age_deadline = time.monotonic() + WRITER_SETTLE_SECONDS
        while holder is not None and not self._abandoning():
            age = process_age_seconds(holder)
            if (age is None and time.monotonic() >= unknown_age_deadline) or (
                age is not None and age >= SHORT_LIVED_SECONDS
            ):
                self.long_lived[holder] = None
                while len(self.long_lived) > LONG_LIVED_REMEMBERED:
                    del self.long_lived[next(iter(self.long_lived))]
                return
            time.sleep(SETTLE_POLL_SECONDS)
            holder = lock_holder(self.options.db_path)

    def _commit_may_be_pending(self) -> bool:
        """Only a -wal with frames can hold a commit not yet visible; after engram's last close (a checkpoint,
        the -wal gone) another look would only be one more open beside the next engram command."""
        return self.fingerprint is not None and self.fingerprint.wal is not None

    def _abandoning(self) -> bool:
        return self.stop_event.is_set() or self.replaced_event.is_set()

    @contextmanager
    def _reading(self) -> Iterator[EngramDb]:
        """One connection for one check, closed when it ends; a replace of the file or a stop makes SQLite
        abort the read within PROGRESS_STEPS steps (sqlite3.OperationalError 'interrupted')."""
        self._let_writer_close()
        self.fingerprint = FileFingerprint.read(self.options.db_path)
        db = EngramDb.open(self.options.db_path, self.schema)
        self.schema = db.schema
        try:
            db.connection.set_progress_handler(lambda: int(self._abandoning()), PROGRESS_STEPS)
            yield db
        finally:
            db.close()

    def _read_failed(self, error: Exception) -> None:
        if self._abandoning():
            return  # a replace or a stop: the loop reads the new file or ends
        if not self.options.db_path.exists():
            why = gone(self.options.db_path)  # it went between the look and the open
        elif isinstance(error, sqlite3.Error):
            why = describe_read_error(self.options.db_path, error, "read failed")
        else:
            why = str(error)
        self._say(f"engram-canary: UNKNOWN - {why}", ERROR)
        self._notify_status(Status.UNKNOWN, why)

    def _incremental_check(self) -> bool:
        """Only the small tables plus the sync_mutations rows appended since the last look; True when the
        rows changed (a commit was seen)."""
        config = self.options.config
        self.stats.incremental_checks += 1
        try:
            with self._reading() as db, db.read_transaction() as connection:
                new_keys, last_seq = mutation_targets_since(connection, self.last_seq)
                mutation_targets = self.mutation_targets | new_keys
                space = read_target_space(db, config.allowed_targets, mutations=(mutation_targets, last_seq))
                foreign = space.foreign_keys() - self.silenced
                appeared = foreign - set(self.alerted)
                findings = (
                    foreign_target_findings(space, EvidenceReader(db), config, only=appeared)
                    if appeared
                    else []
                )
        except (sqlite3.DatabaseError, CanaryError) as error:
            self._read_failed(error)
            return False
        self.last_seq, self.mutation_targets = last_seq, mutation_targets
        seen = rows_seen(space)
        if seen == self.rows_seen:
            return False
        self.rows_seen = seen
        self.stats.confirmed_changes += 1
        if self.options.verbose:
            self._say(f"engram-canary: commit seen (last seq {self.last_seq}), incremental check")
        by_key: dict[str, list[Finding]] = {}
        for finding in findings:
            if finding.target_key is not None:
                by_key.setdefault(finding.target_key, []).append(finding)
        self._reconcile(foreign, by_key, space)
        self._set_status(self.current_status(), "incremental")
        return True

    def _full_check(self, *, initial: bool, state: FileState | None = None) -> None:
        path = self.options.db_path
        if not initial:
            state = state or self._file_state()
            if state is FileState.GONE:
                self.fingerprint = None
                why = gone(path)
                self._say(f"engram-canary: UNKNOWN - {why}", ERROR)
                self._notify_status(Status.UNKNOWN, why)
                return
            if state is FileState.REPLACED:
                self._say(f"engram-canary: {path} was replaced; reading the new file", NOTICE)
                self._warn_of_a_foreign_wal()
                self.last_seq, self.mutation_targets, self.rows_seen, self.schema = 0, set(), None, None
        self.stats.full_checks += 1
        if self.options.verbose:
            self._say(f"engram-canary: full check {self.stats.full_checks}")
        try:
            with self._reading() as db:
                result, space = check_snapshot(
                    db,
                    self.options.config,
                    self.options.baseline,
                    include_inbox=self.options.config.watch.inbox_tripwires,
                )
        except DatabaseUnavailable as error:
            if initial:
                raise
            self._read_failed(error)
            return
        except (sqlite3.DatabaseError, CanaryError) as error:
            self._read_failed(error)
            return
        self.last_seq = space.last_seq
        self.mutation_targets = set(space.mutation_targets)
        self.rows_seen = rows_seen(space)
        by_key: dict[str, list[Finding]] = {}  # one pass: a scan per key was quadratic in foreign targets
        for finding in result.findings:
            if finding.check in FOREIGN_CHECKS and finding.new and finding.target_key is not None:
                by_key.setdefault(finding.target_key, []).append(finding)
        foreign = set(by_key)
        self.silenced = set(self.known_targets) - foreign
        previous, self.standing = self.standing, [f for f in result.findings if f.check not in FOREIGN_CHECKS]
        for lane in lane_transitions(previous, self.standing, self.options.db_path):
            self._emit(
                Alert(lane.event, lane.target_key, lane.line, Status.CRITICAL if lane.critical else Status.OK)
            )
        for change in liveness_transitions(previous, self.standing, self.options.db_path):
            status = {"critical": Status.CRITICAL, "warning": Status.WARNING}.get(change.severity, Status.OK)
            self._emit(Alert(change.event, change.target_key, change.line, status))
        self._undecodable_transition(previous, self.standing)
        self._reconcile(foreign, by_key, space)
        for key in foreign:
            self.alerted[key] = by_key[key]
        # Every full check pings (a heartbeat); its status and current_status() are the same policy.
        self.status = result.exit_status
        self._notify_status(self.status, f"{len(foreign)} new foreign targets")

    def _undecodable_transition(self, previous: list[Finding], current: list[Finding]) -> None:
        """Rows whose payload is not valid UTF-8, said when the full check's set of them changes: the same
        finding `check` reports."""
        before = next((f for f in previous if f.check == UNDECODABLE_PAYLOAD), None)
        now = next((f for f in current if f.check == UNDECODABLE_PAYLOAD), None)
        db = self.options.db_path
        if now is not None and (before is None or before.evidence != now.evidence):
            line = f"engram-canary WARNING: {UNDECODABLE_PAYLOAD} {now.message} db={db}"
            self._emit(Alert("appeared", "", line, Status.WARNING))
        elif now is None and before is not None:
            line = f"engram-canary OK: no payload that is not valid UTF-8 is left db={db}"
            self._emit(Alert("gone", "", line, Status.OK))

    def _warn_of_a_foreign_wal(self) -> None:
        """A -wal with frames next to a file that was just put in place was written for the file before it
        (unless the two were restored together): engram's next open replays it over the new file."""
        frames = wal_frame_bytes(self.options.db_path)
        if frames:
            wal = wal_path(self.options.db_path)
            self._say(
                f"engram-canary WARNING: {wal} holds {frames} bytes of frames written before "
                f"{self.options.db_path.name} was replaced; unless it was restored with the file, engram's next "
                f"open replays them over it: stop engram and move {wal.name} and "
                f"{self.options.db_path.name}-shm aside (docs/canary.md, restoring a backup)",
                WARNING,
            )

    # -- alerting --------------------------------------------------------------------------------

    def _reconcile(self, foreign: set[str], by_key: dict[str, list[Finding]], space: TargetSpace) -> None:
        for key in sorted(foreign - set(self.alerted)):
            self._alert_appeared(key, by_key.get(key, []))
        for key in sorted(set(self.alerted) - foreign):
            self._alert_gone(key, space)

    def current_status(self) -> Status:
        """The shared status policy over the open foreign targets and the last full check's other findings."""
        findings = [*self.standing, *(f for found in self.alerted.values() for f in found)]
        return overall_status(findings, self.options.config.thresholds.critical_new_foreign_targets)

    def _set_status(self, status: Status, why: str) -> None:
        if status != self.status:
            self.status = status
            self._notify_status(status, f"{len(self.alerted)} new foreign targets ({why})")

    def _alert_appeared(self, key: str, findings: list[Finding]) -> None:
        tables = {"sync_state" if f.check == "foreign_sync_target" else "sync_mutations" for f in findings}
        where = " and ".join(sorted(tables)) or "the target space"
        severity = "CRITICAL" if any(f.severity == "critical" for f in findings) else "WARNING"
        details = []
        for finding in findings:
            evidence = finding.evidence
            for name in ("lifecycle", "last_enqueued_seq", "updated_at"):
                if name in evidence:
                    details.append(f"{name}={evidence[name]}")
            details.append(f"unacked_rows={stuck_rows(evidence)}")
        realarms = sorted({f.realarm for f in findings if f.realarm})
        again = f" acknowledged, alarms again: {'; '.join(realarms)}" if realarms else ""
        line = (
            f"engram-canary {severity}: NEW foreign sync target {key} in {where} "
            f"({', '.join(dict.fromkeys(details))}){again} db={self.options.db_path}"
        )
        self.alerted[key] = findings
        self._emit(Alert("appeared", key, line, Status[severity]))

    def _alert_gone(self, key: str, space: TargetSpace) -> None:
        reason = "now allowed" if key in space.allowed else "no longer present"
        line = f"engram-canary OK: GONE foreign sync target {key} ({reason}) db={self.options.db_path}"
        del self.alerted[key]
        self._emit(Alert("gone", key, line, Status.OK))

    def _emit(self, alert: Alert) -> None:
        self.stats.alerts += 1
        priorities = {Status.CRITICAL: CRITICAL, Status.WARNING: WARNING}
        self._say(alert.line, priorities.get(alert.status, NOTICE))
        if self.hooks is not None:
            self.hooks.submit(alert)

    def _say(self, line: str, priority: int = INFO) -> None:
        prefix = f"<{priority}>" if self.journal else ""
        with self.say_lock:
            self.options.stream.write(f"{prefix}{printable(line)}\n")
            self.options.stream.flush()

    def _say_from_thread(self, line: str, is_error: bool) -> None:
        self._say(line, ERROR if is_error else NOTICE)

    def _notify_status(self, status: Status, body: str) -> None:
        if self.pinger is not None:
            self.pinger.submit(status, body)

    def _close_notifiers(self) -> None:
        """Queued hook runs and pings are dropped; a running hook gets what is left of the stop budget
        (less a margin for its SIGTERM and SIGKILL), so the watcher ends within STOP_WITHIN_SECONDS."""
        asked = self.stop_asked_at if self.stop_asked_at is not None else time.monotonic()
        grace = STOP_WITHIN_SECONDS - 0.9 - (time.monotonic() - asked)
        if self.hooks is not None:
            self.hooks.close(grace)
        if self.pinger is not None:
            self.pinger.close(STOP_WITHIN_SECONDS - 0.2 - (time.monotonic() - asked))


def watch(options: WatchOptions, *, install_signals: bool = True) -> int:
    watcher = Watcher(options)
    if install_signals:
        watcher.install_signal_handlers()
    return watcher.run()
