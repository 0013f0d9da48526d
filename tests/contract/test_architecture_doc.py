"""docs/architecture.md is the map of the code: it names every module and every room (subpackage), names no
module that does not exist, and the harness keeps few enough top-level modules for the map to stay readable."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "engram_sync_kit"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PARTS = ("engram_contract", "canary", "fake_cloud", "harness")
MOST_HARNESS_MODULES = 15


def modules() -> list[str]:
    return [
        path.relative_to(PACKAGE).as_posix()
        for part in PARTS
        for path in sorted((PACKAGE / part).rglob("*.py"))
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    ]


def rooms() -> list[str]:
    return [
        path.parent.relative_to(PACKAGE).as_posix() + "/"
        for part in PARTS
        for path in sorted((PACKAGE / part).rglob("__init__.py"))
        if path.parent != PACKAGE / part
    ]


def test_the_map_names_every_module_and_every_room() -> None:
    assert len(modules()) > 100  # else the walk finds nothing
    assert [name for name in modules() if f"`{name}`" not in DOC] == []
    assert [room for room in rooms() if f"`{room}`" not in DOC] == []


def test_the_map_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"`((?:engram_contract|canary|fake_cloud|harness)/[\w/]+\.py)`", DOC))
    assert sorted(name for name in named if not (PACKAGE / name).is_file()) == []


def test_the_harness_keeps_its_top_level_small() -> None:
    top = [path.name for path in (PACKAGE / "harness").glob("*.py") if path.name != "__init__.py"]
    assert len(top) <= MOST_HARNESS_MODULES, sorted(top)
