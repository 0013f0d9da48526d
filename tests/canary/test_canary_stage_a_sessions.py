"""The tripwire for Stage A's assumption (design §4, issue 14): sessions that span directories, found on
a messy home made by hand with the real engram v1.20 (MCP and CLI saves, a repo with a space and a
non-ASCII name, a non-repo scratch dir, the home dir, a renamed repo)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from inbox_support import canary, query

from engram_sync_kit.canary.stage_a import SESSION_SPANS_DIRECTORIES, normalize_directory
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession

pytestmark = pytest.mark.engram


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def in_session(world: EngramEnvironment, cwd: Path, session: str, title: str) -> None:
    """What an agent does: start (or resume) its session from the cwd, then save into it."""
    mcp = McpSession(world, cwd, {}, world.root / "mcp.log")
    try:
        mcp.call_tool("mem_session_start", {"id": session, "directory": str(cwd)})
        mcp.call_tool(
            "mem_save",
            {"title": title, "content": f"content of {title}", "type": "manual", "session_id": session},
        )
    finally:
        mcp.close()


def findings(world: EngramEnvironment) -> tuple[int, dict[str, Any]]:
    result = canary(world, "check", "--format", "json", "--no-baseline")
    return result.returncode, json.loads(result.stdout)


@pytest.fixture
def messy(engram_world: EngramEnvironment) -> EngramEnvironment:
    world = engram_world
    repo = git_repo(world.home / "código" / "Repo Ä")
    scratch = world.home / "scratch dir"
    scratch.mkdir()
    in_session(world, repo, "crossing", "decided in the repo")
    in_session(world, scratch, "crossing", "then saved from scratch")  # filed under the repo's project
    in_session(world, repo, "stays-put", "one")
    in_session(world, repo / ".", "stays-put", "the same directory spelled with /.")
    old = git_repo(world.home / "código" / "Old")
    in_session(world, old, "renamed", "before the rename")
    old.rename(old.parent / "New")
    in_session(world, old.parent / "New", "renamed", "after the rename")
    for cwd in (scratch, world.home, repo):  # engram save's bucket session, from three cwds
        assert world.run(["save", f"cli from {cwd.name}", "c"], cwd=cwd).returncode == 0
    return world


def test_the_design_query_on_the_sessions_table_cannot_see_a_crossing_session(
    messy: EngramEnvironment,
) -> None:
    """v1.20 keeps one directory per session id: the design's measurement query is 0 by construction."""
    assert query(
        messy.db_path,
        "SELECT count(*) FROM (SELECT id FROM sessions GROUP BY id HAVING count(DISTINCT directory) > 1)",
    ) == [(0,)]
    (directory,) = query(messy.db_path, "SELECT directory FROM sessions WHERE id = 'crossing'")[0]
    assert directory.endswith("código/Repo Ä")


def test_sessions_that_span_directories_are_warned_with_evidence(messy: EngramEnvironment) -> None:
    code, report = findings(messy)
    spanning = {f["key"]: f for f in report["findings"] if f["check"] == SESSION_SPANS_DIRECTORIES}
    assert sorted(spanning) == ["crossing", "renamed"]  # stays-put: /. is the same directory
    crossing = spanning["crossing"]
    assert crossing["severity"] == "warning" and crossing["size"] == 2
    repo, scratch = str(messy.home / "código" / "Repo Ä"), str(messy.home / "scratch dir")
    evidence = crossing["evidence"]
    assert [d["directory"] for d in evidence["directories"]] == [repo, scratch]
    assert evidence["directories"][0]["in_sessions_table"] is True
    assert evidence["directories"][1]["in_sessions_table"] is False
    assert "repo ä" in evidence["directories"][1]["projects"]  # saved from scratch, filed under the repo
    assert evidence["observations"] == 2
    assert crossing["message"].startswith(f"session crossing ran in 2 directories ({repo}, {scratch})")
    assert report["summary"]["stage_a"] == {
        "sessions_spanning_directories": 2,
        "bucket_sessions_spanning_directories": ["manual-save"],
        "read": "full",
    }
    assert report["status"] in ("warning", "critical") and code != 0
    text = canary(messy, "check", "--no-baseline").stdout
    assert "session crossing ran in 2 directories" in text


def test_a_home_without_crossing_sessions_has_no_stage_a_finding(engram_world: EngramEnvironment) -> None:
    repo = git_repo(engram_world.home / "app")
    in_session(engram_world, repo, "s1", "one")
    in_session(engram_world, repo, "s1", "two")
    _, report = findings(engram_world)
    assert [f for f in report["findings"] if f["check"] == SESSION_SPANS_DIRECTORIES] == []
    assert report["summary"]["stage_a"]["sessions_spanning_directories"] == 0


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("/a/b/", "/a/b"),
        ("/", "/"),
        ("//", "/"),
        ("  ", ""),
        (None, ""),
        (7, ""),
        ("rel/dir", "rel/dir"),
        ("/a/./b/", "/a/b"),
    ],
)
def test_directories_are_compared_without_trailing_slashes(raw: object, normalized: str) -> None:
    assert normalize_directory(raw) == normalized


def test_later_checks_read_only_new_session_rows_and_find_a_new_crossing(messy: EngramEnvironment) -> None:
    """The cursor in the canary's state dir: a full pass once, then only sessions of new journal rows."""
    _, first = findings(messy)
    _, again = findings(messy)
    assert (first["summary"]["stage_a"]["read"], again["summary"]["stage_a"]["read"]) == ("full", "cached")
    assert [f["key"] for f in again["findings"] if f["check"] == SESSION_SPANS_DIRECTORIES] == [
        "crossing",
        "renamed",
    ]
    in_session(messy, messy.home, "stays-put", "from home now")
    _, later = findings(messy)
    assert later["summary"]["stage_a"]["read"] == "incremental"
    spanning = {f["key"]: f for f in later["findings"] if f["check"] == SESSION_SPANS_DIRECTORIES}
    assert sorted(spanning) == ["crossing", "renamed", "stays-put"]
    assert spanning["stays-put"]["evidence"]["directories"][-1]["directory"] == str(messy.home)
    full = canary(
        messy, "check", "--format", "json", "--no-baseline", ENGRAM_CANARY_STATE_DIR=str(messy.root / "fresh")
    )
    recomputed = json.loads(full.stdout)
    assert recomputed["summary"]["stage_a"]["read"] == "full"
    assert [f for f in recomputed["findings"] if f["check"] == SESSION_SPANS_DIRECTORIES] == list(
        spanning.values()
    )
