"""The REAL engram client against the fake: autosync (``engram serve``) and chunk sync (``engram sync --cloud``).

engram v1.20's autosync pushes only on its 30 s poll tick, so the autosync worlds run side by side in one
test and share one tick of waiting.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from engram_sync_kit.fake_cloud.models import Fault, Route
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.polling import free_port

pytestmark = pytest.mark.engram

TOKEN = "real-client-token"
TICK_WAIT = 45.0  # one 30 s autosync tick plus slack
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


def read_rows(db: Path, sql: str) -> list[sqlite3.Row]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql).fetchall()


def digest(payload_text: str) -> str:
    payload = json.loads(payload_text)
    if isinstance(payload, str):
        payload = json.loads(payload)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def new_world(engram_bin: Path, root: Path, project: str) -> EngramEnvironment:
    world = EngramEnvironment(binary=engram_bin, root=root).prepare()
    for args in (
        ["save", f"title {project}", f"content of {project}", "--project", project],
        ["cloud", "enroll", project],
    ):
        result = world.run(args)
        assert result.returncode == 0, meaningful_stderr(result.stderr)
    return world


@dataclass
class ServingWorld:
    project: str
    world: EngramEnvironment
    port: int
    process: subprocess.Popen[bytes]

    def sync_status(self) -> dict[str, Any]:
        return dict(httpx.get(f"http://127.0.0.1:{self.port}/sync/status", timeout=5).json())

    def cloud_state(self) -> sqlite3.Row | None:
        rows = read_rows(self.world.db_path, "SELECT * FROM sync_state WHERE target_key = 'cloud'")
        return rows[0] if rows else None


def cloud_state_where(
    serving: ServingWorld, accept: Callable[[sqlite3.Row], bool]
) -> Callable[[], sqlite3.Row | None]:
    """A probe for eventually(): the world's sync_state 'cloud' row once `accept` holds for it."""

    def probe() -> sqlite3.Row | None:
        row = serving.cloud_state()
        return row if row is not None and accept(row) else None

    return probe


@pytest.fixture
def fake() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(
        FakeCloudConfig(token=TOKEN, allowed_projects=("ok", "paused", "flaky"), server_version="v1.20")
    ) as cloud:
        yield cloud


