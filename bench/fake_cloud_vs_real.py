"""Push throughput of the fake cloud side by side with the REAL `engram cloud serve` (Postgres), same run.

Run ``python -m bench.fake_cloud_vs_real``; it writes bench/results/fake_cloud_vs_real.json and prints a
table. Both servers get the same load (bench.fake_cloud.measure_push_throughput: 100-entry batches on
one keep-alive connection) in alternating rounds, so drift of the machine hits both alike. The fake
runs as a subprocess, like a user runs it; the real server uses a throwaway Postgres from
scripts/postgres.sh (or ENGRAM_KIT_POSTGRES_URL) with a fresh database.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.fake_cloud import TOKEN, machine, measure_push_throughput, print_rows, save, server_env
from engram_sync_kit.fake_cloud.process import FakeCloudProcess
from engram_sync_kit.fake_cloud.real_server import real_cloud_server, throwaway_postgres
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram

RESULTS = Path(__file__).parent / "results" / "fake_cloud_vs_real.json"
ROUNDS = 3
SECONDS_PER_ROUND = 5.0
PROJECT = "bench"


def _postgres_version(url: str) -> str:
    done = subprocess.run(
        ["psql", "-X", "-t", "-A", url, "-c", "SHOW server_version"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def run(rounds: int = ROUNDS, seconds: float = SECONDS_PER_ROUND) -> dict[str, Any]:
    engram_bin = find_engram(DEFAULT_VERSION) or install_engram(DEFAULT_VERSION)
    env = server_env()
    fake_rates: list[float] = []
    real_rates: list[float] = []
    with (
        throwaway_postgres() as postgres_url,
        real_cloud_server(engram_bin, postgres_url, token=TOKEN, allowed_projects=[PROJECT]) as real,
        FakeCloudProcess(["--port", "0", "--token", TOKEN], env=env, server_version="v1.20") as fake,
    ):
        for _ in range(rounds):
            fake_rates.append(measure_push_throughput(fake.base_url, TOKEN, seconds, project=PROJECT))
            real_rates.append(measure_push_throughput(real.base_url, TOKEN, seconds, project=PROJECT))
        postgres = _postgres_version(postgres_url)
    fake_median, real_median = statistics.median(fake_rates), statistics.median(real_rates)
    return {
        "push_throughput_entries_per_s": {
            "fake": {"median": round(fake_median, 1), "rounds": [round(r, 1) for r in fake_rates]},
            "real": {"median": round(real_median, 1), "rounds": [round(r, 1) for r in real_rates]},
            "ratio_fake_over_real": round(fake_median / real_median, 2),
        },
        "method": (
            f"{rounds} alternating rounds of {seconds:g} s each; POST /sync/mutations/push with 100-entry "
            "observation batches on one keep-alive connection; the median round per server"
        ),
        "environment": machine(
            engram=DEFAULT_VERSION,
            postgres=postgres,
            postgres_settings="throwaway cluster, fsync=off (flatters the real server)",
            fake_server="engram-fake-cloud serve (subprocess)",
        ),
    }


def print_table(results: dict[str, Any]) -> None:
    push = results["push_throughput_entries_per_s"]
    rows = [
        ("fake cloud push (median)", f"{push['fake']['median']} entries/s", ""),
        (
            f"engram cloud serve {results['environment']['engram']}",
            f"{push['real']['median']} entries/s",
            "",
        ),
        ("ratio fake / real", f"{push['ratio_fake_over_real']}x", ""),
    ]
    print_rows(rows)


def main() -> None:
    results = run()
    print_table(results)
    save(results, RESULTS)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        raise SystemExit(f"usage: {sys.executable} -m bench.fake_cloud_vs_real (no arguments)")
    main()
