"""A function-local import is kept only where start-up cost (or an optional part) requires it, and says
why in a comment: on its line, or above it (over the imports and blank lines of the same group). Every
other import sits at the top of its module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2] / "engram_sync_kit"
PACKAGES = ("engram_contract", "canary", "fake_cloud", "harness")


def has_a_reason(lines: list[str], number: int) -> bool:
    if "#" in lines[number - 1]:
        return True
    above = number - 2
    while above >= 0 and (not lines[above].strip() or lines[above].strip().startswith(("from ", "import "))):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def local_imports_without_a_reason(path: Path) -> list[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        node.lineno
        for function in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom) and not has_a_reason(lines, node.lineno)
    ]


def test_every_function_local_import_says_why() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in local_imports_without_a_reason(path)
    ]
    assert found == []


def test_the_scan_finds_an_import_without_a_reason(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "def f() -> None:\n"
        '    """Doc."""\n'
        "    import json\n"
        "\n"
        "    # PyYAML only here\n"
        "    import yaml\n"
        "\n"
        "    import csv  # why\n",
        encoding="utf-8",
    )
    assert local_imports_without_a_reason(module) == [3]
