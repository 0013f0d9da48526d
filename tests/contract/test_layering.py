"""The kit's import arrows (docs/architecture.md): engram_contract imports nothing of the kit; canary and
fake_cloud know neither each other nor the harness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "engram_sync_kit"
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


# Inside the canary: the read paths (check and its lanes, inbox listing, reconcile, watch, report) cannot
# reach the modules that write engram's database, by any import, direct or through another canary module.
CANARY_READERS = (
    "checks",
    "lane_health",
    "lanes",
    "inbox.selection",
    "inbox.cursor",
    "inbox.render",
    "inbox.key_map",
    "inbox.aliases",
    "stage_a",
    "undecodable",
    "reconcile",
    "reconcile_result",
    "watch",
    "report",
)
WRITERS_ROOM = "triage"


def is_writer(module: str) -> bool:
    return module == WRITERS_ROOM or module.startswith(WRITERS_ROOM + ".")


def canary_module_path(module: str) -> Path | None:
    """The file of a canary module named relative to the package (`checks`, `inbox.cursor`), if any."""
    base = ROOT / "canary" / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def canary_imports(path: Path) -> set[str]:
    """The canary modules `path` imports anywhere in it (module level, in functions, under TYPE_CHECKING)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if node.level == 0 else f"canary.{node.module}"
            modules = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for module in modules:
            parts = module.removeprefix("engram_sync_kit.").split(".")
            if parts[0] == "canary" and len(parts) > 1 and canary_module_path(".".join(parts[1:])):
                names.add(".".join(parts[1:]))
    return names


@pytest.mark.parametrize("reader", CANARY_READERS)
def test_canary_read_paths_reach_no_writer(reader: str) -> None:
    assert canary_module_path(reader) is not None
    reached: dict[str, list[str]] = {reader: [reader]}
    todo = [reader]
    while todo:
        module = todo.pop()
        path = canary_module_path(module)
        for imported in sorted(canary_imports(path)) if path else ():
            if imported not in reached:
                reached[imported] = [*reached[module], imported]
                todo.append(imported)
    assert {name: " -> ".join(chain) for name, chain in reached.items() if is_writer(name)} == {}


# Inside the harness: the rooms that drive engram and the cloud are below the scenario language and its users.
LOW_ROOMS = ("engram", "cloud")
HIGH_ROOMS = frozenset({"scenario", "validate", "explore", "design", "deployment"})


@pytest.mark.parametrize("room", LOW_ROOMS)
def test_the_engram_and_cloud_rooms_import_no_higher_harness_room(room: str) -> None:
    files = sorted((ROOT / "harness" / room).rglob("*.py"))
    assert files, room
    wrong: dict[str, list[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                parts = node.module.removeprefix("engram_sync_kit.").split(".")
                if parts[0] == "harness" and len(parts) > 1 and parts[1] in HIGH_ROOMS:
                    wrong.setdefault(str(path.relative_to(ROOT)), []).append(node.module)
    assert wrong == {}
