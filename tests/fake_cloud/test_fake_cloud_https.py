"""The real Go client's TLS stack against the fake's throwaway CA, with engram v1.20.0's autosync.

v3 needs HTTPS (see test_fake_cloud_v3.py); v1.20 does not, but it goes through the same Go TLS
verification, so this shows that SSL_CERT_FILE with the fake's CA is what a client needs, and that
without it the push fails verification and never reaches the fake's sync routes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.serve import EngramDaemon

pytestmark = pytest.mark.engram

TOKEN = "https-token"
TICK_WAIT = 45.0  # v1.20 autosync pushes on its 30 s tick only


def query(db: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def https_fake() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True)) as cloud:
        yield cloud


@pytest.fixture
def serving(
    engram_bin: Path, tmp_path: Path, https_fake: RunningFakeCloud
) -> Iterator[Callable[[str, bool], EngramEnvironment]]:
    daemons: list[EngramDaemon] = []

    def start(project: str, trust_ca: bool) -> EngramEnvironment:
        world = EngramEnvironment(binary=engram_bin, root=tmp_path / project).prepare()
        for args in (["save", "t", f"c {project}", "--project", project], ["cloud", "enroll", project]):
            done = world.run(args)
            assert done.returncode == 0, meaningful_stderr(done.stderr)
        overrides = {
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "ENGRAM_CLOUD_SERVER": https_fake.base_url,
            # An empty bundle file, not the system one: the system store must not vouch for the fake.
            "SSL_CERT_FILE": str(https_fake.ca_file) if trust_ca else str(world.root / "empty.pem"),
        }
        (world.root / "empty.pem").write_text("")
        daemon = EngramDaemon(world, overrides, world.root / "serve.log")
        daemons.append(daemon)
        daemon.start(autosync=True)
        return world

    yield start
    for daemon in daemons:
        daemon.close()


def test_autosync_over_https_needs_the_fakes_ca(
    https_fake: RunningFakeCloud, serving: Callable[[str, bool], EngramEnvironment]
) -> None:
    trusted = serving("trusted", True)
    untrusted = serving("untrusted", False)

    https_fake.client.wait(1, timeout=TICK_WAIT, path="/sync/mutations/push", project="trusted", status=200)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        pending = query(trusted.db_path, "SELECT COUNT(*) FROM sync_mutations WHERE acked_at IS NULL")
        failure = query(untrusted.db_path, "SELECT last_error FROM sync_state WHERE target_key = 'cloud'")
        if pending == [(0,)] and failure and failure[0][0]:
            break
        time.sleep(0.2)
    assert pending == [(0,)]
    assert failure and failure[0][0], "the untrusted world recorded no error"
    assert "x509: certificate signed by unknown authority" in str(failure[0][0])
    pushed_projects = {
        e.project for e in https_fake.client.journal().entries if e.path == "/sync/mutations/push"
    }
    assert pushed_projects == {"trusted"}
