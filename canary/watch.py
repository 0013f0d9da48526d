"""Real-time watch: file events on engram.db / engram.db-wal, confirmed by PRAGMA data_version.

Why it cannot trigger itself: it holds one read-only connection open for its whole life, reacts only to
writes (modify/create/delete/move/close-after-write of the two files), and a wake-up only leads to a
check when data_version says another connection committed. Its own reads never change data_version.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

import httpx
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from canary.baseline import Baseline
from canary.checks import (
    FOREIGN_CHECKS,
    EvidenceReader,
    TargetSpace,
    check_snapshot,
    foreign_target_findings,
    mutation_targets_since,
    read_target_space,
    stuck_rows,
)
from canary.config import CanaryConfig
from canary.db import EngramDb, describe_read_error
from canary.errors import CanaryError
from canary.findings import Finding, Status, overall_status
from canary.lane_health import lane_transitions
from canary.text import printable

WRITE_EVENTS = frozenset({"modified", "created", "deleted", "moved", "closed"})
# A commit's last write to -wal can land a moment before the wal-index says it is committed;
# re-confirm a few times before deciding an event was not a commit.
CONFIRM_RETRIES_SECONDS = (0.005, 0.02, 0.1)
EXEC_TIMEOUT_SECONDS = 30.0
PING_TIMEOUT_SECONDS = 10.0
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


@dataclass(frozen=True)
class Alert:
    event: str  # "appeared" | "gone"
    target_key: str
    line: str
    status: Status


@dataclass
class WatchStats:
    file_events: int = 0
    confirmed_changes: int = 0
    incremental_checks: int = 0
    full_checks: int = 0
    alerts: int = 0


class _DatabaseFileHandler(FileSystemEventHandler):
    def __init__(self, names: frozenset[str], on_write: Callable[[], None]) -> None:
        self.names = names
        self.on_write = on_write

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type not in WRITE_EVENTS:
            return
        paths = [event.src_path, getattr(event, "dest_path", "")]
        if any(os.path.basename(os.fsdecode(path)) in self.names for path in paths if path):
            self.on_write()


class Watcher:
    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.stats = WatchStats()
        self.stop_event = threading.Event()
        self.wake_event = threading.Event()
        self.alerted: dict[str, list[Finding]] = {}
        # The last full check's other findings (lanes, inbox, ...): they keep counting toward the status
        # between full checks, so an incremental check never flaps the status it cannot see.
        self.standing: list[Finding] = []
        self.status = Status.OK
        self.mutation_targets: set[str] = set()
        self.last_seq = 0
        self.db: EngramDb | None = None
        self.db_identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file self.db reads
        self.last_version: int | None = None
        self.notifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canary-notify")
        # Resolved once: the baseline's key is the db's resolved path (file-system calls). Acknowledged
        # targets stay silent between full checks; a full check re-alarms the ones that grew or expired.
        self.known_targets = options.known_targets
        self.silenced = set(self.known_targets)
        self.journal = stream_is_journal(options.stream)

    # -- lifecycle -------------------------------------------------------------------------------

    def stop(self) -> None:
        self.stop_event.set()
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
        self._open()
        self._full_check(initial=True)
        names = frozenset({db.name, f"{db.name}-wal"})
        observer = self._observer()
        observer.schedule(_DatabaseFileHandler(names, self.wake_event.set), str(db.parent), recursive=False)
        observer.start()
        mode = "polling" if self.options.poll else "native file events"
        self._say(
            f"engram-canary: watching {db} ({mode}); "
            f"{len(self.alerted)} foreign targets open, {len(self.known_targets)} known in baseline"
        )
        try:
            self._loop()
        finally:
            observer.stop()
            observer.join(timeout=5)
            self.notifier.shutdown(wait=True)
            if self.db is not None:
                self.db.close()
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
                retries = [time.monotonic() + delay for delay in CONFIRM_RETRIES_SECONDS]
            now = time.monotonic()
            if now >= next_full:
                self._full_check(initial=False)
                next_full = now + full_every
                retries = []
                continue
            if woke or (retries and now >= retries[0]):
                if self._changed():
                    retries = []
                    self._incremental_check()
                elif not woke:
                    retries.pop(0)

    # -- reading ---------------------------------------------------------------------------------

    def _open(self) -> None:
        self.db = EngramDb.open(self.options.db_path)
        self.last_version = self.db.data_version()
        found = os.stat(self.options.db_path)
        self.db_identity = (found.st_dev, found.st_ino)

    def _same_file(self) -> bool:
        """Is self.db still reading the file at --db? An open connection keeps reading a deleted or
        replaced file, so without this a watch would report a ghost as healthy forever."""
        path = self.options.db_path
        try:
            found = os.stat(path)
        except OSError as error:
            why = f"{path}: {(error.strerror or str(error)).lower()}; engram's database is gone"
            self._say(f"engram-canary: UNKNOWN - {why}", ERROR)
            self._notify_status(Status.UNKNOWN, why)
            return False
        if (found.st_dev, found.st_ino) == self.db_identity:
            return True
        self._say(f"engram-canary: {path} was replaced; reading the new file", NOTICE)
        previous = self.db
        try:
            self._open()
        except CanaryError as error:
            self._say(f"engram-canary: UNKNOWN - {error}", ERROR)
            self._notify_status(Status.UNKNOWN, str(error))
            return False
        finally:
            if previous is not None and previous is not self.db:
                previous.close()
        return True

    def _changed(self) -> bool:
        assert self.db is not None
        try:
            version = self.db.data_version()
        except sqlite3.DatabaseError as error:
            self._say(
                f"engram-canary: UNKNOWN - {describe_read_error(self.options.db_path, error, 'read failed')}",
                ERROR,
            )
            return False
        if version == self.last_version:
            return False
        self.last_version = version
        self.stats.confirmed_changes += 1
        return True

    def _incremental_check(self) -> None:
        """Only the small tables plus the sync_mutations rows appended since the last look."""
        assert self.db is not None
        connection, schema, config = self.db.connection, self.db.schema, self.options.config
        self.stats.incremental_checks += 1
        if self.options.verbose:
            self._say(f"engram-canary: commit seen (data_version {self.last_version}), incremental check")
        try:
            with self.db.read_transaction():
                new_keys, self.last_seq = mutation_targets_since(connection, self.last_seq)
                self.mutation_targets |= new_keys
                space = read_target_space(
                    connection,
                    schema,
                    config.allowed_targets,
                    mutations=(self.mutation_targets, self.last_seq),
                )
                foreign = space.foreign_keys() - self.silenced
                appeared = foreign - set(self.alerted)
                findings = (
                    foreign_target_findings(space, EvidenceReader(connection, schema), config, only=appeared)
                    if appeared
                    else []
                )
        except sqlite3.DatabaseError as error:
            self._say(
                f"engram-canary: UNKNOWN - {describe_read_error(self.options.db_path, error, 'read failed')}",
                ERROR,
            )
            return
        self._reconcile(foreign, findings, space)
        self._set_status(self.current_status(), "incremental")

    def _full_check(self, *, initial: bool) -> None:
        if not initial and not self._same_file():
            return
        assert self.db is not None
        self.stats.full_checks += 1
        if self.options.verbose:
            self._say(f"engram-canary: full check {self.stats.full_checks}")
        try:
            result, space = check_snapshot(
                self.db,
                self.options.config,
                self.options.baseline,
                include_inbox=self.options.config.watch.inbox_tripwires,
            )
        except sqlite3.DatabaseError as error:
            self._say(
                f"engram-canary: UNKNOWN - {describe_read_error(self.options.db_path, error, 'read failed')}",
                ERROR,
            )
            self._notify_status(Status.UNKNOWN, f"read failed: {error}")
            return
        except CanaryError as error:
            self._say(f"engram-canary: UNKNOWN - {error}", ERROR)
            self._notify_status(Status.UNKNOWN, str(error))
            return
        self.last_seq = space.last_seq
        self.mutation_targets = set(space.mutation_targets)
        foreign_findings = [f for f in result.findings if f.check in FOREIGN_CHECKS and f.new]
        foreign = {f.target_key for f in foreign_findings if f.target_key is not None}
        self.silenced = set(self.known_targets) - foreign
        previous, self.standing = self.standing, [f for f in result.findings if f.check not in FOREIGN_CHECKS]
        for lane in lane_transitions(previous, self.standing, self.options.db_path):
            self._emit(
                Alert(lane.event, lane.target_key, lane.line, Status.CRITICAL if lane.critical else Status.OK)
            )
        self._reconcile(foreign, foreign_findings, space)
        for key in foreign:
            self.alerted[key] = [f for f in foreign_findings if f.target_key == key]
        # Every full check pings (a heartbeat); its status and current_status() are the same policy.
        self.status = result.exit_status
        self._notify_status(self.status, f"{len(foreign)} new foreign targets")

    # -- alerting --------------------------------------------------------------------------------

    def _reconcile(self, foreign: set[str], findings: list[Finding], space: TargetSpace) -> None:
        by_key: dict[str, list[Finding]] = {}
        for finding in findings:
            if finding.target_key is not None:
                by_key.setdefault(finding.target_key, []).append(finding)
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
        if self.options.exec_command:
            self.notifier.submit(self._run_exec, alert)

    def _say(self, line: str, priority: int = INFO) -> None:
        prefix = f"<{priority}>" if self.journal else ""
        self.options.stream.write(f"{prefix}{printable(line)}\n")
        self.options.stream.flush()

    def _run_exec(self, alert: Alert) -> None:
        command = self.options.exec_command
        assert command is not None
        env = dict(os.environ)
        env.update(
            {
                "ENGRAM_CANARY_EVENT": alert.event,
                "ENGRAM_CANARY_TARGET_KEY": alert.target_key,
                "ENGRAM_CANARY_STATUS": alert.status.label,
                "ENGRAM_CANARY_DB": str(self.options.db_path),
                "ENGRAM_CANARY_MESSAGE": printable(alert.line),
            }
        )
        try:
            completed = subprocess.run(
                ["/bin/sh", "-c", command],
                input=printable(alert.line) + "\n",
                text=True,
                env=env,
                capture_output=True,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            self._say(f"engram-canary: --exec failed: {error}", ERROR)
            return
        if completed.returncode != 0:
            self._say(
                f"engram-canary: --exec exited {completed.returncode}: {completed.stderr.strip()[:200]}",
                ERROR,
            )

    def _notify_status(self, status: Status, body: str) -> None:
        if self.options.ping_url:
            self.notifier.submit(self._ping, status, body)

    def _ping(self, status: Status, body: str) -> None:
        url = f"{self.options.ping_url.rstrip('/')}/{int(status)}" if self.options.ping_url else ""
        try:
            httpx.post(url, content=f"{status.name} - {body}".encode(), timeout=PING_TIMEOUT_SECONDS)
        except httpx.HTTPError as error:
            self._say(f"engram-canary: ping {url} failed: {error}", ERROR)


def watch(options: WatchOptions, *, install_signals: bool = True) -> int:
    watcher = Watcher(options)
    if install_signals:
        watcher.install_signal_handlers()
    return watcher.run()
