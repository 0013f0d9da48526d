"""Every read-only SQLite URI of the kit is built by engram_contract.read_only.read_only_uri, the one place
that quotes the path (tests/harness/test_engram_read.py shows what an unquoted path opens instead)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = (
    "engram_sync_kit/engram_contract",
    "engram_sync_kit/canary",
    "engram_sync_kit/fake_cloud",
    "engram_sync_kit/harness",
    "bench",
)
THE_ONE_PLACE = "engram_sync_kit/engram_contract/read_only.py"


def builds_a_read_only_uri(path: Path) -> bool:
    """A string or f-string in code (not a docstring or comment) that ends a URI with ?mode=ro."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "?mode=ro" in node.value
        and id(node) not in docstrings
        for node in ast.walk(tree)
    )


def test_only_engram_contract_builds_read_only_uris() -> None:
    found = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if builds_a_read_only_uri(path)
    }
    assert THE_ONE_PLACE in found  # else the scan itself finds nothing
    assert found == {THE_ONE_PLACE}
