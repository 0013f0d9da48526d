"""End to end on engram v1.20.0: rows of an unenrolled key, claimed, are delivered by engram's own worker."""

from __future__ import annotations

import hashlib
import json
import subprocess
from typing import Any

import pytest
from inbox_support import by_key, canary, engram_ok, engram_serve, inbox_json, query, save

from fake_cloud.server import FakeCloudConfig, start_fake_cloud
from harness.engram_env import EngramEnvironment
from harness.polling import eventually

pytestmark = pytest.mark.engram

TOKEN = "t"
DELIVERY_TIMEOUT = 60.0  # the worker pushes only on its 30 s tick


def payload_digest(payload_text: str) -> str:
    payload: Any = json.loads(payload_text)
    if isinstance(payload, str):
        payload = json.loads(payload)
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_claimed_rows_are_delivered_by_engrams_own_worker(engram_world: EngramEnvironment) -> None:
    world = engram_world
    repo = world.root / "Side_Project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    save(world, "side-project", "decision one", cwd=repo)
    save(world, "side-project", "decision two", cwd=repo)
    engram_ok(world, "cloud", "enroll", "main-proj")
    assert by_key(inbox_json(world))["side-project"]["count"] == 2

    claim = canary(
        world,
        "inbox",
        "claim",
        "--project",
        "side-project",
        "--as",
        "main-proj",
        "--with-telemetry",
        "--apply",
    )
    assert claim.returncode == 0, claim.stderr
    db = world.db_path
    copies = query(
        db, "SELECT seq, entity, entity_key, payload FROM sync_mutations WHERE project = 'main-proj'"
    )
    assert [row[1] for row in copies] == ["session", "observation", "session", "observation"]
    assert inbox_json(world) == []

    config = FakeCloudConfig(token=TOKEN, allowed_projects=("main-proj",))
    with (
        start_fake_cloud(config) as cloud,
        engram_serve(
            world,
            ENGRAM_CLOUD_AUTOSYNC="1",
            ENGRAM_CLOUD_TOKEN=TOKEN,
            ENGRAM_CLOUD_SERVER=cloud.base_url,
        ),
    ):
        received = eventually(
            lambda: found
            if len(found := [r for r in cloud.client.received() if r.project == "main-proj"]) >= 4
            else None,
            timeout=DELIVERY_TIMEOUT,
            what="engram's autosync worker to push the claimed rows",
            error=AssertionError,
        )
        acked = eventually(
            lambda: True
            if query(
                db, "SELECT COUNT(*) FROM sync_mutations WHERE project = 'main-proj' AND acked_at IS NULL"
            )
            == [(0,)]
            else None,
            timeout=10,
            what="engram to ack the pushed rows",
            error=AssertionError,
        )
        assert acked
        everything = cloud.client.received()
    assert sorted((r.entity, r.entity_key, r.payload_digest) for r in received) == sorted(
        (entity, key, payload_digest(payload)) for _, entity, key, payload in copies
    )
    assert all(r.payload["project"] == "main-proj" for r in received)
    assert {r.project for r in everything} == {"main-proj"}
    # the originals stay acked, undelivered, with their content untouched
    originals = query(db, "SELECT acked_at, payload FROM sync_mutations WHERE project = 'side-project'")
    assert len(originals) == 4 and all(row[0] is not None for row in originals)
    assert all(json.loads(row[1])["project"] == "side-project" for row in originals)
