"""No import circle between any two modules of the kit, bench included. Every import counts: module-level,
function-local and TYPE_CHECKING alike, since each one is an arrow a reader must follow both ways."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGES = ("canary", "harness", "fake_cloud", "engram_contract", "bench")


NAMESPACE = "engram_sync_kit"


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Each module by the name code imports it as."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        base = root if package == "bench" else root / NAMESPACE
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` imports the module pkg.mod; `from mod import name`, the module mod.
                targets.update(f"{base}.{alias.name}" for alias in node.names)
                targets.add(base)
        owners = {_owning_module(target, modules) for target in targets}
        graph[module] = {owner for owner in owners if owner and owner != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_the_kit_has_no_import_cycle() -> None:
    modules = module_files()
    assert (
        "bench.canary" in modules and "engram_sync_kit.harness.scenario.step_results" in modules
    )  # else it checks nothing
    assert find_cycle(import_graph(modules)) is None


def test_a_function_local_or_type_only_import_closes_a_cycle(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "a.py").write_text("from bench.b import thing\n")
    (tmp_path / "bench" / "b.py").write_text("def thing():\n    from bench import a\n")
    (tmp_path / "bench" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n"
    )
    (tmp_path / "bench" / "d.py").write_text("from .c import C\n")
    graph = import_graph(module_files(tmp_path))
    assert graph["bench.a"] == {"bench.b"} and graph["bench.b"] == {"bench", "bench.a"}
    assert graph["bench.c"] == {"bench.d"} and graph["bench.d"] == {"bench.c"}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) in ({"bench.a", "bench.b"}, {"bench.c", "bench.d"})
