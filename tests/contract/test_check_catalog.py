"""The canary's check catalog is the registry of its checks: every Finding the canary builds names a check
of it, every check in it is raised somewhere and documented, and a scenario cannot name a check outside it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_sync_kit.canary.check_catalog import CHECKS
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import parse_scenario

ROOT = Path(__file__).parents[2]
CANARY = ROOT / "engram_sync_kit" / "canary"


def _constants(trees: list[ast.Module]) -> dict[str, str]:
    return {
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _names(node: ast.expr, constants: dict[str, str]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name):
        return {constants.get(node.id, f"<unresolved {node.id}>")}
    if isinstance(node, ast.IfExp):
        return _names(node.body, constants) | _names(node.orelse, constants)
    return {f"<unresolved {ast.unparse(node)}>"}


def _source_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk, without mutmut's mutant copies of a function (`x_f__mutmut_3`): `make mutation` runs
    this test on a rewritten copy where those hold `check=None` and the like beside the original."""
    yield node
    for child in ast.iter_child_nodes(node):
        name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else ""
        if "__mutmut_" in name and not name.endswith("__mutmut_orig"):
            continue
        yield from _source_nodes(child)


def raised_checks(package: Path = CANARY) -> set[str]:
    """The check names of every `Finding(check=...)` in the canary's source."""
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in sorted(package.rglob("*.py"))]
    constants = _constants(trees)
    return {
        name
        for tree in trees
        for node in _source_nodes(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding"
        for keyword in node.keywords
        if keyword.arg == "check"
        for name in _names(keyword.value, constants)
    }


def test_every_finding_names_a_catalogued_check_and_every_check_is_raised() -> None:
    raised = raised_checks()
    assert len(raised) >= 10  # else the scan finds nothing
    assert sorted(raised - set(CHECKS)) == []
    assert sorted(set(CHECKS) - raised) == []


def test_the_scan_reads_the_original_of_a_function_mutmut_rewrote(tmp_path: Path) -> None:
    (tmp_path / "checks.py").write_text(
        "NAME = 'from_a_constant'\n"
        "def x_f__mutmut_orig():\n    return Finding(check='kept')\n"
        "def x_f__mutmut_1():\n    return Finding(check=None)\n"
        "def g():\n    return Finding(check=NAME)\n",
        encoding="utf-8",
    )
    assert raised_checks(tmp_path) == {"kept", "from_a_constant"}


@pytest.mark.parametrize("doc", ["docs/canary.md", "README.md"])
def test_every_check_is_documented(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert [name for name in CHECKS if f"`{name}`" not in text] == []


def test_a_scenario_cannot_expect_a_check_the_canary_does_not_have() -> None:
    text = (
        "name: x\nsteps:\n  - canary: {}\nexpect:\n"
        "  - tag: design\n    canary: {findings_exclude: [{check: legacy_lane_blokced}]}\n"
    )
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text, Path("s.scenario.yaml"))
    assert str(refused.value).splitlines() == [
        "s.scenario.yaml:6: expect.0.canary.findings_exclude.0.check: not a check of the canary (did you mean "
        "'legacy_lane_blocked'?); docs/canary.md lists them (got 'legacy_lane_blokced')"
    ]
