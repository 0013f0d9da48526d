"""Rows without a project (v1.20's `engram save` without --project): shown by inbox list and check."""

from __future__ import annotations

import json

import pytest
from inbox_support import by_key, canary, engram_ok, engram_serve, inbox_json, query, save

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

NO_PROJECT = "(no project)"


@pytest.fixture
def world(engram_world: EngramEnvironment) -> EngramEnvironment:
    """Two saves without --project (project '': the manual-save session upsert and an observation each), one with."""
    engram_ok(engram_world, "save", "loose one", "no project given")
    engram_ok(engram_world, "save", "loose two", "no project given")
    save(engram_world, "side-project", "attributed")
    return engram_world


def test_inbox_list_json_lists_them_last_under_no_project(world: EngramEnvironment) -> None:
    entries = inbox_json(world)

    assert [entry["key"] for entry in entries] == ["side-project", NO_PROJECT]
    loose = by_key(entries)[NO_PROJECT]
    assert (loose["count"], loose["telemetry"], loose["total"]) == (2, 2, 4)
    assert loose["entities"] == {"observation": 2, "session": 2}
    assert loose["claim_command"] is None and loose["resolved_to"] is None
    assert "mutation entries must specify a project" in loose["hint"]
    assert by_key(entries)["side-project"]["count"] == 1


def test_inbox_list_text_has_a_separate_line(world: EngramEnvironment) -> None:
    result = canary(world, "inbox", "list")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("inbox: 1 memories and 1 telemetry rows in 1 keys")
    assert lines[-1].startswith(f"{NO_PROJECT}: 2 memories and 2 telemetry rows, oldest 20")
    assert "engram save without --project" in lines[-1]


def test_only_unattributed_rows_leave_the_inbox_empty(engram_world: EngramEnvironment) -> None:
    engram_ok(engram_world, "save", "loose", "no project given")

    text = canary(engram_world, "inbox", "list").stdout.splitlines()

    assert (
        text[0]
        == "inbox: empty (every unacked legacy-lane row with a project belongs to an enrolled project)"
    )
    assert text[1].startswith(f"{NO_PROJECT}: 1 memories and 1 telemetry rows")
    assert [entry["key"] for entry in inbox_json(engram_world)] == [NO_PROJECT]


def test_check_warns_with_unattributed_mutations(world: EngramEnvironment) -> None:
    result = canary(world, "check", "--db", str(world.db_path), "--format", "json", "--no-baseline")

    report = json.loads(result.stdout)
    # the worker lists these rows and the cloud refuses them: the lane is blocked (critical, issue 10)
    assert (result.returncode, report["status"]) == (2, "critical"), result.stderr
    assert {"legacy_lane_blocked", "unattributed_mutations"} <= {f["check"] for f in report["findings"]}
    found = [f for f in report["findings"] if f["check"] == "unattributed_mutations"]
    assert len(found) == 1, report["findings"]
    finding = found[0]
    assert (finding["severity"], finding["target_key"], finding["key"], finding["new"]) == (
        "warning",
        "cloud",
        None,
        True,
    )
    evidence = finding["evidence"]
    assert {key: evidence[key] for key in ("count", "telemetry", "total", "entities")} == {
        "count": 2,
        "telemetry": 2,
        "total": 4,
        "entities": {"observation": 2, "session": 2},
    }
    assert evidence["oldest"].endswith("Z") and evidence["oldest_age_days"] >= 0
    assert finding["message"].startswith("4 unacked rows in the legacy lane have no project")


def test_a_database_without_them_has_no_such_finding(engram_world: EngramEnvironment) -> None:
    save(engram_world, "side-project", "attributed")

    report = json.loads(
        canary(engram_world, "check", "--db", str(engram_world.db_path), "--format", "json").stdout
    )

    assert "unattributed_mutations" not in {finding["check"] for finding in report["findings"]}
    assert NO_PROJECT not in by_key(inbox_json(engram_world))


def test_they_hold_back_an_enrolled_projects_rows(engram_world: EngramEnvironment) -> None:
    """Why it is a warning: v1.20's worker pushes in seq order and stops the cycle at the refused batch."""
    engram_ok(engram_world, "save", "loose", "no project given")
    engram_ok(engram_world, "cloud", "enroll", "main")
    save(engram_world, "main", "attributed")
    config = FakeCloudConfig(token="unattributed-token", allowed_projects=("main",), server_version="v1.20")
    with (
        start_fake_cloud(config) as cloud,
        engram_serve(
            engram_world,
            ENGRAM_CLOUD_AUTOSYNC="1",
            ENGRAM_CLOUD_TOKEN="unattributed-token",
            ENGRAM_CLOUD_SERVER=cloud.base_url,
        ),
    ):
        refused = cloud.client.wait(2, timeout=90, path="/sync/mutations/push", status=400)
        received = cloud.client.received()
    assert len(refused) == 2 and received == []
    assert query(engram_world.db_path, "SELECT project, acked_at FROM sync_mutations ORDER BY seq") == [
        ("", None),
        ("", None),
        ("main", None),
        ("main", None),
    ]
