"""Triage never makes delivery worse, on engram v1.20.0's own rows, worker and doctor, against the fake cloud.

One messy home, built only with the real binary:
- a session created through `POST /sessions` without a directory (project side-project, not enrolled);
- a session of the enrolled main-proj created without a directory, then again with one (engram updates the
  sessions row and journals a second upsert, but the first, directory-less row stays first in the lane);
- `engram save` without a project (session manual-save, project '');
- ordinary saves of the enrolled main-proj and second-proj, journaled after those rows.

Then: the pre-flight refuses to claim the directory-less session and the memory that references it;
engram's worker is blocked by the refused rows; `check` names the block; `repair` and `inbox drop --unattributed` clear it; engram's doctor
and the worker agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from inbox_support import canary, engram_ok, engram_serve, query, save

from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

TOKEN = "t"
TICK_TIMEOUT = 75.0  # v1.20's worker runs its first cycle on its first 30 s tick after start
ENROLLED = ("main-proj", "second-proj")


@contextmanager
def autosync(world: EngramEnvironment, cloud: RunningFakeCloud) -> Iterator[None]:
    with engram_serve(
        world, ENGRAM_CLOUD_AUTOSYNC="1", ENGRAM_CLOUD_TOKEN=TOKEN, ENGRAM_CLOUD_SERVER=cloud.base_url
    ):
        yield


def legacy_state(world: EngramEnvironment) -> tuple[str, str | None]:
    [(lifecycle, last_error)] = query(
        world.db_path, "SELECT lifecycle, last_error FROM sync_state WHERE target_key = 'cloud'"
    )
    return str(lifecycle), last_error


def check_json(world: EngramEnvironment) -> tuple[int, dict[str, Any]]:
    result = canary(world, "check", "--format", "json")
    return result.returncode, json.loads(result.stdout)


def findings_named(document: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [finding for finding in document["findings"] if finding["check"] == check]


def doctor_findings(world: EngramEnvironment) -> list[dict[str, Any]]:
    result = world.run(["doctor", "--json", "--check", "sync_mutation_required_fields"])
    report = json.loads(result.stdout)
    [check] = report["checks"]
    return list(check.get("findings") or [])


def pending_digests(world: EngramEnvironment, projects: tuple[str, ...]) -> set[tuple[str, str, str]]:
    marks = ",".join("?" * len(projects))
    return {
        (str(project), str(entity), payload_digest(str(payload)))
        for project, entity, payload in query(
            world.db_path,
            f"SELECT project, entity, payload FROM sync_mutations WHERE target_key = 'cloud' "
            f"AND acked_at IS NULL AND project IN ({marks})",
            *projects,
        )
    }


@pytest.fixture
def messy_home(engram_world: EngramEnvironment) -> EngramEnvironment:
    world = engram_world
    for project in ENROLLED:
        engram_ok(world, "cloud", "enroll", project)
    home_dir = world.root / "ana home"
    home_dir.mkdir()
    with engram_serve(world) as server:
        server.post("/sessions", {"id": "s-nodir", "project": "side-project"})
        server.post(
            "/observations",
            {"session_id": "s-nodir", "type": "manual", "title": "side note", "content": "kept"},
        )
        server.post("/sessions", {"id": "s-late", "project": "main-proj"})
        server.post("/sessions", {"id": "s-late", "project": "main-proj", "directory": str(home_dir)})
        assert set(server.statuses) <= {200, 201}, server.failures
    engram_ok(world, "save", "no project", "saved without --project", cwd=home_dir)
    save(world, "main-proj", "main decision", cwd=home_dir)
    save(world, "second-proj", "second decision", cwd=home_dir)
    save(world, "second-proj", "naïve café ☕", cwd=home_dir)
    return world


def seq_of(world: EngramEnvironment, where: str) -> list[int]:
    return [
        int(row[0])
        for row in query(world.db_path, f"SELECT seq FROM sync_mutations WHERE {where} ORDER BY seq")
    ]


def test_triage_clears_a_blocked_lane_and_never_inserts_what_the_cloud_refuses(
    messy_home: EngramEnvironment,
) -> None:
    world = messy_home
    db = world.db_path
    [nodir_seq] = seq_of(world, "entity = 'session' AND entity_key = 's-nodir'")
    late_seqs = seq_of(world, "entity = 'session' AND entity_key = 's-late'")
    unattributed = seq_of(world, "project = '' AND acked_at IS NULL")
    assert len(late_seqs) == 2 and len(unattributed) == 2

    # (1) the pre-flight: claiming side-project would copy a session the cloud refuses, and its observation
    # without that session (the chunk path refuses a memory whose session the project lacks): nothing is
    # inserted, the dry run and the apply both say why in one line
    [(side_obs_key, side_obs_payload)] = query(
        db,
        "SELECT entity_key, payload FROM sync_mutations WHERE project = 'side-project' AND entity = 'observation'",
    )
    refused_all = (
        "engram-canary: error: nothing to claim: the cloud would refuse all 2 rows of inbox key 'side-project' "
        f"(first: seq {nodir_seq}, 500 session payload directory is required for upsert; the correct value cannot "
        f"be derived from engram's tables; drop it (engram-canary inbox drop --seq {nodir_seq}))\n"
    )
    before = query(db, "SELECT COUNT(*) FROM sync_mutations")
    for apply_flag in ((), ("--apply",)):
        claim = canary(
            world,
            "inbox",
            "claim",
            "--project",
            "side-project",
            "--as",
            "main-proj",
            "--with-telemetry",
            *apply_flag,
        )
        assert (claim.returncode, claim.stdout, claim.stderr) == (3, "", refused_all)
    assert query(db, "SELECT COUNT(*) FROM sync_mutations") == before
    assert query(db, "SELECT acked_at IS NULL FROM sync_mutations WHERE seq = ?", nodir_seq) == [(1,)]
    side_observation = ("side-project", "observation", payload_digest(side_obs_payload))

    # (2) engram's own worker is blocked by the refused rows of the lane
    held_back = pending_digests(world, ENROLLED)
    config = FakeCloudConfig(token=TOKEN, allowed_projects=ENROLLED, server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        with autosync(world, cloud):
            eventually(
                lambda: True if legacy_state(world)[0] == "degraded" else None,
                timeout=TICK_TIMEOUT,
                what="engram's worker to fail its push",
                error=AssertionError,
            )
        _, last_error = legacy_state(world)
        delivered_while_blocked = {(r.project, r.entity, r.payload_digest) for r in cloud.client.received()}
        still_waiting = pending_digests(world, ENROLLED)
        assert still_waiting, "the block held nothing back"
        assert still_waiting == held_back - delivered_while_blocked

        status, document = check_json(world)
        assert status == 2
        [blocked] = findings_named(document, "legacy_lane_blocked")
        evidence = blocked["evidence"]
        assert blocked["severity"] == "critical"
        assert set(evidence["blocking_seqs"]) == {late_seqs[0], *unattributed}
        assert evidence["reasons"] == {
            "400 mutation entries must specify a project": 2,
            "500 session payload directory is required for upsert": 1,
        }
        assert evidence["last_error"] == last_error
        assert evidence["held_back_rows"] == sum(evidence["held_back_by_project"].values()) > 0
        assert set(evidence["held_back_by_project"]) <= set(ENROLLED)
        assert evidence["clear_commands"] == [
            f"engram-canary repair --db {db} --apply",
            f"engram-canary inbox drop --unattributed --db {db} --apply",
        ]
        assert evidence["clear_command"] == evidence["clear_commands"][0]

        # (3) repair: the directory comes from the sessions table; engram's doctor agrees
        assert {finding["evidence"]["seq"] for finding in doctor_findings(world)} >= {late_seqs[0], nodir_seq}
        repaired = canary(world, "repair", "--apply")
        assert repaired.returncode == 0, repaired.stderr
        assert f"(copy of seq {late_seqs[0]}, project 'main-proj', repaired: directory " in repaired.stdout
        [new_seq] = [int(seq) for seq in repaired.stdout.split("new seqs: ")[1].split()[0].split(",")]
        doctor_seqs = {finding["evidence"]["seq"] for finding in doctor_findings(world)}
        assert doctor_seqs.isdisjoint({late_seqs[0], new_seq}), doctor_seqs
        # the inbox row no claim could fix, dropped by seq: doctor then reports nothing blocking at all
        assert canary(world, "inbox", "drop", "--seq", str(nodir_seq), "--apply").returncode == 0
        assert doctor_findings(world) == []

        # (4) the way out for rows without a project, then the worker delivers everything held back
        dropped = canary(world, "inbox", "drop", "--unattributed", "--apply")
        assert dropped.returncode == 0, dropped.stderr
        _, document = check_json(world)
        assert all(
            f["evidence"]["blocking_rows"] == 0 for f in findings_named(document, "legacy_lane_blocked")
        )
        deliverable = pending_digests(world, ENROLLED)
        # every row the block held back is still deliverable; the directory-less original gave way to its copy
        [(late_payload,)] = query(db, "SELECT payload FROM sync_mutations WHERE seq = ?", late_seqs[0])
        [(copy_payload,)] = query(db, "SELECT payload FROM sync_mutations WHERE seq = ?", new_seq)
        assert deliverable == (still_waiting - {("main-proj", "session", payload_digest(late_payload))}) | {
            ("main-proj", "session", payload_digest(copy_payload))
        }
        with autosync(world, cloud):
            eventually(
                lambda: True if not pending_digests(world, ENROLLED) else None,
                timeout=TICK_TIMEOUT,
                what="engram's worker to deliver the rows held back",
                error=AssertionError,
            )
        received = {(r.project, r.entity, r.payload_digest) for r in cloud.client.received()}
        received_keys = {(r.project, r.entity, r.entity_key) for r in cloud.client.received()}
    assert deliverable <= received
    assert legacy_state(world)[0] == "healthy"
    status, document = check_json(world)
    assert findings_named(document, "legacy_lane_blocked") == []
    # nothing without a project and no directory-less session ever reached the cloud
    assert all(project for project, _, _ in received)
    assert ("main-proj", "session", payload_digest(late_payload)) not in received
    # nothing of the unenrolled key ever did, nor its refused observation under another project
    assert not any(project == "side-project" for project, _, _ in received)
    assert side_observation not in received
    assert not any(entity == "observation" and key == side_obs_key for _, entity, key in received_keys)
