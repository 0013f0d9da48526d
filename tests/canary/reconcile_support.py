"""Helpers of the reconcile tests: engram worlds that really synced, a canned-answer server, the CLI."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from canary_support import CANARY

from harness.engram_env import EngramEnvironment, meaningful_stderr

TOKEN = "reconcile-test-token"


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_reconcile(db: Path, env: Mapping[str, str], *args: str, timeout: float = 120) -> Ran:
    """`engram-canary reconcile --db DB ARGS` with only the ENGRAM_* / SSL_* variables given in env."""
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

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
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
                    connection.sendall(self.answer)

    def close(self) -> None:
        self._socket.close()


@contextlib.contextmanager
def canned(answer: bytes) -> Iterator[CannedServer]:
    server = CannedServer(answer)
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
