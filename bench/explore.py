"""engram-harness explore's throughput: steps a second outside engram's own waits (goal: >= 20).

Run ``python -m bench.explore``; it writes bench/results/explore.json and prints a table.

A 60 s exploration with the real engram v1.20.0 on the chunk path (no 30 s worker ticks, no shrinking)
splits every step's time into the step itself (engram's CLI, MCP, HTTP and the fake cloud: engram's own
waits) and explore's work after it (reading the lanes, the cloud's records, sync_state, the canary's check,
the invariants). Generation is timed apart, over 10,000 histories, since it needs no engram.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.fake_cloud import machine, print_rows, save
from engram_sync_kit.harness.engram_install import DEFAULT_VERSION, find_engram, install_engram
from engram_sync_kit.harness.explore.explorer import ExploreSettings, explore
from engram_sync_kit.harness.explore.operations import NEMESIS_KINDS, GeneratorSettings, generate_history

RESULTS = Path(__file__).parent / "results" / "explore.json"
BUDGET = 60.0
GENERATED = 10_000


def main() -> None:
    binary = find_engram(DEFAULT_VERSION) or install_engram(DEFAULT_VERSION)
    settings = GeneratorSettings(autosync=False, nemesis=tuple(NEMESIS_KINDS), steps=12)
    started = time.perf_counter()
    steps = sum(len(generate_history(seed, settings)) for seed in range(GENERATED))
    generation = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as out:
        report = explore(
            ExploreSettings(
                binary=binary,
                seed=1,
                budget=BUDGET,
                out=Path(out),
                nemesis=tuple(NEMESIS_KINDS),
                autosync=False,
                steps=12,
                shrink=False,
            )
        )
    outside = report.seconds - report.step_seconds
    results = machine(
        engram=report.engram,
        budget_seconds=BUDGET,
        histories=report.histories,
        steps=report.steps,
        wall_seconds=round(report.seconds, 2),
        engram_step_seconds=round(report.step_seconds, 2),
        check_seconds=round(report.check_seconds, 2),
        outside_engram_seconds=round(outside, 2),
        steps_per_second_wall=round(report.steps / report.seconds, 2),
        steps_per_second_outside_engram=round(report.steps / outside, 2),
        checks_per_second=round(report.steps / report.check_seconds, 2),
        generated_steps_per_second=round(steps / generation, 0),
    )
    print_rows(
        [
            ("steps", str(report.steps), f"{report.histories} histories in {report.seconds:.1f} s"),
            ("outside engram", f"{results['steps_per_second_outside_engram']} steps/s", "goal >= 20"),
            ("checks alone", f"{results['checks_per_second']} steps/s", "lanes, cloud, canary, invariants"),
            ("generation", f"{results['generated_steps_per_second']:.0f} steps/s", "no engram"),
        ]
    )
    save(results, RESULTS)


if __name__ == "__main__":
    main()
