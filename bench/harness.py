"""Benchmark the scenario harness: wall time of the shipped suite, and per-scenario overhead outside engram.

Run ``python -m bench.harness [--jobs N] [--repeat-noop N]``; it writes bench/results/harness.json and
prints a table. Goal (issue 6): the shipped suite under 5 minutes on a 2-core machine, against v1.20.0.

engram v1.20's worker only syncs on a 30 s tick (no startup cycle, no write wake-up), so an autosync
scenario cannot finish faster than its first tick. The harness starts `engram serve` when the scenario
starts (setup overlaps the first period) and runs scenarios side by side, so the ticks overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.engram_install import DEFAULT_VERSION, find_engram
from harness.loader import load_all, parse_scenario
from harness.runner import judge, run_many, run_scenario

RESULTS = Path(__file__).parent / "results" / "harness.json"
SUITE = Path(__file__).resolve().parent.parent / "scenarios"
GOAL_SECONDS = 300.0
NOOP = """\
name: noop
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
steps:
  - enroll: my-app
"""
OUTSIDE_ENGRAM = ("cloud_start", "workspaces", "evaluate", "teardown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--repeat-noop", type=int, default=10)
    parser.add_argument("--no-pytest", action="store_true", help="Skip timing `pytest scenarios -n 2`.")
    args = parser.parse_args()
    binary = find_engram(DEFAULT_VERSION)
    if binary is None:
        raise SystemExit(f"engram {DEFAULT_VERSION} is not installed: engram-harness engram install")

    scenarios = load_all([SUITE])
    started = time.monotonic()
    results = run_many(scenarios, binary, cloud_mode="process", jobs=args.jobs, expect="baseline")
    suite_seconds = time.monotonic() - started

    pytest_seconds: float | None = None
    pytest_passed: bool | None = None
    if not args.no_pytest:
        started = time.monotonic()
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(SUITE),
                "-n",
                "2",
                "--dist",
                "loadgroup",
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        pytest_seconds = time.monotonic() - started
        pytest_passed = completed.returncode == 0

    noop = parse_scenario(NOOP, Path("noop.scenario.yaml"))
    noop_runs = [run_scenario(noop, binary, expect="baseline") for _ in range(args.repeat_noop)]

    per_scenario: list[dict[str, Any]] = [
        {
            "scenario": r.scenario.id,
            "status": judge(r, "baseline"),
            "total_s": round(r.timings.get("total", 0), 3),
            "steps_s": round(r.timings.get("steps", 0), 3),
            "overhead_outside_engram_s": round(sum(r.timings.get(k, 0) for k in OUTSIDE_ENGRAM), 3),
            **{f"{k}_s": round(r.timings.get(k, 0), 3) for k in (*OUTSIDE_ENGRAM, "daemon_start")},
        }
        for r in results
    ]
    noop_totals = [r.timings["total"] for r in noop_runs]
    noop_overheads = [sum(r.timings.get(k, 0) for k in OUTSIDE_ENGRAM) for r in noop_runs]
    report: dict[str, Any] = {
        "benchmark": "harness",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "engram": str(binary),
        "jobs": args.jobs,
        "suite": {
            "scenarios": len(results),
            "wall_seconds": round(suite_seconds, 2),
            "goal_seconds": GOAL_SECONDS,
            "meets_goal": suite_seconds < GOAL_SECONDS,
            "all_baseline_passed": all(item["status"] == "passed" for item in per_scenario),
            "sum_of_scenario_seconds": round(sum(item["total_s"] for item in per_scenario), 2),
        },
        "pytest_n2": None
        if pytest_seconds is None
        else {
            "wall_seconds": round(pytest_seconds, 2),
            "passed": pytest_passed,
            "command": "pytest scenarios -n 2 --dist loadgroup",
        },
        "per_scenario": per_scenario,
        "noop_scenario": {
            "runs": len(noop_runs),
            "total_median_s": round(statistics.median(noop_totals), 3),
            "total_max_s": round(max(noop_totals), 3),
            "overhead_outside_engram_median_s": round(statistics.median(noop_overheads), 3),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    print(f"suite: {len(results)} scenarios in {suite_seconds:.1f}s wall with {args.jobs} jobs "
          f"(goal < {GOAL_SECONDS:.0f}s: {'met' if suite_seconds < GOAL_SECONDS else 'MISSED'})")  # fmt: skip
    if pytest_seconds is not None:
        print(
            f"pytest scenarios -n 2 --dist loadgroup: {pytest_seconds:.1f}s wall ({'passed' if pytest_passed else 'FAILED'})"
        )
    width = max([len("scenario"), *(len(item["scenario"]) for item in per_scenario)])
    print(f"{'scenario':<{width}} {'status':<7} {'total':>7} {'steps':>7} {'outside engram':>15}")
    for item in per_scenario:
        print(
            f"{item['scenario']:<{width}} {item['status']:<7} {item['total_s']:>7.2f} {item['steps_s']:>7.2f} "
            f"{item['overhead_outside_engram_s']:>15.3f}"
        )
    noop_report = report["noop_scenario"]
    print(
        f"no-op scenario x{noop_report['runs']}: median {noop_report['total_median_s']:.3f}s total, "
        f"{noop_report['overhead_outside_engram_median_s']:.3f}s outside engram"
    )


if __name__ == "__main__":
    main()