@pytest.fixture
def serve_world(
    engram_bin: Path, tmp_path: Path, fake: RunningFakeCloud
) -> Iterator[Callable[[str], ServingWorld]]:
    started: list[ServingWorld] = []

    def start(project: str) -> ServingWorld:
        world = new_world(engram_bin, tmp_path / project, project)
        port = free_port()
        env = world.env(
            {
                "ENGRAM_CLOUD_AUTOSYNC": "1",
                "ENGRAM_CLOUD_TOKEN": TOKEN,
                "ENGRAM_CLOUD_SERVER": fake.base_url,
                "ENGRAM_PORT": str(port),
            }
        )
        log = (tmp_path / f"{project}-serve.log").open("wb")
        process = subprocess.Popen(
            [str(engram_bin), "serve"],
            env=env,
            cwd=world.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        serving = ServingWorld(project, world, port, process)
        started.append(serving)
        return serving

    yield start
    for serving in started:
        if serving.process.poll() is None:
            serving.process.send_signal(signal.SIGTERM)
            try:
                serving.process.wait(10)
            except subprocess.TimeoutExpired:
                serving.process.kill()
                serving.process.wait(10)


def test_autosync_push_is_acked_and_403_409_503_reach_sync_state(
    fake: RunningFakeCloud, serve_world: Callable[[str], ServingWorld]
) -> None:
    fake.client.pause("paused")
    fake.client.add_faults([Fault(route=Route.MUTATIONS_PUSH, project="flaky", times=1000, status=503)])
    worlds = {project: serve_world(project) for project in ("ok", "forbidden", "paused", "flaky")}

    for project, status in (("ok", 200), ("forbidden", 403), ("paused", 409), ("flaky", 503)):
        fake.client.wait(1, timeout=TICK_WAIT, path="/sync/mutations/push", project=project, status=status)

    ok = worlds["ok"]
    local = read_rows(ok.world.db_path, "SELECT * FROM sync_mutations WHERE project = 'ok' ORDER BY seq")
    assert len(local) == 2
    received = [r for r in fake.client.received() if r.project == "ok"]
    assert sorted(r.payload_digest for r in received) == sorted(digest(row["payload"]) for row in local)

    def all_acked() -> bool:
        rows = read_rows(ok.world.db_path, "SELECT acked_at FROM sync_mutations WHERE project = 'ok'")
        return all(row["acked_at"] for row in rows)

    eventually(all_acked, 15, "the ok world's rows are acked")
    state = eventually(cloud_state_where(ok, lambda row: row["lifecycle"] == "healthy"), 15, "ok is healthy")
    assert state["last_error"] is None

    expectations = {
        "forbidden": ("status 403: forbidden: project is not allowed", "policy_forbidden"),
        "paused": ('status 409: sync is paused for project "paused"', "transport_failed"),
        "flaky": ("status 503: fake cloud fault: injected status 503", "transport_failed"),
    }
    for project, (error_text, status_reason) in expectations.items():
        serving = worlds[project]
        state = eventually(
            cloud_state_where(serving, lambda row: bool(row["last_error"])),
            15,
            f"{project}: sync_state 'cloud' records the failure",
        )
        assert error_text in state["last_error"], (project, state["last_error"])
        # v1.20 writes reason_code transport_failed for every autosync failure; the manager's own
        # status, served by engram serve, keeps the distinction.
        assert state["reason_code"] == "transport_failed"
        assert state["lifecycle"] == "degraded"
        assert serving.sync_status()["reason_code"] == status_reason, serving.sync_status()
        unacked = read_rows(serving.world.db_path, "SELECT acked_at FROM sync_mutations")
        assert unacked and all(row["acked_at"] is None for row in unacked)


@pytest.fixture
def chunk_world(engram_bin: Path, tmp_path: Path) -> EngramEnvironment:
    return new_world(engram_bin, tmp_path / "chunks", "p")


def cloud_sync(
    world: EngramEnvironment, fake: RunningFakeCloud, *extra: str, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {"ENGRAM_CLOUD_TOKEN": token, "ENGRAM_CLOUD_SERVER": fake.base_url}
    return world.run(["sync", "--cloud", "--project", "p", *extra], env=env)


def test_sync_cloud_pushes_a_chunk_with_the_clients_own_chunk_id(
    fake: RunningFakeCloud, chunk_world: EngramEnvironment
) -> None:
    fake.client.set_allowlist(["p"])
    result = cloud_sync(chunk_world, fake)
    assert result.returncode == 0, meaningful_stderr(result.stderr)
    assert 'Cloud sync complete for project "p".' in result.stdout

    [local_chunk] = read_rows(chunk_world.db_path, "SELECT chunk_id FROM sync_chunks")
    with httpx.Client(base_url=fake.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        manifest = http.get("/sync/pull", params={"project": "p"}).json()
    assert [chunk["id"] for chunk in manifest["chunks"]] == [local_chunk["chunk_id"]]

    pushed = fake.client.wait(2, timeout=5, transport="chunk", path="/sync/push", status=200)
    assert {e.entity for e in pushed} == {"session", "observation"}
    local = read_rows(chunk_world.db_path, "SELECT payload FROM sync_mutations WHERE project = 'p'")
    assert sorted(r.payload_digest for r in fake.client.received()) == sorted(
        digest(row["payload"]) for row in local
    )

    again = cloud_sync(chunk_world, fake)
    assert 'Nothing new to sync for project "p"' in again.stdout


def test_another_machine_imports_the_pushed_chunk_from_the_fake(
    fake: RunningFakeCloud, chunk_world: EngramEnvironment, engram_bin: Path, tmp_path: Path
) -> None:
    fake.client.set_allowlist(["p"])
    assert cloud_sync(chunk_world, fake).returncode == 0
    [pushed] = read_rows(chunk_world.db_path, "SELECT chunk_id FROM sync_chunks")
    reader = EngramEnvironment(binary=engram_bin, root=tmp_path / "reader").prepare()
    assert reader.run(["cloud", "enroll", "p"]).returncode == 0
    result = cloud_sync(reader, fake, "--import")
    assert result.returncode == 0, meaningful_stderr(result.stderr)
    assert 'Imported 1 new remote chunk(s) for project "p"' in result.stdout
    titles = [row["title"] for row in read_rows(reader.db_path, "SELECT title FROM observations")]
    assert titles == ["title p"]
    [chunk_get] = fake.client.wait(1, timeout=5, method="GET", path=f"/sync/pull/{pushed['chunk_id']}")
    assert (chunk_get.status, chunk_get.project) == (200, "p")


@pytest.mark.parametrize(
    ("setup", "reason_code", "error_text"),
    [
        ("badtoken", "auth_required", "status 401: unauthorized: unknown token"),
        ("forbid", "policy_forbidden", "status 403: forbidden: project is not allowed"),
        ("pause", "transport_failed", 'status 409: sync is paused for project "p"'),
        ("fail", "transport_failed", "status 503: fake cloud fault: injected status 503"),
    ],
)
def test_sync_cloud_failures_land_in_sync_state_with_their_reason(
    fake: RunningFakeCloud, chunk_world: EngramEnvironment, setup: str, reason_code: str, error_text: str
) -> None:
    token = "not-the-token" if setup == "badtoken" else TOKEN
    if setup == "forbid":
        fake.client.set_allowlist(["other"])
    elif setup == "pause":
        fake.client.set_allowlist(["p"])
        fake.client.pause("p")
    else:
        fake.client.set_allowlist(["p"])
        fake.client.add_faults([Fault(route=Route.CHUNK_PUSH, project="p", status=503)])
    result = cloud_sync(chunk_world, fake, token=token)
    assert result.returncode == 1
    assert error_text in result.stderr
    [state] = read_rows(chunk_world.db_path, "SELECT * FROM sync_state WHERE target_key = 'cloud:p'")
    assert state["reason_code"] == reason_code
    assert error_text in state["last_error"]
    assert state["lifecycle"] == "degraded"


def test_sync_cloud_over_https_trusts_the_handed_out_ca(chunk_world: EngramEnvironment) -> None:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as fake:
        assert fake.ca_file is not None
        env = {"ENGRAM_CLOUD_TOKEN": TOKEN, "ENGRAM_CLOUD_SERVER": fake.base_url}
        untrusted = chunk_world.run(["sync", "--cloud", "--project", "p"], env=env)
        assert untrusted.returncode == 1
        assert "certificate" in untrusted.stderr
        trusted = chunk_world.run(
            ["sync", "--cloud", "--project", "p"], env={**env, "SSL_CERT_FILE": str(fake.ca_file)}
        )
        assert trusted.returncode == 0, meaningful_stderr(trusted.stderr)
        [entry] = fake.client.wait(1, timeout=5, path="/sync/pull", status=200, since_id=0)
        assert entry.project == "p"
        assert len(fake.client.wait(2, timeout=5, path="/sync/push", status=200)) == 2
