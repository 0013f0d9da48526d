"""The REAL `engram cloud serve` (Postgres-backed), to hold the fake against: differential tests, benchmark.

Postgres comes from ENGRAM_KIT_POSTGRES_URL (scripts/test.sh starts a throwaway cluster with
scripts/postgres.sh and exports it); without it, ``throwaway_postgres`` starts one itself. Each server
gets a fresh database, so parallel workers never share state.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from engram_sync_kit.fake_cloud.errors import FakeCloudError

REPO = Path(__file__).resolve().parents[2]
POSTGRES_URL_VARIABLE = "ENGRAM_KIT_POSTGRES_URL"
# The real server refuses the development default and any secret under 32 bytes.
JWT_SECRET = "engram-sync-kit-differential-jwt-secret-0123456789"
START_TIMEOUT_SECONDS = 30.0
_PROJECT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class RealCloudError(FakeCloudError):
    """The real cloud server or its Postgres could not be started."""


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """ENGRAM_KIT_POSTGRES_URL if set, else a cluster from scripts/postgres.sh for the duration."""
    existing = os.environ.get(POSTGRES_URL_VARIABLE)
    if existing:
        yield existing
        return
    if not (REPO / "scripts" / "postgres.sh").is_file():
        raise RealCloudError(f"set {POSTGRES_URL_VARIABLE}: scripts/postgres.sh exists only in a checkout")
    started = subprocess.run(
        ["bash", str(REPO / "scripts" / "postgres.sh"), "up"], capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        raise RealCloudError(f"scripts/postgres.sh up failed: {started.stderr.strip()[-1000:]}")
    datadir, url = started.stdout.split()[-2:]
    try:
        yield url
    finally:
        subprocess.run(
            ["bash", str(REPO / "scripts" / "postgres.sh"), "down", datadir], capture_output=True, check=False
        )


def psql(url: str, sql: str) -> str:
    psql_bin = shutil.which("psql")
    if psql_bin is None:
        raise RealCloudError("psql is not installed (Debian package postgresql-client)")
    done = subprocess.run(
        [psql_bin, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if done.returncode != 0:
        raise RealCloudError(f"psql failed on {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RealCloud:
    base_url: str
    database_url: str
    process: subprocess.Popen[str]
    log_path: Path

    def pause(self, project: str, paused: bool = True) -> None:
        """What the dashboard's pause switch does: a row in cloud_project_controls."""
        if not _PROJECT_NAME.fullmatch(project):
            raise RealCloudError(f"project {project!r} is not a plain name; allowed: letters, digits, . _ -")
        enabled = "false" if paused else "true"
        psql(
            self.database_url,
            "INSERT INTO cloud_project_controls (project, sync_enabled, paused_reason, updated_by) "
            f"VALUES ('{project}', {enabled}, 'differential test', 'engram-sync-kit') "
            "ON CONFLICT (project) DO UPDATE SET sync_enabled = EXCLUDED.sync_enabled",
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextlib.contextmanager
def real_cloud_server(
    engram_bin: Path,
    postgres_url: str,
    *,
    token: str | None,
    allowed_projects: Sequence[str],
    max_push_bytes: int | None = None,
) -> Iterator[RealCloud]:
    """`engram cloud serve` on a free loopback port with a fresh database; stopped with SIGTERM.

    ``token=None`` starts it with ENGRAM_CLOUD_INSECURE_NO_AUTH=1.
    """
    database = f"engram_kit_{uuid.uuid4().hex[:12]}"
    psql(postgres_url, f"CREATE DATABASE {database}")
    database_url = with_database(postgres_url, database)
    workdir = Path(tempfile.mkdtemp(prefix="engram-real-cloud-"))
    log_path = workdir / "server.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "ENGRAM_DATA_DIR": str(workdir / "engram-data"),
        "ENGRAM_DATABASE_URL": database_url,
        "ENGRAM_CLOUD_HOST": "127.0.0.1",
        "ENGRAM_JWT_SECRET": JWT_SECRET,
        "ENGRAM_CLOUD_ALLOWED_PROJECTS": ",".join(allowed_projects),
    }
    if token is None:
        env["ENGRAM_CLOUD_INSECURE_NO_AUTH"] = "1"
    else:
        env["ENGRAM_CLOUD_TOKEN"] = token
    if max_push_bytes is not None:
        env["ENGRAM_CLOUD_MAX_PUSH_BYTES"] = str(max_push_bytes)
    process: subprocess.Popen[str] | None = None
    try:
        for _attempt in range(3):  # the free port can be taken between probe and bind
            port = free_port()
            with log_path.open("w") as log:
                process = subprocess.Popen(
                    [str(engram_bin.resolve()), "cloud", "serve"],
                    env={**env, "ENGRAM_PORT": str(port)},
                    cwd=workdir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            base_url = f"http://127.0.0.1:{port}"
            if _wait_healthy(base_url, process):
                yield RealCloud(base_url, database_url, process, log_path)
                return
            _stop(process)
        raise RealCloudError(f"engram cloud serve did not become healthy; its log:\n{log_path.read_text()}")
    finally:
        if process is not None:
            _stop(process)
        with contextlib.suppress(RealCloudError):
            psql(postgres_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_healthy(base_url: str, process: subprocess.Popen[str]) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            if httpx.get(f"{base_url}/health", timeout=2, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
