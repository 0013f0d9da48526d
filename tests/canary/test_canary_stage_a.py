"""Stage A on a messy home made by hand with the real engram (issue 12): engram's own detection
(git_root, git_remote, git_child, basename, explicit designation) read back faithfully, a repo renamed
after saves keeps its key, missing cwds are marked, and a copied database keeps its keys via a key map."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inbox_support import by_key, canary, query

from engram_sync_kit.canary.derive import AliasMap, CandidateSource, RowContext, stage_a
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession

pytestmark = pytest.mark.engram


def git_repo(path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if origin is not None:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


def mcp_save(world: EngramEnvironment, cwd: Path, title: str, **extra_env: str) -> None:
    session = McpSession(world, cwd, dict(extra_env), world.root / "mcp.log")
    try:
        session.call_tool("mem_save", {"title": title, "content": f"content of {title}", "type": "manual"})
    finally:
        session.close()


def listing(world: EngramEnvironment, *options: str, **env: str) -> dict[str, dict[str, Any]]:
    result = canary(world, "inbox", *options, "list", "--format", "json", **env)
    assert result.returncode == 0, result.stderr
    return by_key(json.loads(result.stdout))


@pytest.fixture
def messy(engram_world: EngramEnvironment) -> EngramEnvironment:
    world = engram_world
    code = world.home / "código"
    old = git_repo(code / "Old_Name")
    mcp_save(world, old, "before the rename")
    assert canary(world, "check").returncode in (0, 1, 2)  # the canary's timer ran while the repo was there
    old.rename(code / "New_Name")  # renamed after saves: the old cwd no longer exists
    mcp_save(world, code / "New_Name", "after the rename")
    checkout = git_repo(code / "my checkout", origin="git@example.invalid:me/Real_Repo.git")
    mcp_save(world, checkout, "from a checkout named after its remote")
    parent = code / "wrapper"
    git_repo(parent / "Kid_Repo")
    mcp_save(world, parent, "from the parent of one repo")
    scratch = world.home / "scratch dir"
    scratch.mkdir()
    mcp_save(world, scratch, "designated", ENGRAM_PROJECT="Designated_Name")
    mcp_save(world, scratch, "noise")
    return world


def test_engram_recorded_what_its_detection_saw(messy: EngramEnvironment) -> None:
    """The facts Stage A reads back: v1.20 records the project and the directory, never the source."""
    columns = {row[1] for row in query(messy.db_path, "PRAGMA table_info(sessions)")}
    assert columns == {"id", "project", "directory", "started_at", "ended_at", "summary"}
    recorded = {row[0] for row in query(messy.db_path, "SELECT project FROM sessions")}
    assert recorded == {"old_name", "new_name", "real_repo", "kid_repo", "designated_name", "scratch dir"}


def test_detected_repos_are_slugged_and_a_renamed_repo_keeps_its_key(messy: EngramEnvironment) -> None:
    entries = listing(messy)
    totals = {key: entry["count"] for key, entry in entries.items()}
    assert totals == {
        "old-name": 1,  # remembered while the repo was there (its cwd is gone now): reachable by a key alias
        "new-name": 1,
        "real-repo": 1,  # git_remote: detected, slugged, not a designation
        "kid-repo": 1,  # git_child: detected, slugged
        "designated_name": 1,  # an explicit designation is kept as designated
        "unsorted": 1,  # the basename fallback never makes a key
    }
    old_cwd = str(messy.home / "código" / "Old_Name")
    assert entries["old-name"]["missing_cwds"] == [old_cwd]
    assert entries["new-name"]["missing_cwds"] == []
    text = canary(messy, "inbox", "list").stdout
    assert f"cwd {old_cwd} no longer exists" in text


def test_a_key_alias_reaches_the_renamed_repos_old_rows(messy: EngramEnvironment) -> None:
    messy.run(["cloud", "enroll", "new-name"])
    aliases = messy.root / "aliases.yaml"
    aliases.write_text("keys:\n  old-name: new-name\n")
    config = messy.root / "canary.yaml"
    config.write_text(f"inbox:\n  aliases: {aliases}\n")
    result = canary(messy, "--config", str(config), "inbox", "claim", "--project", "old-name")
    assert result.returncode == 0, result.stderr
    assert "into enrolled project 'new-name'" in result.stdout


def test_a_copied_database_gets_its_own_machines_keys(messy: EngramEnvironment, tmp_path: Path) -> None:
    exported = canary(messy, "inbox", "export-keys")
    assert exported.returncode == 0, exported.stderr
    keys = tmp_path / "keys.json"
    keys.write_text(exported.stdout)
    document = json.loads(exported.stdout)
    assert document["schema"] == "engram-canary/key-map/v1"
    sources = {entry["project"]: entry["source"] for entry in document["entries"]}
    assert sources["real_repo"] == "git_remote" and sources["kid_repo"] == "git_child"
    before = {key: entry["count"] for key, entry in listing(messy).items()}

    # "Another machine": none of the recorded directories exist any more.
    shutil.move(messy.home / "código", tmp_path / "elsewhere")
    shutil.move(messy.home / "scratch dir", tmp_path / "elsewhere-scratch")
    other_machine = {"ENGRAM_CANARY_STATE_DIR": str(tmp_path / "other-state")}
    without = {key: entry["count"] for key, entry in listing(messy, **other_machine).items()}
    # Without its map the copy cannot tell a remote- or child-detected repo from a designation.
    assert without == {"designated_name": 1, "kid_repo": 1, "real_repo": 1, "unsorted": 3}
    with_map = listing(messy, ENGRAM_CANARY_KEY_MAP=str(keys), **other_machine)
    assert {key: entry["count"] for key, entry in with_map.items()} == before
    assert all(entry["missing_cwds"] for entry in with_map.values())
    # check's tripwires take the same map (config key_map, or ENGRAM_CANARY_KEY_MAP)
    config = tmp_path / "canary.yaml"
    config.write_text(f"key_map: {keys}\ninbox:\n  age_days: 0.000001\n")
    checked = canary(messy, "--config", str(config), "check", "--format", "json", **other_machine)
    aged = sorted(f["key"] for f in json.loads(checked.stdout)["findings"] if f["check"] == "inbox_age")
    assert aged == sorted(key for key in before if key != "unsorted")


def test_a_bad_key_map_is_one_line(messy: EngramEnvironment, tmp_path: Path) -> None:
    bad = tmp_path / "keys.json"
    bad.write_text('{"schema": "something else"}')
    result = canary(messy, "inbox", "list", ENGRAM_CANARY_KEY_MAP=str(bad))
    assert result.returncode == 3
    assert result.stderr == (
        f"engram-canary: error: --key-map {bad}: not an export of `engram-canary inbox export-keys` "
        "(engram-canary/key-map/v1)\n"
    )


def test_stage_a_slugs_detected_names_but_keeps_designations() -> None:
    detected = RowContext(detected="Real_Repo", detected_source=CandidateSource.GIT_REMOTE)
    assert stage_a(detected) == ("real-repo", CandidateSource.GIT_REMOTE)
    designated = RowContext(designation="Designated_Name", detected="ignored")
    assert stage_a(designated) == ("designated_name", CandidateSource.DESIGNATION)
    assert AliasMap().recorded_key("/x", "p") is None


def test_a_cwd_gone_before_the_canary_saw_it_is_unsorted_and_marked(
    engram_world: EngramEnvironment,
) -> None:
    repo = git_repo(engram_world.home / "Gone_Repo")
    mcp_save(engram_world, repo, "never seen by the canary")
    shutil.rmtree(repo)
    entries = listing(engram_world)
    assert {key: entry["count"] for key, entry in entries.items()} == {"unsorted": 1}
    assert entries["unsorted"]["missing_cwds"] == [str(repo)]
    assert f"cwd {repo}: 2 (no longer exists)" in canary(engram_world, "inbox", "list").stdout
