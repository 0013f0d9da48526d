"""The canary and the inbox list, run on the scale-1 deployment, give back the design's measured numbers."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.canary.derive import (
    AliasMap,
    CandidateSource,
    Resolution,
    RowContext,
    derive,
    session_designation,
)
from engram_sync_kit.harness.deployment import DeploymentSpec, DeploymentSummary, generate

pytestmark = pytest.mark.engram


@pytest.fixture(scope="module")
def deployment(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> DeploymentSummary:
    out = tmp_path_factory.mktemp("measured") / "engram.db"
    return generate(DeploymentSpec(), 1013, out, engram_bin)


@pytest.fixture(autouse=True)
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary reads its config and alias map from XDG_CONFIG_HOME: keep the user's own out."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENGRAM_DATA_DIR", raising=False)


def canary(*args: str) -> tuple[int, Any]:
    script = Path(sys.executable).parent / "engram-canary"
    done = subprocess.run([str(script), *args], capture_output=True, text=True, check=False, timeout=120)
    assert done.stdout.strip(), f"engram-canary {' '.join(args)} printed nothing: {done.stderr}"
    return done.returncode, json.loads(done.stdout)


def test_check_reports_the_35_phantoms_and_the_dead_403_target(deployment: DeploymentSummary) -> None:
    code, report = canary("check", "--format", "json", "--no-baseline", "--db", deployment.path)
    assert report["schema"] == "engram-canary/check/v1"
    # The home dir's key alone holds 592 unacked rows, past the canary's critical row threshold.
    assert (code, report["status"]) == (2, "critical")
    checks = Counter(finding["check"] for finding in report["findings"])
    assert checks == {"foreign_sync_target": 36, "undelivered_project_lane": 10}
    foreign = [finding for finding in report["findings"] if finding["check"] == "foreign_sync_target"]
    by_target = {finding["target_key"]: finding for finding in foreign}
    assert set(by_target) == set(deployment.foreign_targets)
    assert len(deployment.foreign_targets) == 36
    assert all(finding["new"] for finding in foreign)
    # Problem 6 as the canary reports it: the 135 rows on the enrolled projects' own lanes.
    lanes = [finding for finding in report["findings"] if finding["check"] == "undelivered_project_lane"]
    assert {finding["target_key"] for finding in lanes} == {
        f"cloud:{project}" for project in deployment.enrolled_projects
    }
    assert sum(finding["evidence"]["unacked_rows"] for finding in lanes) == 135
    assert set(report["allowed_targets"]) == {
        "cloud",
        "cloud:inbox",
        "local",
        *(f"cloud:{project}" for project in deployment.enrolled_projects),
    }

    phantoms = [by_target[f"cloud:{key}"]["evidence"] for key in deployment.phantom_keys]
    # Every phantom is an empty, pending sync_state row; its rows wait in the legacy lane.
    assert {(evidence["lifecycle"], evidence["unacked_rows"]) for evidence in phantoms} == {("pending", 0)}
    assert sum(evidence["project_unacked_rows"] for evidence in phantoms) == 892
    assert all(evidence["project_unacked_rows"] >= 1 for evidence in phantoms)
    assert by_target[f"cloud:{deployment.home_key}"]["evidence"]["project_unacked_rows"] == 538 + 52 + 2

    dead = by_target[f"cloud:{deployment.forbidden_key}"]["evidence"]
    assert dead["lifecycle"] == "degraded"
    assert (dead["unacked_rows"], dead["project_unacked_rows"]) == (0, 0)
    assert dead["last_enqueued_seq"] == dead["last_acked_seq"]

    summary = report["summary"]
    assert (summary["foreign_sync_targets"], summary["foreign_mutation_targets"]) == (36, 0)
    assert summary["last_seq"] == 7600
    unacked = summary["unacked_rows_by_target"]
    assert unacked.pop("cloud") == 892
    # Problem 6: the per-project lane of the enrolled projects, never delivered.
    assert set(unacked) <= {f"cloud:{project}" for project in deployment.enrolled_projects}
    assert sum(unacked.values()) == 135
    assert summary["unacked_rows"] == 892 + 135


def test_inbox_list_holds_the_892_stuck_rows_880_of_them_telemetry(deployment: DeploymentSummary) -> None:
    code, keys = canary("inbox", "list", "--format", "json", "--db", deployment.path)
    assert code == 0
    assert sum(key["total"] for key in keys) == 892
    assert sum(key["telemetry"] for key in keys) == 880
    assert sum(key["count"] for key in keys) == 12
    entities: Counter[str] = Counter()
    for key in keys:
        entities.update(key["entities"])
    assert entities == {"session": 700, "prompt": 180, "observation": 12}
    assert not {key["key"] for key in keys} & set(deployment.enrolled_projects)

    # None of these directories is a git repository here, so the design's pipeline files every stuck row
    # under `unsorted`, broken down by the cwd that minted its phantom key.
    (unsorted,) = keys
    assert unsorted["key"] == "unsorted"
    cwds = unsorted["cwds"]
    home = f"/home/{deployment.home_key}"
    assert cwds[home] == 538 + 52 + 2
    assert cwds["/"] == 21 + 9 + 1
    assert cwds["/tmp/prueba"] == 14 + 11 + 2
    assert cwds[f"{home}/Documents/notes"] == (24 + 10 + 1) + 1  # one dir, keys `notes` and `documents`
    spellings = {cwd.rsplit("/", 1)[1] for cwd in cwds if cwd.startswith(f"{home}/models/")}
    assert spellings == {"LM-Studio-Models", "LM_Studio_Models", "LM Studio Models"}
    assert deployment.designated_directory not in cwds
    assert sum(cwds.values()) == 892


def test_the_348_designated_sessions_resolve_to_their_enrolled_project(deployment: DeploymentSummary) -> None:
    connection = sqlite3.connect(f"file:{deployment.path}?mode=ro", uri=True)
    try:
        enrolled = {row[0] for row in connection.execute("SELECT project FROM sync_enrolled_projects")}
        sessions = connection.execute("SELECT id, project, directory FROM sessions").fetchall()
        acked = dict(
            connection.execute(
                "SELECT entity_key, acked_at IS NOT NULL FROM sync_mutations WHERE entity = 'session'"
            ).fetchall()
        )
    finally:
        connection.close()
    resolved: Counter[tuple[str, str | None, str]] = Counter()
    for session_id, project, directory in sessions:
        designation = session_designation(session_id, project, directory)
        if designation is None:
            continue
        derivation = derive(RowContext(designation=designation, cwd=directory), AliasMap(), enrolled)
        assert derivation.source is CandidateSource.DESIGNATION
        resolved[(directory, derivation.project, derivation.resolution.value)] += 1
        assert acked[session_id], "a designated enrolled session is delivered, never stuck"
    assert resolved == {
        (deployment.designated_directory, deployment.designated_project, Resolution.ENROLLED.value): 348
    }


def test_with_a_workspace_unenrolled_repositories_keep_their_key(engram_bin: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "machine"
    workspace.mkdir()
    summary = generate(DeploymentSpec(), 1013, tmp_path / "engram.db", engram_bin, workspace=workspace)
    code, keys = canary("inbox", "list", "--format", "json", "--db", summary.path)
    assert code == 0
    totals = {key["key"]: key["total"] for key in keys}
    connection = sqlite3.connect(f"file:{summary.path}?mode=ro", uri=True)
    try:
        stuck = dict(
            connection.execute(
                "SELECT project, count(*) FROM sync_mutations WHERE target_key = 'cloud' AND acked_at IS NULL"
                " AND project NOT IN (SELECT project FROM sync_enrolled_projects) GROUP BY project"
            ).fetchall()
        )
    finally:
        connection.close()
    # The 25 unenrolled git repositories keep their identity; the basename noise stays unsorted.
    noise = set(summary.phantom_keys[:10])
    repositories = set(summary.phantom_keys[10:])
    assert len(repositories) == 25
    assert totals == {
        **{key: stuck[key] for key in repositories},
        "unsorted": sum(stuck[key] for key in noise),
    }
    assert sum(totals.values()) == 892
    assert (
        totals["unsorted"] == (538 + 52 + 2) + (21 + 9 + 1) + (14 + 11 + 2) + (6 + 4) + (9 + 7 + 1) + 25 + 36
    )


def test_the_text_verdict_counts_foreign_targets_and_other_findings_apart(
    deployment: DeploymentSummary,
) -> None:
    script = Path(sys.executable).parent / "engram-canary"
    done = subprocess.run(
        [str(script), "check", "--no-baseline", "--db", str(deployment.path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout.splitlines()[0].startswith(
        "ENGRAM-CANARY CRITICAL - 36 foreign sync targets (36 new), 10 other findings (10 new) | "
    )
