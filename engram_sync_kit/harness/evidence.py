"""What a scenario's world records as it runs: engram's stderr by process and source (OutputLog), the
commands it ran and the requests it sent (Evidence), shared by every part of the world."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from engram_sync_kit.harness.engram.env import meaningful_stderr

Process = Literal["serve", "mcp", "cli"]


@dataclass(frozen=True)
class OutputEntry:
    process: Process
    source: str
    text: str


@dataclass
class OutputLog:
    """Everything engram printed on stderr, by process and source, in the order it was read.

    Long-running processes (serve, mcp) are read from their log files at each labelled step's start and
    end and when the scenario ends, so a window `since: L` holds what was read from L's start on.
    """

    entries: list[OutputEntry] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, source: str, text: str, process: Process = "cli") -> None:
        text = meaningful_stderr(text)
        if text:
            with self.lock:
                self.entries.append(OutputEntry(process, source, text))

    def mark(self) -> int:
        with self.lock:
            return len(self.entries)

    def text(self, *, process: Process | None = None, start: int = 0, end: int | None = None) -> str:
        with self.lock:
            chosen = self.entries[start:end]
        return "\n".join(
            f"[{entry.source}] {line}"
            for entry in chosen
            if process is None or entry.process == process
            for line in entry.text.splitlines()
        )


@dataclass(frozen=True)
class CommandRecord:
    """One command the harness ran (engram or a checker), with everything it printed."""

    args: list[str]
    cwd: str
    exit: int
    stdout: str
    stderr: str
    seconds: float
    device: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "args": self.args,
            "cwd": self.cwd,
            "exit": self.exit,
            "seconds": round(self.seconds, 3),
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


@dataclass
class Evidence:
    """What a scenario's world recorded as it ran, shared by every device of the scenario."""

    commands: list[CommandRecord] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, record: CommandRecord) -> None:
        with self.lock:
            self.commands.append(record)

    def request(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)
