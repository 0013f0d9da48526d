"""Runtime dependencies take compatible ranges, so a consumer's environment keeps its own pytest; the exact
versions CI installs live in constraints.txt, and each of them lies inside its range."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
RUNTIME = [
    Requirement(text) for text in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["harness"]]
]


def pinned() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = Version(version.strip())
    return pins


def test_runtime_dependencies_are_ranges_not_pins() -> None:
    assert RUNTIME, "no runtime dependency read"
    exact = [str(r) for r in RUNTIME if any(spec.operator in ("==", "===") for spec in r.specifier)]
    unbounded_below = [str(r) for r in RUNTIME if not any(spec.operator == ">=" for spec in r.specifier)]
    assert (exact, unbounded_below) == ([], [])


def test_the_constraints_pin_every_runtime_dependency_inside_its_range() -> None:
    pins = pinned()
    outside = {
        r.name: str(version)
        for r in RUNTIME
        if (version := pins.get(r.name.lower().replace("_", "-"))) is None or version not in r.specifier
    }
    assert outside == {}


def test_ci_installs_with_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "pip install -q -c constraints.txt -e '.[dev]'" in makefile
