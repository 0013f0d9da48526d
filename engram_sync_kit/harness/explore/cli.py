"""`engram-harness explore`: a thin click command over harness.explore (exit 0 clean, 1 violation, 3 bad input)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.explore.explorer import ExploreReport, ExploreSettings, FoundViolation, explore
from engram_sync_kit.harness.explore.invariants import whose
from engram_sync_kit.harness.explore.operations import NEMESIS_KINDS

BAD_INPUT = 3


class BadInput(click.UsageError):
    exit_code = BAD_INPUT


class ExploreCommand(click.Command):
    """click's own usage errors (a bad --seed, an unknown option) exit 3 here, as the issue asks."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:
            error.exit_code = BAD_INPUT
            raise


def _nemesis(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    kinds = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [kind for kind in kinds if kind not in NEMESIS_KINDS]
    if unknown:
        raise BadInput(f"--nemesis {unknown[0]!r} is not a nemesis kind; allowed: {', '.join(NEMESIS_KINDS)}")
    return kinds


def _binary(engram_path: Path | None, version: str | None) -> Path:
    if engram_path is not None and version:
        raise BadInput("--engram and --engram-version are exclusive; give one")
    if engram_path is not None:
        if not (engram_path.is_file() and os.access(engram_path, os.X_OK)):
            raise BadInput(f"--engram {engram_path}: not an executable file")
        return engram_path
    wanted = version or DEFAULT_VERSION
    try:
        return find_engram(wanted) or install_engram(wanted)
    except HarnessError as error:
        raise BadInput(f"--engram-version {wanted}: {error}") from None


SHOWN_SEEDS = 8


def _summary(report: ExploreReport, replay: int | None) -> str:
    """One line for the run, then each kind of violation once: its shrunk scenario, and the other seeds
    that showed the same kind (a long run meets one bug in many histories; the JSON lists them all)."""
    kinds: dict[str, list[FoundViolation]] = {}
    for found in report.violations:
        kinds.setdefault(found.kind, []).append(found)
    lines = [
        f"explore: {f'replay of seed {replay}' if replay is not None else f'seed {report.seed}'}, "
        f"engram {report.engram}: {report.histories} histories, {report.steps} steps "
        f"in {report.seconds:.0f}s, {len(report.violations)} violation(s)"
        + (f" of {len(kinds)} kind(s)" if kinds else "")
    ]
    for same in kinds.values():
        found = next((one for one in same if one.scenario), same[0])
        lines.append(_violation_line(found))
        others = [one.seed for one in same if one is not found]
        if others:
            shown = ", ".join(str(seed) for seed in others[:SHOWN_SEEDS])
            more = f" and {len(others) - SHOWN_SEEDS} more" if len(others) > SHOWN_SEEDS else ""
            lines.append(f"    {len(others)} more histories showed {found.kind}: seeds {shown}{more}")
    lines.extend(f"  error: {error}" for error in report.errors)
    return "\n".join(lines)


def _violation_line(found: FoundViolation) -> str:
    where = (
        f"; scenario {found.scenario} (minimized to {found.minimized_steps} steps" if found.scenario else ""
    )
    replayed = ""
    if found.replayed is not None:
        replayed = ", replays" if found.replayed else f", does NOT replay: {found.replay_detail}"
    known = f", the class of {found.upstream}" if found.upstream else ""
    return (
        f"  {found.invariant} ({whose(found.owner)}{known}) seed {found.seed}: {found.detail}{where}{replayed}"
        + (")" if found.scenario else "")
    )


@click.command("explore", cls=ExploreCommand)
@click.option(
    "--engram", "engram_path", type=click.Path(path_type=Path, dir_okay=False), help="engram binary."
)
@click.option("--engram-version", help=f"engram version, installed when missing (default {DEFAULT_VERSION}).")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the first history (history i: seed+i)."
)
@click.option(
    "--budget", type=click.FloatRange(min=1), default=120, show_default=True, help="Seconds to explore."
)
@click.option("--nemesis", "nemesis_text", help=f"Fault kinds, comma-separated: {', '.join(NEMESIS_KINDS)}.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("explore-out"),
    show_default=True,
    help="Where minimized scenarios are written.",
)
@click.option(
    "--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), help="Write the JSON report here."
)
@click.option(
    "--replay", type=int, help="Play only the history of this seed (as printed), then shrink what it finds."
)
@click.option(
    "--steps", type=click.IntRange(1, 200), default=12, show_default=True, help="Operations per history."
)
@click.option(
    "--autosync/--no-autosync",
    default=True,
    show_default=True,
    help="Run engram serve's worker (30 s ticks): needed for I2 and I5; --no-autosync syncs by hand only.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 16),
    default=4,
    show_default=True,
    help="Replays side by side while shrinking.",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Histories played side by side (with the worker they mostly wait for its 30 s ticks).",
)
@click.option(
    "--machines",
    type=click.IntRange(1, 2),
    default=1,
    show_default=True,
    help="Engram homes per history syncing through one cloud; 2 adds machine B, pulls and I6 (convergence).",
)
@click.option("--no-shrink", is_flag=True, help="Report violations without shrinking them.")
def explore_command(
    engram_path: Path | None,
    engram_version: str | None,
    seed: int,
    budget: float,
    nemesis_text: str | None,
    out: Path,
    json_path: Path | None,
    replay: int | None,
    steps: int,
    autosync: bool,
    jobs: int,
    parallel: int,
    machines: int,
    no_shrink: bool,
) -> None:
    """Generated histories against the real engram and the fake cloud, invariants checked after every step."""
    settings = ExploreSettings(
        binary=_binary(engram_path, engram_version),
        seed=seed,
        budget=budget,
        out=out,
        nemesis=_nemesis(nemesis_text),
        autosync=autosync,
        steps=steps,
        jobs=jobs,
        parallel=parallel,
        machines=machines,
        replay=replay,
        shrink=not no_shrink,
    )
    try:  # before a long run: the scenarios go there
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BadInput(f"--out {out}: {error.strerror}") from None
    if not os.access(out, os.W_OK):
        raise BadInput(f"--out {out}: not writable")
    console = Console(stderr=True)
    click.echo(
        f"explore: replaying the history of seed {replay}" if replay is not None else f"explore: seed {seed}",
        err=True,
    )
    with Progress(
        TextColumn("[bold]explore"),
        BarColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=budget, counts="")

        def progress(report: ExploreReport, what: str) -> None:
            counts = (
                f"{report.histories} histories, {report.steps} steps, {len(report.violations)} violations"
            )
            elapsed = bar.tasks[0].elapsed or 0.0
            bar.update(task, completed=min(budget, elapsed), description=what, counts=counts)

        report = explore(settings, progress)
    click.echo(_summary(report, replay))
    if json_path is not None:
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(report.as_json(), indent=2) + "\n", encoding="utf-8")
        except OSError as error:
            raise click.ClickException(f"--json {json_path}: {error.strerror}") from None
    raise SystemExit(1 if report.violations else 0)
