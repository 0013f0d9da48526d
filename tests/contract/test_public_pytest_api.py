"""The pytest plugin lives in a consumer's environment, next to whatever pytest it has: it uses pytest's
public API only, never `_pytest` modules or a Config's private attributes."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "engram_sync_kit"


def private_pytest_uses(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "_pytest"
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "_pytest":
            found.append(f"{node.lineno}: from {node.module}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in {"config", "early_config", "session", "item", "pytester"}
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_the_kit_uses_only_public_pytest_api() -> None:
    found = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if (uses := private_pytest_uses(path))
    }
    assert found == {}


def test_the_scan_sees_a_private_use(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from _pytest.config import findpaths\n\ndef f(early_config):\n    early_config._inicache.clear()\n"
    )
    assert private_pytest_uses(probe) == ["1: from _pytest.config", "4: early_config._inicache"]
