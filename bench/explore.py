"""engram-harness explore's throughput: steps a second outside engram's own waits (goal: >= 20).

Run ``python -m bench.explore [--against REV] [--rounds N] [--budget S] [--parallel N]``; it writes
bench/results/explore.json and prints a table.

Each measurement is an exploration with the real engram v1.20.0 on the chunk path (no 30 s worker ticks,
no shrinking, every nemesis, seed 1) in a child process. A step's time splits into the step itself
(engram's CLI, MCP, HTTP and the fake cloud, and the canary CLI of a triage step: what explore waits for)
and explore's work around it (a fresh world per history, reading the lanes, the cloud's records,
sync_state, the canary's check, the invariants). ``--against REV`` measures REV's explore (a git
worktree, same settings) in the same run, alternating which goes first each round, so a loaded machine
slows both alike; the child's own CPU seconds (explore's process, without engram's) are kept too, since
they move less with the load than wall time. ``--parallel N`` measures this tree once more with N
histories side by side, in the same rounds; for it, steps per wall second (engram's own time included)
is the figure, since its step times overlap. Generation is timed apart, over 10,000 histories.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import click

from bench.fake_cloud import machine, print_rows, save
from bench.worktree import ROOT, checkout
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram
from engram_sync_kit.harness.explore.operations import NEMESIS_KINDS, GeneratorSettings, generate_history

RESULTS = Path(__file__).parent / "results" / "explore.json"
GENERATED = 10_000

# One measurement, run by a child with PYTHONPATH naming the tree it measures; only the explore API that
# both trees share.
CHILD = """
import json, sys, tempfile, time
from pathlib import Path
from engram_sync_kit.harness.explore.explorer import ExploreSettings, explore
from engram_sync_kit.harness.explore.operations import NEMESIS_KINDS
binary, budget, parallel = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
side_by_side = {"parallel": parallel} if parallel > 1 else {}  # a tree before --parallel takes no such field
cpu = time.process_time()
with tempfile.TemporaryDirectory() as out:
    report = explore(ExploreSettings(binary=binary, seed=1, budget=budget, out=Path(out),
        nemesis=tuple(NEMESIS_KINDS), autosync=False, steps=12, shrink=False, **side_by_side))
print(json.dumps({"histories": report.histories, "steps": report.steps, "wall": report.seconds,
    "step": report.step_seconds, "check": report.check_seconds, "cpu": time.process_time() - cpu}))
"""


def measure(tree: Path, binary: Path, budget: float, parallel: int = 1) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(binary), str(budget), str(parallel)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=budget * 4 + 120,
    )
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    outside = raw["wall"] - raw["step"]
    return {
        "histories": raw["histories"],
        "steps": raw["steps"],
        "wall_seconds": round(raw["wall"], 2),
        "engram_step_seconds": round(raw["step"], 2),
        "check_seconds": round(raw["check"], 2),
        "outside_engram_seconds": round(outside, 2),
        "steps_per_second_outside_engram": round(raw["steps"] / outside, 2),
        "steps_per_wall_second": round(raw["steps"] / raw["wall"], 2),  # engram's own time included
        "checks_per_second": round(raw["steps"] / raw["check"], 2),
        "explore_cpu_ms_per_step": round(raw["cpu"] / raw["steps"] * 1000, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rounds": rounds,
        "median_steps_per_second_outside_engram": round(
            median(r["steps_per_second_outside_engram"] for r in rounds), 2
        ),
        "median_checks_per_second": round(median(r["checks_per_second"] for r in rounds), 2),
        "median_explore_cpu_ms_per_step": round(median(r["explore_cpu_ms_per_step"] for r in rounds), 2),
        "median_steps_per_wall_second": round(median(r["steps_per_wall_second"] for r in rounds), 2),
        "steps": sum(r["steps"] for r in rounds),
    }


OVERLAPPING = ("outside_engram_seconds", "steps_per_second_outside_engram")


def wall_only(measured: dict[str, Any]) -> dict[str, Any]:
    """Side by side, the histories' step times overlap, so "outside engram's waits" means nothing there."""
    rounds = [
        {key: value for key, value in one.items() if key not in OVERLAPPING} for one in measured["rounds"]
    ]
    kept = {key: value for key, value in measured.items() if key != "median_steps_per_second_outside_engram"}
    return {**kept, "rounds": rounds}


@click.command()
@click.option("--against", help="also measure this revision's explore, side by side")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 20))
@click.option("--budget", default=40.0, show_default=True, type=click.FloatRange(5, 600), help="seconds each")
@click.option(
    "--parallel",
    default=1,
    show_default=True,
    type=click.IntRange(1, 16),
    help="also measure this tree with N histories side by side (steps per wall second, engram included)",
)
def main(against: str | None, rounds: int, budget: float, parallel: int) -> None:
    binary = find_engram(DEFAULT_VERSION) or install_engram(DEFAULT_VERSION)
    settings = GeneratorSettings(autosync=False, nemesis=tuple(NEMESIS_KINDS), steps=12)
    started = time.perf_counter()
    steps = sum(len(generate_history(seed, settings)) for seed in range(GENERATED))
    generation = time.perf_counter() - started
    sides: dict[str, list[dict[str, Any]]] = {"this_tree": []}
    with tempfile.TemporaryDirectory() as workdir, contextlib.ExitStack() as stack:
        trees = {"this_tree": ROOT}
        widths = {"this_tree": 1}
        if against is not None:
            trees["against"] = stack.enter_context(checkout(against, Path(workdir)))
            sides["against"], widths["against"] = [], 1
        if parallel > 1:
            trees["side_by_side"], sides["side_by_side"], widths["side_by_side"] = ROOT, [], parallel
        for number in range(rounds):
            for name in list(trees) if number % 2 == 0 else list(reversed(trees)):
                sides[name].append(measure(trees[name], binary, budget, widths[name]))
    results = machine(
        engram=DEFAULT_VERSION.removeprefix("v"),
        budget_seconds_each=budget,
        this_tree=summary(sides["this_tree"]),
        generated_steps_per_second=round(steps / generation, 0),
        goal_steps_per_second_outside_engram=20,
    )
    rows = [("this tree", sides["this_tree"])]
    if against is not None:
        results["against"] = {"revision": against, **summary(sides["against"])}
        rows.append((f"against {against}", sides["against"]))
    if parallel > 1:
        results["side_by_side"] = {"parallel": parallel, **wall_only(summary(sides["side_by_side"]))}
    print_rows(
        [
            (
                name,
                f"{summary(measured)['median_steps_per_second_outside_engram']} steps/s",
                f"outside engram, median of {rounds}; checks {summary(measured)['median_checks_per_second']}/s, "
                f"explore's CPU {summary(measured)['median_explore_cpu_ms_per_step']} ms/step",
            )
            for name, measured in rows
        ]
        + [
            (
                f"{name}, --parallel {width}",
                f"{summary(measured)['median_steps_per_wall_second']} steps/s",
                "per wall second, engram's own time included",
            )
            for name, measured, width in [
                ("this tree", sides["this_tree"], 1),
                *([("this tree", sides["side_by_side"], parallel)] if parallel > 1 else []),
            ]
        ]
        + [("generation", f"{results['generated_steps_per_second']:.0f} steps/s", "no engram")]
    )
    save(results, RESULTS)


if __name__ == "__main__":
    main()
