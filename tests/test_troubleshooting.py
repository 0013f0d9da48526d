"""docs/troubleshooting.md explains every one-line error and refusal the canary and the fake cloud raise:
the fixed words of each message (read from the source, so a new message fails this until documented)."""

from __future__ import annotations

import ast
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
TROUBLESHOOTING = (REPOSITORY / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
SOURCES = [
    *sorted((REPOSITORY / "engram_sync_kit" / "canary").rglob("*.py")),
    REPOSITORY / "engram_sync_kit" / "fake_cloud" / "cli.py",
    REPOSITORY / "engram_sync_kit" / "fake_cloud" / "server.py",
    REPOSITORY / "engram_sync_kit" / "harness" / "entry.py",
]
RAISED = ("Error", "Unavailable", "Schema", "BadParameter", "UsageError", "ClickException")
SHORTEST_FRAGMENT = 10


def _literal_parts(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [
            part.value
            for part in node.values
            if isinstance(part, ast.Constant) and isinstance(part.value, str)
        ]
    if isinstance(node, ast.BinOp):
        return _literal_parts(node.left) + _literal_parts(node.right)
    return []


def message_fragments() -> dict[str, str]:
    """The longest fixed part of every message a one-line error is raised with, by where it is raised."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            function = node.exc.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            if not name.endswith(RAISED) or name == "ValueError":
                continue
            parts = _literal_parts(node.exc.args[0])
            fragment = max(parts, key=len, default="").strip()
            if len(fragment) >= SHORTEST_FRAGMENT:
                found[f"{path.relative_to(REPOSITORY)}:{node.lineno}"] = fragment
    return found


def test_the_scan_finds_the_messages() -> None:
    fragments = message_fragments()
    assert len(fragments) > 100
    assert ": no such file (pass --db or set ENGRAM_DATA_DIR)" in fragments.values()


def test_every_message_is_in_the_troubleshooting_page() -> None:
    undocumented = {
        where: fragment for where, fragment in message_fragments().items() if fragment not in TROUBLESHOOTING
    }
    assert undocumented == {}


def test_the_page_says_how_to_restore_a_backup_while_watch_runs() -> None:
    section = TROUBLESHOOTING.split("### Restoring an engram backup while watch runs", 1)[1]
    assert "engram.db-wal" in section and "mv " in section and "was replaced; reading the new file" in section
