"""The watcher's notifications in the background: the `--exec` hook and the `--ping-url` pings.

Each runs on its own thread, so a slow hook never delays a ping. Neither ever holds up a stop: systemd
(and a person at Ctrl-C) expects the watcher to end within seconds, whatever is queued.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from engram_sync_kit.canary.findings import Status
from engram_sync_kit.canary.text import printable

EXEC_TIMEOUT_SECONDS = 30.0
PING_TIMEOUT_SECONDS = 10.0
# After the grace a running hook gets SIGTERM (its whole process group), then SIGKILL this much later.
KILL_AFTER_SECONDS = 0.3

Say = Callable[[str, bool], None]  # (line, is_error)


@dataclass(frozen=True)
class Alert:
    event: str  # "appeared" | "gone"
    target_key: str
    line: str
    status: Status


def hook_environment(alerts: list[Alert], db_path: Path) -> dict[str, str]:
    """ENGRAM_CANARY_* for one run over ALERTS: one alert as it is; several as their common event and key
    ('mixed' and '' where they differ), the worst status, and a one-line summary."""
    events = {alert.event for alert in alerts}
    keys = {alert.target_key for alert in alerts}
    worst = max((alert.status for alert in alerts), key=int)
    if len(alerts) == 1:
        message = alerts[0].line
    else:
        counts = ", ".join(f"{sum(a.event == event for a in alerts)} {event}" for event in sorted(events))
        message = f"engram-canary {worst.name}: {len(alerts)} alerts ({counts}), one line each on stdin"
    return {
        "ENGRAM_CANARY_ALERTS": str(len(alerts)),
        "ENGRAM_CANARY_EVENT": events.pop() if len(events) == 1 else "mixed",
        "ENGRAM_CANARY_TARGET_KEY": keys.pop() if len(keys) == 1 else "",
        "ENGRAM_CANARY_STATUS": worst.label,
        "ENGRAM_CANARY_DB": str(db_path),
        "ENGRAM_CANARY_MESSAGE": printable(message),
    }


class HookRunner:
    """Runs `--exec` one run at a time. Alerts that arrive while a run goes wait together and are passed
    to the next run, one line each on stdin: a burst of 200 alerts is two runs, not 200."""

    def __init__(
        self, command: str, db_path: Path, say: Say, *, timeout: float = EXEC_TIMEOUT_SECONDS
    ) -> None:
        self.command = command
        self.db_path = db_path
        self.say = say
        self.timeout = timeout
        self.pending: list[Alert] = []
        self.closing = False
        self.process: subprocess.Popen[str] | None = None
        self.started = 0.0  # when the running hook started
        self.condition = threading.Condition()
        self.thread = threading.Thread(target=self._work, name="canary-exec", daemon=True)
        self.thread.start()

    def submit(self, alert: Alert) -> None:
        with self.condition:
            if not self.closing:
                self.pending.append(alert)
                self.condition.notify()

    def close(self, grace: float) -> None:
        """Drop what is queued; give a running hook GRACE seconds, then end its process group."""
        with self.condition:
            self.closing = True
            dropped, self.pending = len(self.pending), []
            self.condition.notify()
        if dropped:
            self.say(f"engram-canary: --exec: {dropped} queued alerts not passed on (stopping)", False)
        self.thread.join(max(0.0, grace))
        for stop in (signal.SIGTERM, signal.SIGKILL):
            if not self.thread.is_alive():
                return
            with self.condition:
                process = self.process
            if process is not None:
                self._signal(process, stop)
            self.thread.join(KILL_AFTER_SECONDS)

    def _signal(self, process: subprocess.Popen[str], stop: signal.Signals) -> None:
        try:
            os.killpg(process.pid, stop)
        except OSError:
            return
        if stop == signal.SIGTERM:
            self.say(
                f"engram-canary: --exec ended at stop after {time.monotonic() - self.started:.1f} s", False
            )

    def _work(self) -> None:
        while True:
            with self.condition:
                while not self.pending and not self.closing:
                    self.condition.wait()
                if self.closing:
                    return
                batch, self.pending = self.pending, []
            self._run(batch)

    def _run(self, alerts: list[Alert]) -> None:
        env = dict(os.environ) | hook_environment(alerts, self.db_path)
        lines = "".join(printable(alert.line) + "\n" for alert in alerts)
        with self.condition:
            if self.closing:
                return
            try:
                # Its own process group: a stop can end the shell and whatever it started.
                process = subprocess.Popen(
                    ["/bin/sh", "-c", self.command],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                    start_new_session=True,
                )
            except OSError as error:
                self.say(f"engram-canary: --exec failed: {error}", True)
                return
            self.process, self.started = process, time.monotonic()
        try:
            _, stderr = process.communicate(lines, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._signal(process, signal.SIGKILL)
            process.communicate()
            self.say(f"engram-canary: --exec failed: still running after {self.timeout:g} s, killed", True)
            return
        finally:
            with self.condition:
                self.process = None
        if process.returncode > 0 or (process.returncode < 0 and not self.closing):
            self.say(f"engram-canary: --exec exited {process.returncode}: {stderr.strip()[:200]}", True)


class Pinger:
    """POSTs the status to `--ping-url` in order; at a stop, what is queued is dropped."""

    def __init__(self, url: str, say: Say) -> None:
        self.url = url.rstrip("/")
        self.say = say
        self.pending: list[tuple[Status, str]] = []
        self.closing = False
        self.condition = threading.Condition()
        self.thread = threading.Thread(target=self._work, name="canary-ping", daemon=True)
        self.thread.start()

    def submit(self, status: Status, body: str) -> None:
        with self.condition:
            if not self.closing:
                self.pending.append((status, body))
                self.condition.notify()

    def close(self, grace: float) -> None:
        with self.condition:
            self.closing = True
            self.pending = []
            self.condition.notify()
        self.thread.join(max(0.0, grace))

    def _work(self) -> None:
        while True:
            with self.condition:
                while not self.pending and not self.closing:
                    self.condition.wait()
                if self.closing:
                    return
                status, body = self.pending.pop(0)
            url = f"{self.url}/{int(status)}"
            try:
                httpx.post(url, content=f"{status.name} - {body}".encode(), timeout=PING_TIMEOUT_SECONDS)
            except httpx.HTTPError as error:
                self.say(f"engram-canary: ping {url} failed: {error}", True)
