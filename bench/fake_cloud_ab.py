"""A/B the fake cloud against an older revision of itself, interleaved, on the same machine in the same run.

On a shared, loaded machine the absolute numbers of bench.fake_cloud swing by 10x; a before/after pair
measured round by round does not. Run ``python -m bench.fake_cloud_ab [REVISION]`` (default: the
commit before issue 11's hardening); it extracts that revision's fake_cloud and engram_contract with
``git archive`` into a temporary directory and writes bench/results/fake_cloud_ab.json.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.fake_cloud import TOKEN, machine, measure_push_throughput, print_rows, save
from bench.worktree import extract

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "fake_cloud_ab.json"
BEFORE_ISSUE_11 = "f408f01"
ROUNDS = 4
SECONDS = 3.0
RESETS = 10


def _start(tree: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_CLOUD_")}
    # Since d646fca the packages live in engram_sync_kit/; older revisions have them at the top level.
    package = "engram_sync_kit.fake_cloud" if (tree / "engram_sync_kit").is_dir() else "fake_cloud"
    code = (
        f"import sys; sys.path.insert(0, {str(tree)!r}); from {package}.cli import main; "
        f"sys.argv = ['engram-fake-cloud', 'serve', '--port', '0', '--token', {TOKEN!r}]; main()"
    )
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=tree
    )
    assert process.stdout is not None
    url = process.stdout.readline().decode().strip()
    while True:
        try:
            if httpx.get(f"{url}/_fake/ready", trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.005)
    return process, url, (time.perf_counter() - started) * 1000


def run(revision: str = BEFORE_ISSUE_11, rounds: int = ROUNDS) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {
        side: {"start_ms": [], "entries_per_s": [], "reset_ms": []} for side in ("before", "after")
    }
    with tempfile.TemporaryDirectory(prefix="fake-cloud-ab-") as tmp:
        before = Path(tmp)
        try:
            extract(revision, before, ("engram_sync_kit",))
        except subprocess.CalledProcessError:  # a revision from before the package folder
            extract(revision, before)
        for _ in range(rounds):
            for side, tree in (("before", before), ("after", REPO)):
                process, url, start_ms = _start(tree)
                try:
                    samples[side]["start_ms"].append(start_ms)
                    samples[side]["entries_per_s"].append(measure_push_throughput(url, TOKEN, SECONDS))
                    with httpx.Client(base_url=url, trust_env=False) as http:
                        for _ in range(RESETS):
                            mark = time.perf_counter()
                            http.post("/_fake/reset").raise_for_status()
                            samples[side]["reset_ms"].append((time.perf_counter() - mark) * 1000)
                finally:
                    process.terminate()
                    process.wait(10)
    medians = {
        side: {name: round(statistics.median(values), 2) for name, values in measured.items()}
        for side, measured in samples.items()
    }
    return {
        "before_revision": revision,
        "median": medians,
        "after_over_before": {
            name: round(medians["after"][name] / medians["before"][name], 3) for name in medians["after"]
        },
        "rounds": rounds,
        "environment": machine(),
    }


def print_table(results: dict[str, Any]) -> None:
    before, after = results["median"]["before"], results["median"]["after"]
    ratio = results["after_over_before"]
    print_rows(
        [
            (f"{name} (median)", f"{before[name]} -> {after[name]}", f"x{ratio[name]}")
            for name in ("start_ms", "reset_ms", "entries_per_s")
        ]
    )


def main() -> None:
    results = run(sys.argv[1] if len(sys.argv) > 1 else BEFORE_ISSUE_11)
    print_table(results)
    save(results, RESULTS)


if __name__ == "__main__":
    main()
