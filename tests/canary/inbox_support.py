"""Helpers of the inbox tests: the real engram (CLI and `engram serve`), the canary CLI, db reads."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from harness.engram_env import EngramEnvironment, meaningful_stderr

CANARY = Path(sys.executable).parent / "engram-canary"
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


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
    return subprocess.run(
        [str(CANARY), *args],
        env=canary_env(world, **extra_env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngramServer:
    """`engram serve` on a free port; `post` records every status it answered."""

    def __init__(
        self, world: EngramEnvironment, process: subprocess.Popen[bytes], port: int, log: Path
    ) -> None:
        self.world = world
        self.process = process
        self.base_url = f"http://127.0.0.1:{port}"
        self.log = log
        self.http = httpx.Client(timeout=30)
        self.statuses: list[int] = []
        self.failures: list[str] = []

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = self.http.post(f"{self.base_url}{path}", json=body)
        self.statuses.append(response.status_code)
        if response.status_code >= 300:
            self.failures.append(f"{path} {response.status_code}: {response.text.strip()}")
        return response.json() if response.content else None

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def engram_serve(world: EngramEnvironment, **extra_env: str) -> Iterator[EngramServer]:
    log = world.root / f"serve-{len(list(world.root.glob('serve-*.log')))}.log"
    for _attempt in range(3):
        port = free_port()
        with log.open("ab") as stream:
            process = subprocess.Popen(
                [str(world.binary), "serve"],
                cwd=world.home,
                env=world.env({"ENGRAM_PORT": str(port), **extra_env}),
                stdout=stream,
                stderr=subprocess.STDOUT,
            )
        server = EngramServer(world, process, port, log)
        try:
            if _ready(server):
                break
        except BaseException:
            _stop(server)
            raise
        _stop(server)
    else:
        raise AssertionError(f"engram serve did not start: {log.read_text(errors='replace')[-2000:]}")
    try:
        yield server
    finally:
        _stop(server)


def _ready(server: EngramServer) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            if server.http.get(f"{server.base_url}/health", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def _stop(server: EngramServer) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    server.http.close()


def inbox_json(world: EngramEnvironment, *extra: str) -> list[dict[str, Any]]:
    result = canary(world, "inbox", "list", "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


def by_key(entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["key"]: entry for entry in entries}
