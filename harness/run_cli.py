"""`engram-harness run` and `engram-harness schema`: thin click commands over the runner."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import cast

import click
from rich.console import Console

from harness.cloud_cli import show_progress
from harness.cloud_image import ensure_image
from harness.engram_install import DEFAULT_VERSION, find_engram, install_engram
from harness.errors import HarnessError
from harness.loader import Scenario, load_all
from harness.report import matrix_table, print_result, summary_table, write_json, write_junit
from harness.runner import ExpectMode, ScenarioResult, judge, run_many
from harness.schema import json_schema_text
from harness.steps import StepRecord
from harness.world import CloudMode


def _binaries(engram_path: Path | None, versions: str | None) -> list[Path]:
    if engram_path is not None and versions:
        raise click.UsageError("--engram and --engram-version are exclusive; give one")
    if engram_path is not None:
        if not os.access(engram_path, os.X_OK):
            raise click.UsageError(f"--engram {engram_path}: not an executable file")
        return [engram_path]
    binaries = []
    for version in (versions or DEFAULT_VERSION).split(","):
        version = version.strip()
        found = find_engram(version) if versions is None else None
        binaries.append(found or install_engram(version))
    return binaries


@click.command("run")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--engram", "engram_path", type=click.Path(path_type=Path, dir_okay=False), help="The engram binary."
)
@click.option("--engram-version", "versions", help="Version(s) to run against, comma-separated (a matrix).")
@click.option(
    "--cloud",
    "cloud_mode",
    type=click.Choice(["process", "docker", "inprocess"]),
    default="process",
    show_default=True,
    help="Where the fake cloud runs.",
)
@click.option(
    "--expect",
    "mode",
    type=click.Choice(["baseline", "design", "all"]),
    default="all",
    show_default=True,
    help="Which tagged expectations decide the exit code (all are reported).",
)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), help="Write a JSON report."
)
@click.option(
    "--junit", "junit_path", type=click.Path(path_type=Path, dir_okay=False), help="Write JUnit XML."
)
@click.option(
    "--db",
    "db_source",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Run against a COPY of this engram.db (the original is opened read-only and left untouched).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Scenarios run side by side (they mostly wait on engram's 30 s worker).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Print every scenario's evidence (journal, answers, commands, logs).",
)
@click.option(
    "--keep", is_flag=True, help="Keep every scenario's directory, passed or not (evidence/, logs/)."
)
def run_command(
    paths: tuple[Path, ...],
    engram_path: Path | None,
    versions: str | None,
    cloud_mode: str,
    mode: str,
    json_path: Path | None,
    junit_path: Path | None,
    db_source: Path | None,
    jobs: int,
    verbose: bool,
    keep: bool,
) -> None:
    """Run the scenarios under PATHS (default: scenarios/) against the real engram."""
    console = Console(highlight=False, width=None if Console().is_terminal else 160)
    expect = cast(ExpectMode, mode)
    try:
        scenarios = load_all(list(paths) or [Path("scenarios")])
        if not scenarios:
            raise click.UsageError(f"no *.scenario.yaml under {', '.join(map(str, paths or ('scenarios',)))}")
        if db_source is not None and len(scenarios) != 1:
            raise click.UsageError(f"--db runs exactly one scenario; {len(scenarios)} were selected")
        for option, report_path in (("--json", json_path), ("--junit", junit_path)):
            if report_path is not None and not report_path.parent.is_dir():
                raise click.UsageError(f"{option} {report_path}: no such directory {report_path.parent}")
        binaries = _binaries(engram_path, versions)
        if cloud_mode == "docker":
            ensure_image(show_progress)  # built once, before any scenario starts
    except HarnessError as error:
        raise click.ClickException(str(error)) from None
    lock = threading.Lock()

    def progress(scenario: Scenario, record: StepRecord) -> None:
        mark = {"ok": "✓", "failed": "✗", "skipped": "–"}[record.status]
        with lock:
            console.print(
                f"  {scenario.id} {mark} {record.index}. {record.name} ({record.seconds:.1f}s)"
                + (f" — {record.error}" if record.status != "ok" else ""),
                markup=False,
            )

    def done(result: ScenarioResult) -> None:
        with lock:
            console.print(
                f"{judge(result, expect):>7} {result.scenario.id} on engram {result.version} "
                f"in {result.timings.get('total', 0):.1f}s",
                markup=False,
            )

    results: list[ScenarioResult] = []
    for binary in binaries:
        console.print(
            f"running {len(scenarios)} scenario(s) against {binary} ({cloud_mode} cloud, {jobs} at a time)"
        )
        results += run_many(
            scenarios,
            binary,
            cloud_mode=cast(CloudMode, cloud_mode),
            jobs=jobs,
            db_copy_source=db_source,
            expect=expect,
            progress=progress,
            done=done,
            keep=keep,
        )
    for result in results:
        print_result(console, result, expect, verbose=verbose)
    console.print(summary_table(results, expect))
    if len(binaries) > 1:
        console.print(matrix_table(results, expect))
    try:
        if json_path is not None:
            write_json(json_path, results, expect)
        if junit_path is not None:
            write_junit(junit_path, results, expect)
    except OSError as error:
        raise click.ClickException(f"{error.filename}: cannot write the report ({error.strerror})") from None
    failed = [r for r in results if judge(r, expect) != "passed"]
    if failed:
        raise SystemExit(1)


@click.command("schema")
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), help="Write to FILE instead of stdout."
)
def schema_command(out: Path | None) -> None:
    """Print the JSON Schema of *.scenario.yaml files (for editors)."""
    text = json_schema_text() + "\n"
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise click.ClickException(f"--out {out}: cannot write ({error.strerror})") from None
