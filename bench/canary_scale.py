"""How engram-canary's check grows with foreign targets: `python -m bench.canary_scale [--against REV]`.

1. The homes: the real engram v1.20 binary creates each (`engram save`, `engram cloud enroll`, its own
   migrations); the foreign targets are then a SIMULATION OF LEGACY DATA written straight into engram's
   tables (harness.deployment.many_targets: per target a `cloud:<project>` sync_state row and two unacked
   session rows of that project). Sizes 1k, 3k, 10k and 30k targets; each home is built once per run.
2. Per size: `check --full --format json` (everything recomputed), and `check` in text, as cron mails it,
   through a state dir that was built by an earlier check of the unchanged file. Wall and CPU seconds (the
   child's user + system), and the bytes of the text.
3. With --against REV: REV's canary (a git worktree, as bench.canary does) next to this tree's, interleaved
   round by round on the same file, each with its own state dir; the JSON documents and exit codes must
   agree. A quadratic REV takes minutes a run at 30k targets, so sizes above 10k get one round each.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from bench.canary import comparable
from engram_sync_kit.harness.deployment.many_targets import add_foreign_targets, make_home
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "canary_scale.json"
CANARY = Path(sys.executable).parent / "engram-canary"
SIZES = (1_000, 3_000, 10_000, 30_000)
GOAL_CPU_S_AT_10K = 1.0


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, ended.ru_utime - used.ru_utime + ended.ru_stime - used.ru_stime, done


def _measure(db: Path, sides: dict[str, dict[str, str]], rounds: int) -> dict[str, Any]:
    full = [str(CANARY), "check", "--db", str(db), "--format", "json", "--full"]
    text = [str(CANARY), "check", "--db", str(db)]
    for side_env in sides.values():  # each side builds its state dir on the unchanged file
        subprocess.run(text, env=side_env, capture_output=True, check=False)
    walls: dict[str, dict[str, list[float]]] = {name: {"full": [], "text": []} for name in sides}
    cpus: dict[str, dict[str, list[float]]] = {name: {"full": [], "text": []} for name in sides}
    text_bytes: dict[str, int] = {}
    mismatched: list[int] = []
    for number in range(rounds):
        order = list(sides) if number % 2 == 0 else list(reversed(sides))
        documents: dict[str, Any] = {}
        for name in order:
            wall, cpu, done = _run(full, sides[name])
            walls[name]["full"].append(wall)
            cpus[name]["full"].append(cpu)
            documents[name] = (done.returncode, comparable(json.loads(done.stdout)))
            wall, cpu, done = _run(text, sides[name])
            walls[name]["text"].append(wall)
            cpus[name]["text"].append(cpu)
            text_bytes[name] = len(done.stdout.encode())
        if len({json.dumps(document, sort_keys=True) for document in documents.values()}) > 1:
            mismatched.append(number)
    measured: dict[str, Any] = {"rounds": rounds}
    for name in sides:
        measured[name] = {
            "check_full_json_median_s": round(statistics.median(walls[name]["full"]), 3),
            "check_full_json_cpu_median_s": round(statistics.median(cpus[name]["full"]), 3),
            "check_text_unchanged_median_s": round(statistics.median(walls[name]["text"]), 3),
            "check_text_unchanged_cpu_median_s": round(statistics.median(cpus[name]["text"]), 3),
            "text_bytes": text_bytes[name],
        }
    if len(sides) > 1:
        measured["same_json_and_exit_status_each_round"] = not mismatched
    return measured


@click.command()
@click.option("--against", metavar="REV", help="Also REV's canary (a git worktree), interleaved, same files.")
@click.option("--rounds", default=3, show_default=True, help="Rounds per size up to 10k targets.")
@click.option("--sizes", default=",".join(map(str, SIZES)), show_default=True, help="Foreign target counts.")
@click.option("--cache", type=click.Path(path_type=Path), default=ROOT / ".cache" / "bench-canary-scale")
@click.option(
    "--results", "results_path", type=click.Path(path_type=Path), default=RESULTS, show_default=True
)
def main(against: str | None, rounds: int, sizes: str, cache: Path, results_path: Path) -> None:
    from bench.worktree import checkout

    engram = find_engram(DEFAULT_VERSION)
    if engram is None:
        raise click.ClickException(
            f"engram {DEFAULT_VERSION} is not installed (engram-harness engram install)"
        )
    counts = [int(size) for size in sizes.split(",")]
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_")}
    # An installed canary has its bytecode compiled; without it every run compiles ~0.1 s of source.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["XDG_CONFIG_HOME"] = str(cache / "xdg")
    load_at_start = os.getloadavg()
    results: dict[str, Any] = {
        "benchmark": "canary check by foreign targets",
        "engram": DEFAULT_VERSION,
        "how": "homes created by engram v1.20 (save, cloud enroll), then harness.deployment.many_targets "
        "simulated legacy data: per target one cloud:<project> sync_state row and 2 unacked session rows",
        "goal": f"linear; check <= {GOAL_CPU_S_AT_10K:g} s at 10k targets",
        "sizes": {},
    }

    def measure_all(tree: Path | None) -> None:
        for count in counts:
            click.echo(f"{count} foreign targets ...", err=True)
            root = cache / f"targets-{count}"
            db = make_home(engram, root)
            add_foreign_targets(db, count)
            sides = {
                "this_tree": {
                    **env,
                    "PYTHONPATH": str(ROOT),
                    "ENGRAM_CANARY_STATE_DIR": str(root / "state-this"),
                }
            }
            if tree is not None:
                sides["revision"] = {
                    **env,
                    "PYTHONPATH": str(tree),
                    "ENGRAM_CANARY_STATE_DIR": str(root / "state-revision"),
                }
            measured = _measure(db, sides, rounds if count <= 10_000 else 1)
            results["sizes"][str(count)] = measured
            click.echo(json.dumps(measured), err=True)
            shutil.rmtree(root, ignore_errors=True)

    if against is None:
        measure_all(None)
    else:
        results["against"] = against
        with checkout(against, cache) as tree:
            measure_all(tree)
    results["machine"] = {
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(value, 2) for value in load_at_start],
        "load_average_at_end": [round(value, 2) for value in os.getloadavg()],
    }
    results["tree"] = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    click.echo(json.dumps(results, indent=2))
    click.echo(f"wrote {results_path}")


if __name__ == "__main__":
    main()
