"""Helpers of the reconcile tests: engram worlds that really synced, a canned-answer server, the CLI."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from canary_support import CANARY
from schema_under_test import require_opened

from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.serve import EngramDaemon
from engram_sync_kit.harness.polling import eventually

TOKEN = "reconcile-test-token"


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_reconcile(db: Path, env: Mapping[str, str], *args: str, timeout: float = 120) -> Ran:
    """`engram-canary reconcile --db DB ARGS`, the installed script in a subprocess, with only the
    ENGRAM_* / SSL_CERT_* variables given in env."""
    require_opened(db)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "SSL_CERT"))}
    base["XDG_CONFIG_HOME"] = str(db.parent / "xdg")
    done = subprocess.run(
        [str(CANARY), "reconcile", "--db", str(db), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def reconcile_here(db: Path, env: Mapping[str, str], *args: str) -> Ran:
    """The same command through click's runner in this process: a second per run instead of a process."""
    from click.testing import CliRunner

    require_opened(db)
    from engram_sync_kit.canary.cli import cli

    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("ENGRAM_", "SSL_CERT"))}
    cleared["XDG_CONFIG_HOME"] = str(db.parent / "xdg")
    runner = CliRunner(mix_stderr=False)
    done = runner.invoke(
        cli, ["reconcile", "--db", str(db), *args], env={**cleared, **env}, catch_exceptions=True
    )
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return Ran(done.exit_code, done.stdout, done.stderr)


def engram(world: EngramEnvironment, *args: str, env: Mapping[str, str] | None = None) -> str:
    done = world.run(list(args), env=env)
    assert done.returncode == 0, f"engram {' '.join(args)}: {meaningful_stderr(done.stderr)}"
    return done.stdout


def save_memories(world: EngramEnvironment, project: str, count: int, prefix: str = "memory") -> None:
    for number in range(count):
        engram(
            world,
            "save",
            f"{prefix} {project} {number}",
            f"body of {prefix} {number} in {project}",
            "--project",
            project,
        )


def journal(db: Path) -> list[tuple[int, str, str, str, str | None]]:
    """(seq, project, entity, entity_key, acked_at) of every row, read-only."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return [
            (int(r[0]), str(r[1]), str(r[2]), str(r[3]), r[4])
            for r in connection.execute(
                "SELECT seq, project, entity, entity_key, acked_at FROM sync_mutations ORDER BY seq"
            )
        ]
    finally:
        connection.close()


class CannedServer:
    """A loopback HTTP server that answers every request with the same raw bytes, then closes."""

    def __init__(self, answer: bytes, drip_seconds: float = 0.0) -> None:
        self.answer = answer
        self.drip_seconds = drip_seconds  # > 0: the head at once, then the body one byte at a time
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self.port = int(self._socket.getsockname()[1])
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            with connection:
                # One read is the whole request line and headers of a GET (or a TLS ClientHello).
                self.requests.append(connection.recv(65536))
                with contextlib.suppress(OSError):
                    if not self.drip_seconds:
                        connection.sendall(self.answer)
                        continue
                    head, _, body = self.answer.partition(b"\r\n\r\n")
                    connection.sendall(head + b"\r\n\r\n")
                    for byte in body:
                        time.sleep(self.drip_seconds)
                        connection.sendall(bytes([byte]))

    def close(self) -> None:
        # On Linux close() alone does not wake a thread blocked in accept(); shutdown() does.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def canned(answer: bytes, drip_seconds: float = 0.0) -> Iterator[CannedServer]:
    server = CannedServer(answer, drip_seconds)
    try:
        yield server
    finally:
        server.close()


def http_answer(status: str, body: bytes, *, length: int | None = None, headers: Sequence[str] = ()) -> bytes:
    head = [
        f"HTTP/1.1 {status}",
        "Content-Type: application/json",
        f"Content-Length: {len(body) if length is None else length}",
        "Connection: close",
        *headers,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class SyncedWorld:
    world: EngramEnvironment
    relation_key: str

    @property
    def db(self) -> Path:
        return self.world.db_path


def saved_id(output: str) -> int:
    match = re.search(r"Memory saved: #(\d+)", output)
    assert match, output
    return int(match.group(1))


def pending_enrolled(db: Path) -> int | None:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = connection.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE acked_at IS NULL "
            "AND project IN (SELECT project FROM sync_enrolled_projects)"
        ).fetchone()
        return int(row[0])
    finally:
        connection.close()


def sync_both_ways(engram_bin: Path, root: Path, cloud_env: Mapping[str, str]) -> SyncedWorld:
    """A user's week, through the real client against the cloud in cloud_env:

    alpha (enrolled) saves two memories and pushes them with `engram sync --cloud` (the chunk path);
    then alpha saves two more and judges a relation between two of its memories, beta (enrolled) saves
    two, gamma (never enrolled) saves one; `engram serve` with autosync pushes them (the mutation path).
    Returns once every row of an enrolled project is acked.
    """
    world = EngramEnvironment(binary=engram_bin, root=root).prepare()
    first = saved_id(engram(world, "save", "alpha first", "chunk path memory one", "--project", "alpha"))
    engram(world, "save", "alpha second", "chunk path memory two", "--project", "alpha")
    engram(world, "cloud", "enroll", "alpha")
    engram(world, "sync", "--cloud", "--project", "alpha", env=cloud_env)
    third = saved_id(engram(world, "save", "alpha third", "mutation path memory", "--project", "alpha"))
    engram(world, "save", "alpha fourth", "mutation path memory ü ✓", "--project", "alpha")
    save_memories(world, "beta", 2)
    save_memories(world, "gamma", 1)
    engram(world, "cloud", "enroll", "beta")
    daemon = EngramDaemon(world, dict(cloud_env), root / "serve.log")
    try:
        daemon.start(autosync=False)
        status, body = daemon.request(
            "POST",
            "/conflicts/compare",
            {
                "memory_id_a": first,
                "memory_id_b": third,
                "relation": "related",
                "confidence": 0.9,
                "reasoning": "same topic",
            },
        )
        assert status == 200, body
        daemon.start(autosync=True)  # restarts with the worker; its first cycle runs within 30 s
        eventually(
            lambda: True if pending_enrolled(world.db_path) == 0 else None,
            timeout=120,
            interval=0.5,
            what=f"autosync to ack every enrolled row (log: {daemon.log_text()[-500:]})",
        )
    finally:
        daemon.close()
    return SyncedWorld(world, str(body["sync_id"]))
