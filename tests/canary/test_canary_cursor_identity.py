"""The inbox cursor knows which file it read (issue 35, item 14): a restore of a journal of the same shape
(same last seq, same unacked count, same enrolled set) is read again, by cp (same inode) or by mv; and
`check --full` leaves its answer for the next check. Failed first: check listed the old file's inbox."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from inbox_support import canary, engram_ok

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.inbox.cursor import CursorMode, tripwire_inputs
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


def _fill(world: EngramEnvironment, project: str) -> None:
    for title in ("one", "two"):
        engram_ok(world, "save", title, "c", "--project", project)


def _inbox_keys(world: EngramEnvironment, state: Path, *extra: str) -> list[str]:
    checked = canary(world, "check", "--format", "json", *extra, ENGRAM_CANARY_STATE_DIR=str(state))
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    return sorted(json.loads(checked.stdout)["summary"]["inbox_keys"])


@pytest.mark.parametrize("restore", ["cp", "mv"])
def test_a_restored_journal_of_the_same_shape_is_read_again(
    engram_world: EngramEnvironment, engram_bin: Path, tmp_path: Path, restore: str
) -> None:
    other = EngramEnvironment(binary=engram_bin, root=tmp_path / "other-machine").prepare()
    _fill(engram_world, "side")
    _fill(other, "other")
    state = tmp_path / "state"
    assert _inbox_keys(engram_world, state) == ["side"]
    assert _inbox_keys(engram_world, state) == ["side"]  # from the cursor
    if restore == "cp":  # over the file in place: the same inode
        shutil.copyfile(other.db_path, engram_world.db_path)
    else:
        shutil.copyfile(other.db_path, tmp_path / "restored.db")
        os.replace(tmp_path / "restored.db", engram_world.db_path)
    assert _inbox_keys(engram_world, state) == ["other"]
    assert _inbox_keys(engram_world, state, "--full") == ["other"]


def test_check_full_leaves_its_answer_for_the_next_check(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    _fill(engram_world, "side")
    with EngramDb.open(engram_world.db_path) as engram:
        modes = [
            tripwire_inputs(engram, AliasMap(), use_cursor=use_cursor)[3]
            for use_cursor in (False, True, False)
        ]
    assert modes == [CursorMode.FULL, CursorMode.CACHED, CursorMode.FULL]
