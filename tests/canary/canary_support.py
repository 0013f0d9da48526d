"""Shared helpers of the canary tests: run the installed CLI, a watcher subprocess, row digests."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from engram_sync_kit.harness.polling import eventually

CANARY = Path(sys.executable).parent / "engram-canary"


def canary_env(config_home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_")}
    env["XDG_CONFIG_HOME"] = str(config_home)
    env["ENGRAM_CANARY_STATE_DIR"] = str(config_home / "engram-canary-state")  # never the real home's
    env.update(extra)
    return env


def run_canary(
    args: Sequence[str], config_home: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    from schema_under_test import db_argument, run_apply

    return run_apply(
        args,
        db_argument(args),
        lambda: subprocess.run(
            [str(CANARY), *args],
            env=canary_env(config_home),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        ),
    )


def write_settings(config_home: Path, text: str) -> Path:
    """The canary's config file at its default location under XDG_CONFIG_HOME=config_home."""
    config = config_home / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")
    return config


def rows_digest(db_path: Path) -> str:
    """A digest of every row of every table (read with a plain read-only connection)."""
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        tables = [
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        ]
        for table in tables:
            digest.update(table.encode())
            for row in connection.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                digest.update(repr(row).encode())
        schema = connection.execute("SELECT group_concat(sql, ';') FROM sqlite_master").fetchone()[0]
        digest.update(str(schema).encode())
        return digest.hexdigest()
    finally:
        connection.close()


class WatchProcess:
    """`engram-canary watch` as a subprocess, its stderr lines collected by a thread."""

    def __init__(self, args: Sequence[str], config_home: Path, **extra_env: str) -> None:
        from schema_under_test import db_argument, require_opened

        require_opened(db_argument(args))
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [str(CANARY), "watch", *args],
            env=canary_env(config_home, **extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def matching(self, predicate: Callable[[str], bool]) -> list[str]:
        return [line for line in self.snapshot() if predicate(line)]

    def wait_for(self, predicate: Callable[[str], bool], *, timeout: float = 20, what: str) -> str:
        def probe() -> str | None:
            found = self.matching(predicate)
            if not found and self.process.poll() is not None:
                raise AssertionError(f"watch exited {self.process.returncode}: {self.snapshot()}")
            return found[0] if found else None

        return eventually(probe, timeout=timeout, interval=0.02, what=what, error=AssertionError)

    def wait_started(self) -> None:
        self.wait_for(lambda line: line.startswith("engram-canary: watching"), what="watch to start")

    def stop(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
