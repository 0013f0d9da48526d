"""Benchmark the scenario harness: wall time of the shipped suite, and per-scenario overhead outside engram.

Run ``python -m bench.harness [--jobs N] [--repeat-noop N] [--no-docker]``; it writes
bench/results/harness.json and prints a table. Goal (issue 6): the shipped suite under 5 minutes on a
2-core machine, against v1.20.0.

In the same run (issue 17) the suite also plays with docker clouds (`--cloud docker`), alone and side by
side with the process run as `make test` does, and the fake cloud's start is timed both ways: a
container's time to ready (docker run until the server prints its URL) against a process's.

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
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_sync_kit.harness.cloud.image import ensure_image
from engram_sync_kit.harness.cloud.launch import CloudHandle, CloudMode
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram
from engram_sync_kit.harness.scenario.loader import Scenario, load_all, parse_scenario
from engram_sync_kit.harness.scenario.results import ScenarioResult, judge
from engram_sync_kit.harness.scenario.runner import run_many, run_scenario

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
    parser.add_argument("--no-docker", action="store_true", help="Skip the docker cloud measurements.")
    parser.add_argument("--repeat-start", type=int, default=7, help="Cloud starts timed per kind.")
    args = parser.parse_args()
    binary = find_engram(DEFAULT_VERSION)
    if binary is None:
        raise SystemExit(f"engram {DEFAULT_VERSION} is not installed: engram-harness engram install")

    scenarios = load_all([SUITE])
    started = time.monotonic()
    results = run_many(scenarios, binary, cloud_mode="process", jobs=args.jobs, expect="baseline")
    suite_seconds = time.monotonic() - started
    docker_report = (
        None if args.no_docker else measure_docker(scenarios, binary, args, results, suite_seconds)
    )

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
        "docker": docker_report,
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
    if docker_report is not None:
        print_docker(docker_report)
    noop_report = report["noop_scenario"]
    print(
        f"no-op scenario x{noop_report['runs']}: median {noop_report['total_median_s']:.3f}s total, "
        f"{noop_report['overhead_outside_engram_median_s']:.3f}s outside engram"
    )


def _suite_side_by_side(
    scenarios: list[Scenario], binary: Path, jobs: int
) -> tuple[float, list[ScenarioResult], list[ScenarioResult]]:
    """Both runs at once, as `make test` plays them (--scenario-cloud process,docker)."""
    outcome: dict[str, list[ScenarioResult]] = {}

    def play(mode: CloudMode) -> None:
        outcome[mode] = run_many(scenarios, binary, cloud_mode=mode, jobs=jobs, expect="baseline")

    started = time.monotonic()
    threads = [threading.Thread(target=play, args=(mode,)) for mode in ("process", "docker")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started, outcome["process"], outcome["docker"]


def _start_seconds(mode: CloudMode, repeat: int, logs: Path) -> dict[str, float]:
    """Median and max time from starting a fake cloud (https) to its printed URL (it is ready then)."""
    starts, stops = [], []
    for index in range(repeat):
        (logs / f"{mode}-{index}").mkdir()
        mark = time.monotonic()
        # TLS, as the library's scenarios run by default (the start includes making the throwaway CA).
        cloud = CloudHandle(mode, "bench-token", ["*"], logs / f"{mode}-{index}" / "fake-cloud.log", tls=True)
        starts.append(time.monotonic() - mark)
        mark = time.monotonic()
        cloud.close()
        stops.append(time.monotonic() - mark)
    return {
        "runs": repeat,
        "ready_median_s": round(statistics.median(starts), 3),
        "ready_max_s": round(max(starts), 3),
        "stop_median_s": round(statistics.median(stops), 3),
    }


def _statuses(results: list[ScenarioResult]) -> dict[str, list[tuple[int, str, str]]]:
    return {
        r.scenario.id: [(e.line, e.kind, e.status) for e in r.selected("baseline")]
        for r in results
        if judge(r, "baseline") != "error"
    }


def measure_docker(
    scenarios: list[Scenario],
    binary: Path,
    args: argparse.Namespace,
    process_results: list[ScenarioResult],
    process_seconds: float,
) -> dict[str, Any]:
    mark = time.monotonic()
    image = ensure_image(lambda line: print(f"fake cloud image: {line}", file=sys.stderr))
    image_seconds = time.monotonic() - mark
    with tempfile.TemporaryDirectory(prefix="bench-cloud-start-") as logs:
        process_start = _start_seconds("process", args.repeat_start, Path(logs))
        docker_start = _start_seconds("docker", args.repeat_start, Path(logs))
    started = time.monotonic()
    docker_results = run_many(scenarios, binary, cloud_mode="docker", jobs=args.jobs, expect="baseline")
    docker_seconds = time.monotonic() - started
    both_seconds, both_process, both_docker = _suite_side_by_side(scenarios, binary, args.jobs)
    reference = _statuses(process_results)
    return {
        "image": image,
        "image_found_or_built_s": round(image_seconds, 2),
        "storage_driver": _storage_driver(),
        "clouds": "https with a throwaway CA (the scenarios' default)",
        "cloud_start": {"process": process_start, "docker": docker_start},
        "container_ready_vs_process_ratio": round(
            docker_start["ready_median_s"] / max(process_start["ready_median_s"], 1e-6), 1
        ),
        "suite_wall_seconds": {
            "process": round(process_seconds, 2),
            "docker": round(docker_seconds, 2),
            "docker_vs_process_ratio": round(docker_seconds / process_seconds, 2),
            "both_side_by_side": round(both_seconds, 2),
            "added_by_docker_side_by_side": round(both_seconds - process_seconds, 2),
        },
        "baseline_passed": {
            "docker": sum(judge(r, "baseline") == "passed" for r in docker_results),
            "side_by_side_process": sum(judge(r, "baseline") == "passed" for r in both_process),
            "side_by_side_docker": sum(judge(r, "baseline") == "passed" for r in both_docker),
            "of": len(scenarios),
        },
        "baseline_results_match_process": _statuses(docker_results) == reference
        and _statuses(both_docker) == reference,
    }


def _storage_driver() -> str:
    done = subprocess.run(
        ["docker", "info", "--format", "{{.Driver}}"], capture_output=True, text=True, check=False, timeout=30
    )
    return done.stdout.strip() or "unknown"


def print_docker(report: dict[str, Any]) -> None:
    walls, starts = report["suite_wall_seconds"], report["cloud_start"]
    print(
        f"docker clouds ({report['image']}, {report['storage_driver']}): suite {walls['docker']:.1f}s vs "
        f"process {walls['process']:.1f}s ({walls['docker_vs_process_ratio']:.2f}x); both side by side "
        f"{walls['both_side_by_side']:.1f}s (+{walls['added_by_docker_side_by_side']:.1f}s)"
    )
    print(
        f"cloud ready: container median {starts['docker']['ready_median_s']:.2f}s "
        f"(max {starts['docker']['ready_max_s']:.2f}s), process {starts['process']['ready_median_s']:.3f}s; "
        f"baseline passed {report['baseline_passed']}; results match: {report['baseline_results_match_process']}"
    )


if __name__ == "__main__":
    main()
