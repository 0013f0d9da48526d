"""`engram-canary reconcile` over 100k acked rows, against the fake cloud and the REAL server, same run.

Run ``python -m bench.reconcile``; it writes bench/results/reconcile.json and prints a table.

Setup: make-deployment builds a journal (the real engram creates the file; the history is its
simulation of legacy data) holding at least 100,000 acked rows of enrolled projects. Both clouds then
receive those rows through POST /sync/mutations/push in 100-entry batches per project, exactly as
engram's worker sends them, except one row in every 1,000, which stands for a silent loss: reconcile
must report exactly those. The fake runs as a subprocess with --tls; the real `engram cloud serve`
v1.20 (Postgres, fsync=off) runs behind fake_cloud.tls_front, so both are read over https with a token.

Each reconcile is a separate `engram-canary reconcile` process: wall time from spawn to exit, and its
peak RSS from wait4. The two clouds are measured in alternating rounds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from bench.fake_cloud import machine, print_rows, save, server_env
from engram_sync_kit.engram_contract.read_only import connect_read_only
from engram_sync_kit.fake_cloud.process import FakeCloudProcess
from engram_sync_kit.fake_cloud.real_server import real_cloud_server, throwaway_postgres
from engram_sync_kit.fake_cloud.tls_front import tls_front
from engram_sync_kit.harness.deployment import DeploymentSpec, generate
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram

RESULTS = Path(__file__).parent / "results" / "reconcile.json"
TOKEN = "bench-reconcile-token"
ACKED_ROWS = 100_000
LOSE_ONE_IN = 1000
ROUNDS = 3
CANARY = Path(sys.executable).parent / "engram-canary"


def acked_enrolled_rows(db: Path) -> list[tuple[int, str, str, str, str, str]]:
    connection = connect_read_only(db)
    try:
        return [
            (int(seq), str(project), str(entity), str(key), str(op), str(payload))
            for seq, project, entity, key, op, payload in connection.execute(
                "SELECT seq, project, entity, entity_key, op, payload FROM sync_mutations "
                "WHERE acked_at IS NOT NULL AND source = 'local' "
                "AND project IN (SELECT project FROM sync_enrolled_projects) ORDER BY seq"
            )
        ]
    finally:
        connection.close()


def build_journal(workdir: Path, engram_bin: Path) -> tuple[Path, float]:
    scale = 15.0
    while True:
        db = workdir / f"deployment-{scale:g}.db"
        started = time.perf_counter()
        generate(DeploymentSpec().scaled(scale), 7, db, engram_bin)
        seconds = time.perf_counter() - started
        if len(acked_enrolled_rows(db)) >= ACKED_ROWS:
            return db, seconds
        db.unlink()
        scale += 1


def push_all(
    base_url: str, rows: list[tuple[int, str, str, str, str, str]], ca_file: Path | None
) -> dict[str, Any]:
    """What engram's worker sends, 100 entries per project batch; returns the seqs left out (the losses)."""
    by_project: dict[str, list[tuple[int, str, str, str, str, str]]] = defaultdict(list)
    for row in rows:
        by_project[row[1]].append(row)
    skipped: list[int] = []
    pushed = 0
    started = time.perf_counter()
    verify: Any = str(ca_file) if ca_file else True
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}, verify=verify, timeout=60
    ) as http:
        for items in by_project.values():
            kept = []
            for index, row in enumerate(items):
                if index % LOSE_ONE_IN == LOSE_ONE_IN - 1:
                    skipped.append(row[0])
                else:
                    kept.append(row)
            for start in range(0, len(kept), 100):
                entries = [
                    {"project": p, "entity": e, "entity_key": k, "op": o, "payload": json.loads(payload)}
                    for _, p, e, k, o, payload in kept[start : start + 100]
                ]
                answer = http.post("/sync/mutations/push", json={"entries": entries})
                if answer.status_code != 200:
                    raise SystemExit(f"push to {base_url} failed: {answer.status_code} {answer.text[:300]}")
                pushed += len(entries)
    return {"pushed": pushed, "skipped": sorted(skipped), "seconds": round(time.perf_counter() - started, 1)}


