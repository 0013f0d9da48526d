"""Side files (canary config, alias map) may name workspaces; they are written with absolute paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.errors import StepFailed
from engram_sync_kit.harness.scenario.steps import with_workspace_paths


def test_workspace_references_become_absolute_paths_in_keys_and_values() -> None:
    workspaces = {"work": Path("/tmp/w/agent-work"), "app": Path("/tmp/w/my-app")}
    aliases = {
        "cwds": {"{workspace:work}": "agent-hub"},
        "keys": {"old": "new"},
        "paths": ["{workspace:app}/sub", 3],
    }

    assert with_workspace_paths(aliases, workspaces) == {
        "cwds": {"/tmp/w/agent-work": "agent-hub"},
        "keys": {"old": "new"},
        "paths": ["/tmp/w/my-app/sub", 3],
    }


def test_text_without_references_is_left_alone() -> None:
    assert with_workspace_paths({"keys": {"{i}": "x"}}, {}) == {"keys": {"{i}": "x"}}


def test_an_unknown_workspace_is_a_one_line_error_naming_the_known_ones() -> None:
    with pytest.raises(StepFailed) as failure:
        with_workspace_paths({"cwds": {"{workspace:nope}": "p"}}, {"work": Path("/w")})

    assert str(failure.value) == "{workspace:nope} names no workspace; workspaces: work"
