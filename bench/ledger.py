"""The one ledger rule's cost: `python -m bench.ledger [--against REV] [--rounds N]`.

Two in-process workloads, each in a child process whose CPU time is measured (the machine is shared, so
wall time would measure the neighbours):

- lanes: harness.lanes.compute_lanes on 300,000 local rows (every 20th a byte-identical twin of the row
  before it, every third acked before the run) and the copies the run received (one in 1,000 missing);
- reconcile: canary.reconcile's Matcher on 1,000,000 acked rows (twins likewise) and the cloud's copies
  streamed past it (one in 1,000 missing); the digest is the key itself, so sha256 is not what is timed.

`--against REV` runs the same children on REV's package (git archive), interleaved round by round. Each
child also prints what it counted, so a change of the answer shows next to the change of the cost.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from bench.fake_cloud import machine, print_rows, save
from bench.worktree import extract

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "ledger.json"

LANES = """
import json, time
from dataclasses import dataclass
from engram_sync_kit.harness.lanes import LocalMutation, compute_lanes

@dataclass(frozen=True)
class Copy:
    entity: str
    entity_key: str
    op: str
    payload_digest: str
    payload: object = None
    transport: str = "mutation"

local, copies, before = [], [], set()
for seq in range(1, 300_001):
    n = seq if seq % 20 else seq - 1
    local.append(LocalMutation(seq, "cloud", "app", "session", f"s{n}", "upsert", f"d{n}", True, {"id": n}))
    if seq % 3 == 0:
        before.add(seq)
    elif seq % 1000:
        copies.append(Copy("session", f"s{n}", "upsert", f"d{n}"))
start = time.process_time()
table = compute_lanes(local, copies, frozenset(before))
(row,) = table.rows
print(json.dumps({"cpu_s": time.process_time() - start, "lost": row.lost,
                  "acked_before_run": row.acked_before_run, "delivered": row.delivered}))
"""

RECONCILE = """
import hashlib, json, time
import engram_sync_kit.canary.reconcile as reconcile
from engram_sync_kit.canary.cloud_client import CloudMutation

reconcile._digest = lambda payload: payload
rows, copies = [], []
for seq in range(1, 1_000_001):
    n = seq if seq % 20 else seq - 1
    key = ("session", f"s{n}", "upsert", hashlib.sha256(str(n).encode()).digest())
    rows.append(reconcile.LocalRow(seq, "cloud", "app", key, "2026-01-01 00:00:00"))
    if seq % 1000:
        copies.append(CloudMutation(seq, "app", *key, ""))
start = time.process_time()
matcher = reconcile.Matcher(reconcile.Journal(rows, {}, set(), frozenset({"app"})))
for copy in copies:
    matcher.pulled(copy)
missing = matcher.settle({})
print(json.dumps({"cpu_s": time.process_time() - start, "lost": len(missing)}))
"""

WORKLOADS = {"lanes": LANES, "reconcile": RECONCILE}


def _child(code: str, package_root: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=package_root, capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    answer = {key: value for key, value in runs[0].items() if key != "cpu_s"}
    return {
        "cpu_s_median": round(statistics.median(run["cpu_s"] for run in runs), 3),
        "cpu_s": [round(run["cpu_s"], 3) for run in runs],
        **answer,
    }


@click.command()
@click.option("--against", help="also measure this revision's package, side by side")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1, 50))
def main(against: str | None, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as scratch:
        trees = {"this tree": ROOT}
        commit = None
        if against is not None:
            commit = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", against],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            extract(commit, Path(scratch), ("engram_sync_kit",))
            trees[f"against {against}"] = Path(scratch)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {workload: [] for workload in WORKLOADS} for name in trees
        }
        for _ in range(rounds):
            for workload, code in WORKLOADS.items():
                for name, root in trees.items():
                    runs[name][workload].append(_child(code, root))
    results = machine(rounds=rounds, against=against, against_commit=commit)
    rows = []
    for name, by_workload in runs.items():
        results[name] = {workload: _summary(found) for workload, found in by_workload.items()}
        for workload, summary in results[name].items():
            answer = ", ".join(f"{k} {v}" for k, v in summary.items() if not k.startswith("cpu_s"))
            rows.append((f"{name}: {workload}", f"{summary['cpu_s_median']:.3f} s CPU", answer))
    print_rows(rows)
    save(results, RESULTS)


if __name__ == "__main__":
    main()
