"""`engram-canary inbox show KEY [--cwd PATH]`: the waiting memories, read before a claim or a drop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from inbox_support import canary, engram_ok, engram_serve

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


@pytest.fixture
def world(engram_world: EngramEnvironment) -> EngramEnvironment:
    """'side': two CLI saves (one multi-line, unicode); unsorted: an HTTP session in a dir with spaces."""
    workdir = engram_world.home / "mis cosas"
    workdir.mkdir()
    engram_ok(
        engram_world, "save", "Título uno", "primera línea\nsecond line", "--project", "side", cwd=workdir
    )
    engram_ok(engram_world, "save", "pick sqlite", "we chose WAL", "--type", "decision", "--project", "side")
    with engram_serve(engram_world) as server:
        server.post("/sessions", {"id": "s-tmp", "project": "mis cosas", "directory": str(workdir)})
        server.post(
            "/observations",
            {"session_id": "s-tmp", "type": "bugfix", "title": "loose", "content": "\n\n  x y  \n"},
        )
        assert not server.failures, server.failures
    return engram_world


def test_show_lists_type_title_date_and_first_line(world: EngramEnvironment) -> None:
    result = canary(world, "inbox", "show", "side")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "inbox key 'side': 2 memories waiting (and 2 telemetry rows, not listed)"
    assert lines[1].split()[3:] == ["manual", "Título", "uno"]
    assert lines[2].strip() == "primera línea"
    assert lines[3].split()[3:] == ["decision", "pick", "sqlite"]
    assert lines[4].strip() == "we chose WAL"


def test_show_unsorted_by_cwd_in_json(world: EngramEnvironment) -> None:
    workdir = world.home / "mis cosas"
    result = canary(world, "inbox", "show", "unsorted", "--cwd", str(workdir), "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "engram-canary/inbox-show/v1"
    assert (document["cwd"], document["telemetry"]) == (str(workdir), 1)
    assert [(m["type"], m["title"], m["first_line"], m["cwd"]) for m in document["memories"]] == [
        ("bugfix", "loose", "x y", str(workdir))
    ]


def test_show_of_an_unknown_key_is_one_line(world: EngramEnvironment, tmp_path: Path) -> None:
    result = canary(world, "inbox", "show", "nope")
    assert result.returncode == 3
    assert result.stdout == ""
    assert result.stderr == (
        "engram-canary: error: no unacked inbox rows match inbox key 'nope' (see: engram-canary inbox list)\n"
    )
