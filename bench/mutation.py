"""`make mutation`: mutmut's score over the modules that hold engram's rules, in bench/results/mutation.json.

mutmut runs in a venv of its own (.cache/mutation-venv, made by scripts/mutation.sh): it needs newer click
and rich than the kit pins. This module only turns mutmut's CI/CD stats into the recorded result; the stats of runs split by module
(one mutmut run per group of modules, each in a copy of the tree) add up to one run's."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "results" / "mutation.json"


def score(stats: dict[str, Any]) -> dict[str, Any]:
    """Killed among the mutants some test ran (a mutant no selected test reaches is counted apart)."""
    killed = int(stats["killed"]) + int(stats.get("timeout", 0))
    survived = int(stats["survived"]) + int(stats.get("suspicious", 0))
    tested = killed + survived
    return {
        "killed": killed,
        "survived": survived,
        "no_tests": int(stats["no_tests"]),
        "total": int(stats["total"]),
        "score_of_tested": round(killed / tested, 4) if tested else None,
    }


def combined(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """mutmut's stats of runs over disjoint modules, added up: each mutant's verdict is its own."""
    names = ("killed", "survived", "no_tests", "total", "timeout", "suspicious")
    return {name: sum(int(part.get(name, 0)) for part in stats) for name in names}


def record(stats_paths: list[Path], tool_version: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    parts = [json.loads(path.read_text(encoding="utf-8")) for path in stats_paths]
    return {
        "tool": f"mutmut {tool_version}",
        "commit": commit,
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "modules": config["source_paths"],
        "tests": config["pytest_add_cli_args_test_selection"],
        **score(combined(parts)),
    }


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m bench.mutation STATS_JSON [STATS_JSON ...] MUTMUT_VERSION")
    result = record([Path(name) for name in sys.argv[1:-1]], sys.argv[-1])
    RESULT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