# A child forked from this (large) process starts with this process's resident pages counted in its
# ru_maxrss; a small launcher process forks the measured command instead and reports its wait4 rusage.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def measure(db: Path, base_url: str, ca_file: Path, *extra: str) -> dict[str, Any]:
    """One reconcile run in a child process: wall time and its own peak RSS (wait4, via LAUNCHER)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "SSL_CERT"))}
    env.update({"ENGRAM_CLOUD_SERVER": base_url, "ENGRAM_CLOUD_TOKEN": TOKEN, "SSL_CERT_FILE": str(ca_file)})
    env["XDG_CONFIG_HOME"] = str(db.parent / "xdg")
    peak_file = db.parent / "peak-rss-kib"
    command = [str(CANARY), "reconcile", "--db", str(db), "--format", "json", "--timeout", "120", *extra]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        returncode = subprocess.call(
            [sys.executable, "-c", LAUNCHER, str(peak_file), *command], env=env, stdout=out, stderr=err
        )
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text, problems = out.read().decode(), err.read().decode()
    peak_kib = int(peak_file.read_text())
    document = json.loads(text) if text.strip().startswith("{") else {}
    summary = document.get("summary", {})
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "exit": returncode,
        "acked": summary.get("acked"),
        "delivered": summary.get("delivered"),
        "lost": summary.get("lost"),
        "lost_seqs": [row["seq"] for row in document.get("lost", [])],
        "cloud_rows_read": summary.get("cloud_rows_read"),
        "cloud_requests": summary.get("cloud_requests"),
        "error": document.get("error") or (problems.strip()[-300:] or None),
    }


def run(rounds: int = ROUNDS) -> dict[str, Any]:
    engram_bin = find_engram(DEFAULT_VERSION) or install_engram(DEFAULT_VERSION)
    with tempfile.TemporaryDirectory(prefix="bench-reconcile-") as tmp:
        workdir = Path(tmp)
        db, build_seconds = build_journal(workdir, engram_bin)
        rows = acked_enrolled_rows(db)
        projects = sorted({row[1] for row in rows})
        with (
            throwaway_postgres() as postgres_url,
            real_cloud_server(engram_bin, postgres_url, token=TOKEN, allowed_projects=projects) as real,
            tls_front(real.base_url, workdir / "real-ca.pem") as front,
            FakeCloudProcess(
                ["--port", "0", "--token", TOKEN, "--tls", "--ca-out", str(workdir / "fake-ca.pem")],
                env=server_env(),
                ca_file=workdir / "fake-ca.pem",
                server_version="v1.20",
            ) as fake,
        ):
            fake_push = push_all(fake.base_url, rows, workdir / "fake-ca.pem")
            real_push = push_all(real.base_url, rows, None)
            runs: dict[str, list[dict[str, Any]]] = {"fake": [], "real": []}
            for _ in range(rounds):
                runs["fake"].append(measure(db, fake.base_url, workdir / "fake-ca.pem"))
                runs["real"].append(measure(db, front.base_url, front.ca_file))
            # The journal's history ends months ago: nothing was acked in the last day.
            routine = measure(db, front.base_url, front.ca_file, "--since", "24h")
    expected_lost = fake_push["skipped"]
    results: dict[str, Any] = {
        "acked_rows": len(rows),
        "projects": len(projects),
        "expected_lost": len(expected_lost),
        "setup": {
            "make_deployment_s": round(build_seconds, 1),
            "push_fake_s": fake_push["seconds"],
            "push_real_s": real_push["seconds"],
        },
    }
    for name, samples in runs.items():
        exact = all(sample["lost_seqs"] == expected_lost for sample in samples)
        results[name] = {
            "median_wall_s": statistics.median(s["wall_s"] for s in samples),
            "max_peak_rss_mib": max(s["peak_rss_mib"] for s in samples),
            "lost_reported_exactly": exact,
            "runs": [{k: v for k, v in s.items() if k != "lost_seqs"} for s in samples],
        }
    results["routine_since_24h_real"] = {k: v for k, v in routine.items() if k != "lost_seqs"}
    results["ratio_real_over_fake_wall"] = round(
        results["real"]["median_wall_s"] / results["fake"]["median_wall_s"], 2
    )
    results["method"] = (
        f"{rounds} alternating rounds; each an `engram-canary reconcile --format json` child process over https "
        "with a token: wall time spawn to exit, peak RSS from wait4; the fake is `engram-fake-cloud serve --tls`, "
        "the real server sits behind fake_cloud.tls_front (a Python TLS relay, included in its time)"
    )
    results["environment"] = machine(
        engram=DEFAULT_VERSION,
        postgres_settings="throwaway cluster, fsync=off",
        fake_server="engram-fake-cloud serve --tls (subprocess)",
    )
    return results


def print_table(results: dict[str, Any]) -> None:
    rows = []
    for name in ("fake", "real"):
        entry = results[name]
        rows.append(
            (
                f"reconcile {results['acked_rows']} acked rows vs {name}",
                f"{entry['median_wall_s']} s, {entry['max_peak_rss_mib']} MiB",
                f"lost {entry['runs'][0]['lost']} (expected {results['expected_lost']}), exact: {entry['lost_reported_exactly']}",
            )
        )
    rows.append(("real / fake wall time", f"{results['ratio_real_over_fake_wall']}x", ""))
    routine = results["routine_since_24h_real"]
    rows.append(
        (
            "reconcile --since 24h vs real",
            f"{routine['wall_s']} s, {routine['peak_rss_mib']} MiB",
            "nothing acked in the window",
        )
    )
    print_rows(rows)


if __name__ == "__main__":
    outcome = run()
    print_table(outcome)
    save(outcome, RESULTS)
