"""`engram-harness validate`: a thin click command over harness.validate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.engram_contract.one_line_cli import refuse_overwriting_inputs
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, cached_binary, find_engram, install_engram
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.keep import KEEP_IN_TEMP
from engram_sync_kit.harness.validate.run import ValidateOptions, alarms, refuse_irregular_db, validate

ALARM_EXIT = 3  # the report was written and finds rows lost or duplicated, or a plan that blocks


def resolve_binary(engram_path: Path | None, version: str | None) -> Path:
    """A flag always beats the environment: --engram or --engram-version ignore ENGRAM_BIN, which only
    replaces the default version when neither is given."""
    if engram_path is not None and version:
        raise click.UsageError("--engram and --engram-version are exclusive; give one")
    if engram_path is not None:
        if not os.access(engram_path, os.X_OK) or not engram_path.is_file():
            raise click.UsageError(f"--engram {engram_path}: not an executable file")
        return engram_path
    if version:
        cached = cached_binary(version)
        return cached if cached.is_file() and os.access(cached, os.X_OK) else install_engram(version)
    return find_engram(DEFAULT_VERSION) or install_engram(DEFAULT_VERSION)


def check_writable(option: str, path: Path) -> None:
    """Before the rehearsal: an output that cannot be written is a usage error now, not after minutes
    of work. The probe opens the file for append (its content is kept) and removes it if it made it."""
    if path.is_dir():
        raise click.UsageError(f"{option} {path}: is a directory")
    if not path.parent.is_dir():
        raise click.UsageError(f"{option} {path}: no such directory {path.parent}")
    existed = path.exists()
    try:
        # O_NONBLOCK: a FIFO nobody reads is refused now (ENXIO) instead of blocking the open
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        with open(descriptor, "a", encoding="utf-8"):  # append mode seeks: a file that cannot, fails here
            pass
    except OSError as error:
        raise click.UsageError(f"{option} {path}: cannot write ({error.strerror})") from None
    if not existed:
        path.unlink(missing_ok=True)


def refuse_unreadable_db(db: Path) -> None:
    try:
        refuse_irregular_db(db)
    except HarnessError as error:
        raise click.UsageError(str(error)) from None


@click.command("validate")
@click.option(
    "--db",
    "db",
    type=click.Path(path_type=Path, exists=True),
    required=True,
    help="The engram.db to rehearse on (copied; the original is never written).",
)
@click.option(
    "--engram", "engram_path", type=click.Path(path_type=Path, dir_okay=False), help="The engram binary."
)
@click.option("--engram-version", "version", help="An engram version to install and use (default v1.20.0).")
@click.option(
    "--ticks",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="At most this many 30 s worker ticks; stops earlier when the worker goes idle.",
)
@click.option(
    "--plan",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Triage lines (engram-canary inbox claim/drop) for the what-if; default: the suggested plan.",
)
@click.option("--no-what-if", is_flag=True, help="Skip the what-if run on the second copy.")
@click.option(
    "--no-doctor",
    is_flag=True,
    help="Skip `engram doctor` before and after each run (minutes on a large file).",
)
@click.option(
    "--allowed-projects",
    default="*",
    show_default=True,
    help="The fake cloud's project allowlist, comma-separated (rehearse a server that refuses some).",
)
@click.option(
    "--aliases",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The canary alias map (read only; the what-if registers claims in a copy).",
)
@click.option("--html", "html_path", type=click.Path(path_type=Path, dir_okay=False), help="Write HTML.")
@click.option("--json", "json_path", type=click.Path(path_type=Path, dir_okay=False), help="Write JSON.")
@click.option(
    "--anonymize", is_flag=True, help="Keyed hashes for every name and path, in every output (stderr too)."
)
@click.option(
    "--anonymize-key",
    "key_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --anonymize: the key file (made, mode 600, when missing); the same key gives the same names.",
)
@click.option(
    "--keep",
    "keep_to",
    is_flag=False,
    flag_value=KEEP_IN_TEMP,
    default=None,
    metavar="[DIR]",
    help="Keep the copies, logs and backups: in DIR (created if missing), or in the system's temporary "
    "directory when DIR is left out (as `run --keep`).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def validate_command(
    db: Path,
    engram_path: Path | None,
    version: str | None,
    ticks: int,
    plan: Path | None,
    no_what_if: bool,
    no_doctor: bool,
    allowed_projects: str,
    aliases: Path | None,
    html_path: Path | None,
    json_path: Path | None,
    anonymize: bool,
    key_path: Path | None,
    keep_to: str | None,
    quiet: bool,
) -> None:
    """Rehearse an engram version on a copy of DB: lanes, refusals, canary, doctor, migrations, a what-if."""
    # the renderers and the anonymizer load only for validate, not for every engram-harness command
    from engram_sync_kit.harness.validate.anonymize import anonymized, hide_paths, new_key, read_or_create_key
    from engram_sync_kit.harness.validate.report import render_html, render_markdown

    refuse_unreadable_db(db)
    refuse_overwriting_inputs(
        {"--html": html_path, "--json": json_path},
        {"--db": db},
        {"--plan": plan, "--aliases": aliases, "--anonymize-key": key_path},
    )
    for option, path in (("--html", html_path), ("--json", json_path)):
        if path is not None:
            check_writable(option, path)
    keep = Path(keep_to) if keep_to is not None and keep_to != KEEP_IN_TEMP else None
    if keep is not None:
        try:
            keep.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise click.UsageError(f"--keep {keep}: cannot create ({error.strerror})") from None
    if key_path is not None and not anonymize:
        raise click.UsageError("--anonymize-key goes with --anonymize")
    key = new_key()
    if key_path is not None:
        if not key_path.parent.is_dir():
            raise click.UsageError(f"--anonymize-key {key_path}: no such directory {key_path.parent}")
        try:
            key = read_or_create_key(key_path)
        except (OSError, ValueError) as error:
            raise click.UsageError(f"--anonymize-key {key_path}: {error}") from None
    # Everything the tester named on the command line is a path of their machine: hidden when anonymized.
    given = [db, db.resolve(), db.parent, db.resolve().parent, plan, aliases, keep, html_path, json_path]
    paths = sorted({str(path) for path in given if path is not None and str(path) not in ("", ".", "/")})

    def said(message: str) -> str:
        return hide_paths(message, paths, key) if anonymize else message

    allowed = tuple(part.strip() for part in allowed_projects.split(",") if part.strip()) or ("*",)
    try:
        binary = resolve_binary(engram_path, version)
        options = ValidateOptions(
            db=db,
            binary=binary,
            ticks=ticks,
            plan=plan,
            what_if=not no_what_if,
            run_doctor=not no_doctor,
            allowed_projects=allowed,
            aliases=aliases,
            work_dir=keep,
            keep=keep_to is not None,
        )
        report = validate(
            options, progress=(lambda _m: None) if quiet else (lambda m: click.echo(said(m), err=True))
        )
    except (HarnessError, CanaryError) as error:
        raise click.ClickException(said(str(error))) from None
    if anonymize:
        report = anonymized(report, key, paths)
    try:
        if json_path is not None:
            json_path.write_text(
                json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
        if html_path is not None:
            html_path.write_text(render_html(report), encoding="utf-8")
    except OSError as error:
        raise click.ClickException(
            said(f"{error.filename}: cannot write the report ({error.strerror})")
        ) from None
    click.echo(render_markdown(report), nl=False)
    found = alarms(report)
    if found:
        click.echo(said(f"engram-harness validate: {'; '.join(found)}"), err=True)
        raise SystemExit(ALARM_EXIT)
