"""`engram-harness run` and `engram-harness schema`: thin click commands over the runner."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import click
from rich.console import Console

from engram_sync_kit.engram_contract.one_line_cli import refuse_overwriting_inputs
from engram_sync_kit.harness.cloud.cli import show_progress
from engram_sync_kit.harness.cloud.image import ensure_image
from engram_sync_kit.harness.cloud.launch import CloudMode, CloudTarget
from engram_sync_kit.harness.design.conformance import conformance_table
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram
from engram_sync_kit.harness.errors import EngramInstallError, HarnessError
from engram_sync_kit.harness.keep import KEEP_IN_TEMP
from engram_sync_kit.harness.library import scenario_library
from engram_sync_kit.harness.scenario.loader import SCENARIO_SUFFIX, Scenario, discover, load_each
from engram_sync_kit.harness.scenario.report import (
    RunProblem,
    matrix_table,
    print_result,
    summary_table,
    write_json,
    write_junit,
)
from engram_sync_kit.harness.scenario.results import ExpectMode, ScenarioResult, StepRecord, unjudged_failure
from engram_sync_kit.harness.scenario.runner import run_many
from engram_sync_kit.harness.scenario.schema import json_schema_text
from engram_sync_kit.harness.world import VERSION_PATTERN

NO_ENGRAM = (
    "no engram binary: give --engram PATH, set ENGRAM_BIN=PATH, or run `engram-harness engram install` "
    "(building {version} failed: {reason}); --skip-without-engram skips the scenarios instead"
)


def _binaries(engram_path: Path | None, versions: str | None, skip_without: bool) -> list[Path]:
    """The binaries to run against; [] only when none is found and skipping was asked for."""
    if engram_path is not None and versions:
        raise click.UsageError("--engram and --engram-version are exclusive; give one")
    if engram_path is not None:
        if not (engram_path.is_file() and os.access(engram_path, os.X_OK)):
            raise click.UsageError(f"--engram {engram_path}: not an executable file")
        return [engram_path]
    if versions is None:
        found = find_engram(DEFAULT_VERSION)
        if found is not None:
            if not (found.is_file() and os.access(found, os.X_OK)):
                raise click.UsageError(f"ENGRAM_BIN={found}: not an executable file")
            return [found]
        try:
            return [install_engram(DEFAULT_VERSION)]
        except EngramInstallError as error:
            if skip_without:
                return []
            raise click.ClickException(NO_ENGRAM.format(version=DEFAULT_VERSION, reason=error)) from None
    binaries = []
    for version in (versions or DEFAULT_VERSION).split(","):
        version = version.strip()
        found = find_engram(version) if versions is None else None
        binaries.append(found or install_engram(version))
    return binaries


def _keep_dir(keep_to: str | None) -> Path | None:
    if keep_to is None or keep_to == KEEP_IN_TEMP:
        return None
    path = Path(keep_to)
    if path.name.endswith(SCENARIO_SUFFIX) or (path.is_dir() and any(path.rglob(f"*{SCENARIO_SUFFIX}"))):
        # `run --keep scenarios/` would otherwise keep the runs among the scenarios and run the default path
        raise click.UsageError(f"--keep {keep_to}: that holds scenarios; write --keep=DIR, or --keep last")
    if path.exists() and not path.is_dir():
        raise click.UsageError(f"--keep {keep_to}: not a directory")
    return path.absolute()


def _cloud_target(
    cloud_mode: str | None,
    url: str | None,
    token: str | None,
    control_token: str | None,
    ca_file: Path | None,
) -> CloudTarget | None:
    if url is None:
        options = (
            ("--cloud-token", token),
            ("--cloud-control-token", control_token),
            ("--cloud-ca", ca_file),
        )
        for option, value in options:
            if value is not None:
                raise click.UsageError(f"{option} goes with --cloud-url")
        return None
    if cloud_mode is not None:
        raise click.UsageError(
            "--cloud and --cloud-url are exclusive: --cloud-url uses a cloud that runs already"
        )
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise click.UsageError(f"--cloud-url {url}: give a base URL like https://127.0.0.1:18080")
    if ca_file is not None and not url.startswith("https://"):
        raise click.UsageError("--cloud-ca needs an https:// --cloud-url")
    return CloudTarget(
        url=url.rstrip("/"),
        token=token or None,
        ca_file=ca_file.absolute() if ca_file else None,
        control_token=control_token or None,
    )


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
    help="Where each scenario's own fake cloud runs: a local process (the default), a container "
    "(the image is found or built first) or this process.",
)
@click.option(
    "--cloud-url",
    help="Run against an already-running fake cloud at this base URL instead (local or remote); "
    "scenarios then run one at a time, each after a reset.",
)
@click.option("--cloud-token", help="With --cloud-url: the bearer token that cloud requires.")
@click.option(
    "--cloud-control-token",
    help="With --cloud-url: the token of its control API (/_fake/), which a fake bound off loopback requires.",
)
@click.option(
    "--cloud-ca",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="With --cloud-url over https: the CA that signed its certificate (engram gets it as SSL_CERT_FILE).",
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
    "--keep",
    "keep_to",
    is_flag=False,
    flag_value=KEEP_IN_TEMP,
    default=None,
    metavar="[DIR]",
    help="Keep every scenario's directory, passed or not (evidence/, logs/): in DIR (created if missing), "
    "or in the system's temporary directory when DIR is left out.",
)
@click.option(
    "--skip-without-engram",
    is_flag=True,
    help="When no engram binary is found, report the scenarios as skipped and exit 0 (default: exit 1).",
)
@click.option(
    "--engram-version-as",
    "version_as",
    metavar="VERSION",
    callback=lambda _context, _param, value: _release_version(value),
    help="Judge the expectations' `engram:` ranges as if the binary were VERSION: for a build whose own "
    "version says nothing (an untagged `go build` reports 0.0.0-<date>-<hash>).",
)
@click.option(
    "--allow-unjudged",
    is_flag=True,
    help="Let a scenario pass although none of its expectations applied to this engram (default: such a "
    "run fails, so a gate never passes having judged nothing).",
)
def run_command(
    paths: tuple[Path, ...],
    engram_path: Path | None,
    versions: str | None,
    cloud_mode: str | None,
    cloud_url: str | None,
    cloud_token: str | None,
    cloud_control_token: str | None,
    cloud_ca: Path | None,
    mode: str,
    json_path: Path | None,
    junit_path: Path | None,
    db_source: Path | None,
    jobs: int,
    verbose: bool,
    keep_to: str | None,
    skip_without_engram: bool,
    version_as: str | None,
    allow_unjudged: bool,
) -> None:
    """Run the scenarios under PATHS (default: the shipped scenario library) against the real engram.

    \b
    Examples:
      engram-harness run --expect baseline
      engram-harness run --engram ./engram --engram-version-as 1.20.0 --junit gate.xml my-scenarios/
    """
    console = Console(highlight=False, width=None if Console().is_terminal else 160)
    expect = cast(ExpectMode, mode)
    try:
        selected = list(paths) or [scenario_library()]
        scenarios, invalid = load_each(selected)
        if not scenarios and not invalid:
            raise click.UsageError(f"no *.scenario.yaml under {', '.join(map(str, selected))}")
        if db_source is not None and len(scenarios) != 1:
            raise click.UsageError(f"--db runs exactly one scenario; {len(scenarios)} were selected")
        for option, report_path in (("--json", json_path), ("--junit", junit_path)):
            if report_path is not None and not report_path.parent.is_dir():
                raise click.UsageError(f"{option} {report_path}: no such directory {report_path.parent}")
        sources = {f"scenario {path}": path for path in discover(selected)}
        refuse_overwriting_inputs(
            {"--json": json_path, "--junit": junit_path},
            {"--db": db_source},
            {**sources, "--cloud-ca": cloud_ca, "--engram": engram_path},
        )
        keep_dir = _keep_dir(keep_to)
        problems = [RunProblem(file.path.name, file.error, str(file.path)) for file in invalid]
        for file in invalid:  # reported, and the run goes on with the valid ones
            click.echo(f"Error: {file.error}", err=True)
        try:
            binaries = _binaries(engram_path, versions, skip_without_engram)
        except click.ClickException as error:
            _write_junit(junit_path, [], expect, [*problems, RunProblem("engram", error.format_message())])
            raise
        if not binaries:
            skipped = [
                RunProblem(s.id, "no engram binary (--skip-without-engram)", str(s.path), "skipped")
                for s in scenarios
            ]
            _write_junit(junit_path, [], expect, [*problems, *skipped])
            console.print(f"skipped {len(scenarios)} scenario(s): no engram binary (--skip-without-engram)")
            if problems:
                raise SystemExit(1)
            return
        cloud_target = _cloud_target(cloud_mode, cloud_url, cloud_token, cloud_control_token, cloud_ca)
        cloud_mode = cloud_mode or "process"
        if cloud_target is not None:
            jobs = 1  # one cloud, one journal: scenarios take turns
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
                f"{result.verdict(expect):>7} {result.scenario.id} on engram {result.version} "
                f"in {result.timings.get('total', 0):.1f}s",
                markup=False,
            )

    results: list[ScenarioResult] = []
    for binary in binaries:
        console.print(
            f"running {len(scenarios)} scenario(s) against {binary} "
            f"({cloud_target.url if cloud_target else cloud_mode} cloud, {jobs} at a time)"
        )
        results += run_many(
            scenarios,
            binary,
            cloud_mode=cast(CloudMode, cloud_mode),
            cloud_target=cloud_target,
            jobs=jobs,
            db_copy_source=db_source,
            expect=expect,
            progress=progress,
            done=done,
            keep=keep_to is not None,
            keep_dir=keep_dir,
            version_as=version_as,
        )
    for result in results:
        print_result(console, result, expect, verbose=verbose)
    console.print(summary_table(results, expect))
    if len(binaries) > 1:
        console.print(matrix_table(results, expect))
    if expect == "design":
        console.print(conformance_table(results))
    unjudged = (
        ""
        if allow_unjudged
        else unjudged_failure(
            results, expect, version_option="--engram-version-as", allow_option="--allow-unjudged"
        )
    )
    try:
        if json_path is not None:
            write_json(json_path, results, expect)
        _write_junit(junit_path, results, expect, problems, unjudged_hint=unjudged and UNJUDGED_HINT)
    except OSError as error:
        raise click.ClickException(f"{error.filename}: cannot write the report ({error.strerror})") from None
    if unjudged:
        click.echo(f"Error: {unjudged}", err=True)
    failed = [r for r in results if r.verdict(expect) != "passed"]
    if failed or problems or unjudged:
        raise SystemExit(1)


UNJUDGED_HINT = "name the version under test with --engram-version-as VERSION, or pass --allow-unjudged"


def _write_junit(
    path: Path | None,
    results: list[ScenarioResult],
    expect: ExpectMode,
    problems: list[RunProblem],
    unjudged_hint: str = "",
) -> None:
    if path is not None:
        write_junit(path, results, expect, problems=problems, unjudged_hint=unjudged_hint)


def _release_version(value: str | None) -> str | None:
    if value is not None and VERSION_PATTERN.fullmatch(value.removeprefix("v")) is None:
        raise click.BadParameter(f"{value!r} is not a release version; give MAJOR.MINOR.PATCH, e.g. 1.20.0")
    return value.removeprefix("v") if value is not None else None


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
