"""Benchmark of `engram-harness validate`: `python -m bench.validate`.

Two make-deployment databases side by side in one run: the design's own (~7.6k sync rows) and the
1M-row file of bench.canary (cached). Each is validated in a child process with the real engram v1.20.0,
one worker tick, current run and suggested-plan what-if side by side (the default a user gets), so the
child's peak RSS is validate's own and the largest grandchild's (engram serve, engram doctor, the fake
cloud) is reported apart. Phase timings come from the report itself.

`--against REV` validates the same files with REV's tree (a git worktree) in the same run, one after the
other, so the change is measured side by side on the same machine. validate's own time is the wall time
less engram's (its doctor before and after, serve's start and the worker's ticks, of the longer of the
two runs, which go side by side): computed here the same way for both trees from their reports.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from bench.canary import build_database
from engram_sync_kit.harness.deployment import DeploymentSpec, generate
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "validate.json"

ENGRAM_PHASES = ("doctor_before", "worker", "doctor_after")  # "worker" includes serve's start
CHILD = """
import json, resource, sys, time
from pathlib import Path
from engram_sync_kit.harness.validate.run import ValidateOptions, validate
from engram_sync_kit.harness.validate.report import render_html, render_markdown
def peak_kib():
    # VmHWM is this program's own peak: ru_maxrss survives exec, so it would carry the peak of the bench
    # process that forked it (1.4 GiB when that process has just built the 1M-row file).
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
began = time.perf_counter()
report = validate(ValidateOptions(db=Path(sys.argv[1]), binary=Path(sys.argv[2]), ticks=1, aliases=Path(sys.argv[3])))
html = render_html(report)
markdown = render_markdown(report)
report = report.to_json() if hasattr(report, "to_json") else report  # a typed model since issue 22
print(json.dumps({
    "wall_s": round(time.perf_counter() - began, 2),
    "phases": report["timings"],
    "current": report["current"]["timings"],
    "what_if": report["what_if"]["run"]["timings"],
    "plan_lines": len(report["what_if"]["plan"]),
    "rows": report["current"]["totals"]["enqueued"],
    "json_kib": round(len(json.dumps(report)) / 1024, 1),
    "html_kib": round(len(html) / 1024, 1),
    "peak_rss_mib": round(peak_kib() / 1024, 1),
    "children_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
}))
"""


def measure(db: Path, engram: Path, workdir: Path, tree: Path = ROOT) -> dict[str, Any]:
    aliases = workdir / "aliases.yaml"
    aliases.write_text("")
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(engram), str(aliases)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    if result.returncode != 0:
        raise click.ClickException(f"validate failed on {db}: {result.stderr.strip()[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    measured["process_wall_s"] = round(time.perf_counter() - began, 2)
    measured["db_mib"] = round(db.stat().st_size / 2**20, 1)
    engram_s = max(
        sum(float(run.get(name, 0.0)) for name in ENGRAM_PHASES)
        for run in (measured["current"], measured["what_if"])
    )
    measured["engram_s"] = round(engram_s, 2)
    measured["own_s"] = round(float(measured["phases"]["total"]) - engram_s, 2)
    return measured


def side_by_side(db: Path, engram: Path, workdir: Path, against: str | None) -> dict[str, Any]:
    from bench.worktree import checkout

    this_tree = measure(db, engram, workdir)
    click.echo(json.dumps(this_tree), err=True)
    if against is None:
        return this_tree
    with checkout(against, workdir) as tree:
        before = measure(db, engram, workdir, tree)
    click.echo(json.dumps(before), err=True)
    return {
        **this_tree,
        "against": {"revision": against, **before},
        "ratio_to_against": {
            "own_s": round(this_tree["own_s"] / max(before["own_s"], 0.01), 3),
            "peak_rss": round(this_tree["peak_rss_mib"] / max(before["peak_rss_mib"], 0.01), 3),
        },
    }


@click.command()
@click.option("--cache", type=click.Path(path_type=Path), default=ROOT / ".cache" / "bench-canary")
@click.option(
    "--against", help="A git revision validated on the same files in the same run (the tree before)."
)
def main(cache: Path, against: str | None) -> None:
    engram = find_engram(DEFAULT_VERSION)
    if engram is None:
        raise click.ClickException(
            f"engram {DEFAULT_VERSION} is not installed (engram-harness engram install)"
        )
    million, _ = build_database(cache, engram)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as temporary:
        workdir = Path(temporary)
        small = workdir / "scale-1" / "engram.db"
        small.parent.mkdir()
        generate(DeploymentSpec(), 0, small, engram)
        click.echo("validate on the scale-1 deployment ...", err=True)
        scale_1 = side_by_side(small, engram, workdir, against)
        click.echo("validate on the 1M-row deployment ...", err=True)
        big = side_by_side(million, engram, workdir, against)
    results = {
        "scale_1": scale_1,
        "million": big,
        "ratio_million_to_scale_1": {
            "wall": round(big["wall_s"] / scale_1["wall_s"], 2),
            "peak_rss": round(big["peak_rss_mib"] / scale_1["peak_rss_mib"], 2),
        },
        "goal_million": {"own_s": 60, "peak_rss_mib": 1024},
        "environment": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "engram": str(engram),
            "load_avg_1m_before": round(load_before[0], 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "note": (
                "one worker tick (engram v1.20's 30 s ticker, no trigger) for the current run and the "
                "suggested-plan what-if, side by side; wall_s is validate() plus rendering; peak_rss is "
                "validate's process, children_peak_rss the largest of engram serve/doctor and the fake cloud"
            ),
        },
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    click.echo(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
