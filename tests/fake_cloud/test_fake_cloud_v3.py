"""The newest engram v3 release against the fake over HTTPS (v3 refuses a bearer token over plain http).

These form their own tier, `engram_v3`, run by `make test-v3` (which installs the binary first). The
module proxy reachable here refuses every v2 and v3 tag (403), so `make test` leaves this tier out
rather than pretend it ran; the tier fails, never skips, when CI=true and the binary is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_parts import missing

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.install import cached_binary
from engram_sync_kit.harness.polling import free_port

pytestmark = [pytest.mark.engram, pytest.mark.engram_v3]

V3_VERSION = os.environ.get("ENGRAM_V3_VERSION", "v3.2.1")
TOKEN = "v3-token"
PROJECT = "v3proj"
TICK_WAIT = 45.0  # one autosync poll tick plus slack
# engram's remote transport since v2.0.0-rc.10 (reference notes, issue #1145 upstream).
HTTPS_REQUIRED = "bearer token requires an HTTPS remote URL"


@pytest.fixture(scope="session")
def engram_v3_bin() -> Path:
    candidate = Path(os.environ.get("ENGRAM_BIN_V3") or cached_binary(V3_VERSION))
    if not (candidate.is_file() and os.access(candidate, os.X_OK)):
        reason = f"engram {V3_VERSION} is not installed (run: engram-harness engram install {V3_VERSION})"
        missing(reason)
    return candidate


def v3_world(binary: Path, root: Path) -> EngramEnvironment:
    world = EngramEnvironment(binary=binary, root=root).prepare()
    for args in (["save", "v3 title", "v3 content", "--project", PROJECT], ["cloud", "enroll", PROJECT]):
        done = world.run(args)
        assert done.returncode == 0, (args, meaningful_stderr(done.stderr))
    return world


def unacked(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM sync_mutations WHERE project = ? AND acked_at IS NULL", (PROJECT,)
        ).fetchone()
    return int(row[0])


@pytest.fixture
def https_fake() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True)) as cloud:
        yield cloud


def test_v3_autosync_pushes_over_https_and_acks(
    engram_v3_bin: Path, tmp_path: Path, https_fake: RunningFakeCloud
) -> None:
    assert https_fake.base_url.startswith("https://") and https_fake.ca_file is not None
    world = v3_world(engram_v3_bin, tmp_path)
    assert unacked(world.db_path) > 0
    env = world.env(
        {
            "ENGRAM_CLOUD_AUTOSYNC": "1",
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "ENGRAM_CLOUD_SERVER": https_fake.base_url,
            "ENGRAM_PORT": str(free_port()),
            "SSL_CERT_FILE": str(https_fake.ca_file),
        }
    )
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [str(engram_v3_bin), "serve"], env=env, cwd=world.home, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        pushed = https_fake.client.wait(
            1, timeout=TICK_WAIT, path="/sync/mutations/push", project=PROJECT, status=200
        )
        assert pushed
        deadline = time.monotonic() + 15
        while unacked(world.db_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert unacked(world.db_path) == 0, (tmp_path / "serve.log").read_text(errors="replace")[-2000:]
        assert {m.project for m in https_fake.client.received()} == {PROJECT}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_v3_refuses_a_token_over_plain_http(engram_v3_bin: Path, tmp_path: Path) -> None:
    world = v3_world(engram_v3_bin, tmp_path)
    with start_fake_cloud(FakeCloudConfig(token=TOKEN)) as plain:
        done = world.run(
            ["sync", "--cloud", "--project", PROJECT],
            env={"ENGRAM_CLOUD_TOKEN": TOKEN, "ENGRAM_CLOUD_SERVER": plain.base_url},
        )
        assert done.returncode != 0
        assert HTTPS_REQUIRED in meaningful_stderr(done.stderr) + done.stdout
        sync_requests = [e for e in plain.client.journal().entries if e.path.startswith("/sync/")]
        assert sync_requests == []
