"""The kit's import arrows (docs/architecture.md): engram_contract imports nothing of the kit; canary and
fake_cloud know neither each other nor the harness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
KIT = {"canary", "fake_cloud", "harness", "engram_contract"}
MAY_IMPORT = {
    "engram_contract": {"engram_contract"},
    "canary": {"canary", "engram_contract"},
    "fake_cloud": {"fake_cloud", "engram_contract"},
    "harness": KIT,
}


def imported_packages(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.removeprefix("engram_sync_kit.").split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.removeprefix("engram_sync_kit.").split(".")[0])
    return names & KIT


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_point_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {ROOT / package}"  # else the check below passes on nothing
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) - MAY_IMPORT[package]) for path in files
    }
    assert {path: names for path, names in wrong.items() if names} == {}
