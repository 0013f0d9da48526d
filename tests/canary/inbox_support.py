"""Helpers of the inbox tests: the real engram (CLI and `engram serve`), the canary CLI, db reads."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schema_under_test import db_argument, run_apply

from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.serve import EngramDaemon

CANARY = Path(sys.executable).parent / "engram-canary"


def canary_env(world: EngramEnvironment, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ENGRAM_", "XDG_"))}
    env.update(
        ENGRAM_DATA_DIR=str(world.data_dir),
        HOME=str(world.home),
        XDG_CONFIG_HOME=str(world.root / "xdg"),
    )
    env.update(extra)
    return env


def canary(world: EngramEnvironment, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return run_apply(
        args,
        db_argument(args) or world.db_path,
        lambda: subprocess.run(
            [str(CANARY), *args],
            env=canary_env(world, **extra_env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ),
    )


def aliases_file(world: EngramEnvironment) -> Path:
    return world.root / "xdg" / "engram-canary" / "aliases.yaml"


def engram_ok(world: EngramEnvironment, *args: str, cwd: Path | None = None) -> str:
    result = world.run(list(args), cwd=cwd)
    assert result.returncode == 0, f"engram {' '.join(args)}: {meaningful_stderr(result.stderr)}"
    return result.stdout


def save(world: EngramEnvironment, project: str, title: str, *, cwd: Path | None = None) -> None:
    engram_ok(world, "save", title, f"content of {title}", "--project", project, cwd=cwd)


def query(db: Path, sql: str, *parameters: object) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return list(connection.execute(sql, parameters))
    finally:
        connection.close()


def table_digest(db: Path, *tables: str) -> str:
    digest = hashlib.sha256()
    for table in tables:
        for row in query(db, f'SELECT * FROM "{table}" ORDER BY 1'):
            digest.update(repr(row).encode())
    return digest.hexdigest()


def db_digest(db: Path) -> str:
    names = [row[0] for row in query(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return table_digest(
        db, *[name for name in names if not name.startswith("sqlite_") and "_fts" not in name]
    )


class EngramServer:
    """`engram serve` (the harness's daemon); `post` records every status it answered."""

    def __init__(self, daemon: EngramDaemon) -> None:
        self.daemon = daemon
        self.statuses: list[int] = []
        self.failures: list[str] = []

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = self.daemon.http.post(f"{self.daemon.base_url}{path}", json=body)
        self.statuses.append(response.status_code)
        if response.status_code >= 300:
            self.failures.append(f"{path} {response.status_code}: {response.text.strip()}")
        return response.json() if response.content else None

    def log_text(self) -> str:
        return self.daemon.log_text()


@contextmanager
def engram_serve(world: EngramEnvironment, **extra_env: str) -> Iterator[EngramServer]:
    log = world.root / f"serve-{len(list(world.root.glob('serve-*.log')))}.log"
    daemon = EngramDaemon(world, extra_env, log)
    try:
        daemon.start(autosync=False)
        yield EngramServer(daemon)
    finally:
        daemon.close()


def inbox_json(world: EngramEnvironment, *extra: str, **extra_env: str) -> list[dict[str, Any]]:
    result = canary(world, "inbox", "list", "--format", "json", *extra, **extra_env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


def by_key(entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["key"]: entry for entry in entries}
