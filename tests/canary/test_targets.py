"""Target naming lives in canary/targets.py: a per-project lane is named and read back there, and no other
canary module joins the legacy lane's name and ':' by itself."""

from __future__ import annotations

import ast
from itertools import pairwise
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from engram_sync_kit.canary.targets import named_project, normalize_project, project_target
from engram_sync_kit.engram_contract import LEGACY_TARGET

CANARY = Path(__file__).resolve().parents[2] / "engram_sync_kit" / "canary"


@given(st.text(max_size=40))
def test_a_projects_lane_names_its_normalized_project(project: str) -> None:
    lane = project_target(project)
    if normalize_project(project):
        assert named_project(lane) == normalize_project(project)
    else:
        assert (lane, named_project(lane)) == (LEGACY_TARGET, None)


def test_other_keys_name_no_project() -> None:
    assert [named_project(key) for key in ("cloud", "cloud:inbox", "local", "cloud@r1", "cloudy:x")] == [
        None,
        "inbox",
        None,
        None,
        None,
    ]


def _builds_a_lane_by_hand(node: ast.AST) -> bool:
    """`LEGACY_TARGET + ":" ...`, f"{LEGACY_TARGET}:..." or a literal key such as "cloud:alpha"."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        return (
            isinstance(left, ast.Name)
            and left.id == "LEGACY_TARGET"
            and isinstance(right, ast.Constant)
            and str(right.value).startswith(":")
        )
    if isinstance(node, ast.JoinedStr):
        parts = node.values
        return any(
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and part.value.id == "LEGACY_TARGET"
            and isinstance(after, ast.Constant)
            and str(after.value).startswith(":")
            for part, after in pairwise(parts)
        )
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        value = node.value
        return value.startswith("cloud:") and "<" not in value and " " not in value
    return False


def test_no_canary_module_but_targets_names_a_lane_by_hand() -> None:
    found = {
        f"{path.name}:{getattr(node, 'lineno', '?')}"
        for path in sorted(CANARY.glob("*.py"))
        if path.name != "targets.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _builds_a_lane_by_hand(node)
    }
    assert found == set()


def test_the_check_finds_a_lane_built_by_hand() -> None:
    for source in ('LEGACY_TARGET + ":" + p', 'f"{LEGACY_TARGET}:{p}"', '"cloud:alpha"'):
        assert any(_builds_a_lane_by_hand(node) for node in ast.walk(ast.parse(source))), source
