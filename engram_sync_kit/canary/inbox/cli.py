"""`engram-canary inbox list|claim|drop` and `engram-canary cleanup-phantoms`: thin click commands."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.inbox.aliases import AliasError, check_alias_free, load_aliases
from engram_sync_kit.canary.inbox.key_map import load_key_map
from engram_sync_kit.canary.inbox.render import render_memories, render_text, undecodable_note, waiting_memory
from engram_sync_kit.canary.inbox.selection import InboxSnapshot, export_keys, read_inbox, summarize
from engram_sync_kit.canary.settings import (
    chosen_config_file,
    db_option,
    deprecated_option,
    effective_config,
    resolve_db,
)
from engram_sync_kit.canary.text import printable
from engram_sync_kit.canary.triage.plan import (
    CleanupPlanner,
    InboxPlanner,
    LaneRowsPlanner,
    Plan,
    Planner,
    RowSelection,
    Selection,
    TriageError,
    apply,
    matching_rows,
    parse_seqs,
    plan_claim,
    plan_cleanup,
    plan_drop,
    resolve_cwd,
    with_referenced_sessions,
)
from engram_sync_kit.canary.triage.repair import RepairPlanner, plan_repair

# Measured (bench/results/inbox.json): about 2,000 rows fit in engram v1.20's ~85 ms busy-retry budget.
LARGE_SELECTION_ROWS = 2000
INBOX_SCHEMA = "engram-canary/inbox/v1"
SHOW_SCHEMA = "engram-canary/inbox-show/v1"


def _aliases_option(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The old --aliases; the alias map is config inbox.aliases (read by `_aliases_path`)."""
    return deprecated_option(
        "--aliases", command, "aliases_path", type=click.Path(path_type=Path, dir_okay=False)
    )


def _aliases_path(typed: Path | None) -> Path | None:
    config, _ = effective_config(None, {"inbox.aliases": typed})
    return config.inbox.aliases


def _write_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--apply, and the old --backup-dir and --keep-backups (now config backups.dir and backups.keep)."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        function = deprecated_option("--keep-backups", command, type=click.IntRange(min=1))(function)
        function = deprecated_option(
            "--backup-dir", command, type=click.Path(path_type=Path, file_okay=False)
        )(function)
        return click.option("--apply", "do_apply", is_flag=True, help="make the changes (default: dry run)")(
            function
        )

    return decorate


def _backups(backup_dir: Path | None, keep_backups: int | None) -> tuple[Path | None, int]:
    config, _ = effective_config(None, {"backups.dir": backup_dir, "backups.keep": keep_backups})
    return config.backups.dir, config.backups.keep


def _snapshot(db: Path, aliases: AliasMap) -> InboxSnapshot:
    with EngramDb.open(db) as engram:
        return read_inbox(engram, _with_key_map(aliases))


def _preview(db: Path, aliases: AliasMap, build: Callable[[InboxSnapshot], Plan]) -> Plan:
    """The plan as a dry run shows it: a claim's with the sessions its memories reference."""
    with EngramDb.open(db) as engram:
        plan = build(read_inbox(engram, _with_key_map(aliases)))
        with engram.read_transaction():
            return with_referenced_sessions(engram, plan)


@click.group("inbox")
@deprecated_option("--key-map", "inbox", "key_map_path", type=click.Path(path_type=Path, dir_okay=False))
@click.pass_context
def inbox(context: click.Context, key_map_path: Path | None) -> None:
    """The virtual inbox: legacy-lane rows of projects that are not enrolled, which engram never delivers.

    On a copied database, config key_map (or ENGRAM_CANARY_KEY_MAP) names the `inbox export-keys` output of
    the database's own machine."""
    if context.resilient_parsing:
        return
    key_map = effective_config(None, {"key_map": key_map_path})[0].key_map
    context.obj = load_key_map(key_map) if key_map is not None else {}


def _with_key_map(aliases: AliasMap) -> AliasMap:
    context = click.get_current_context(silent=True)
    recorded = context.find_object(dict) if context is not None else None
    return replace(aliases, recorded=recorded) if recorded else aliases


@inbox.command("export-keys")
@db_option
def export_keys_command(db: Path | None) -> None:
    """Print this machine's Stage A key for every session cwd, for --key-map on a copy of the database."""
    database = resolve_db(db)
    with EngramDb.open(database) as engram:
        document = export_keys(engram)
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


@inbox.command("list")
@db_option
@_aliases_option("list")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table to read; json: the same rows for a script (docs/inbox.md).",
)
def list_command(db: Path | None, aliases_path: Path | None, output_format: str) -> None:
    """Count, oldest age and entities per inbox key; unsorted broken down by cwd; rows without a project."""
    aliases_path = _aliases_path(aliases_path)
    aliases, _ = load_aliases(aliases_path)
    snapshot = _snapshot(resolve_db(db), aliases)
    summaries = summarize(snapshot, db=db, config=chosen_config_file())
    if output_format == "json":
        # Rows without a project are listed last under the reserved key "(no project)" (never claimable).
        listed = [*summaries, *([snapshot.unattributed] if snapshot.unattributed is not None else [])]
        # A list, as before; each entry names its schema (as `check --format json` does).
        entries = [{"schema": INBOX_SCHEMA, **summary.to_json()} for summary in listed]
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(summaries, snapshot.unattributed))
    _note_undecodable(snapshot, output_format)


def _note_undecodable(snapshot: InboxSnapshot, output_format: str) -> None:
    """Rows left out for their bytes are named last: on stdout with text, on stderr with JSON (the document
    stays what it was)."""
    note = undecodable_note(snapshot.undecodable)
    if note is not None:
        click.echo(note, err=output_format == "json")


def _load_aliases_for_write(aliases_path: Path | None) -> tuple[AliasMap, Path]:
    """The alias map; a named file that does not exist yet is created by the claim that registers into it."""
    if aliases_path is not None and not aliases_path.exists():
        return _with_key_map(AliasMap()), aliases_path
    aliases, path = load_aliases(aliases_path)
    return _with_key_map(aliases), path


def _require_writable(path: Path) -> None:
    """The alias is written after the database commit, so its file must be writable before anything is."""
    if path.exists():
        writable = path.is_file() and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    else:
        nearest = next((parent for parent in path.parents if parent.exists()), None)
        writable = nearest is not None and nearest.is_dir() and os.access(nearest, os.W_OK)
    if not writable:
        raise TriageError(
            f"{path}: the alias file cannot be written there; nothing was changed (set inbox.aliases in the config file)"
        )


def _run(
    db: Path | None,
    aliases_path: Path | None,
    build: Callable[[InboxSnapshot], Plan],
    *,
    do_apply: bool,
    backup_dir: Path | None,
    keep_backups: int | None,
    headline: Callable[[Plan], str],
) -> None:
    database = resolve_db(db)
    aliases, resolved_aliases_path = _load_aliases_for_write(_aliases_path(aliases_path))
    plan = _preview(database, aliases, build)
    if plan.alias is not None:
        section, alias, project = plan.alias
        check_alias_free(aliases, resolved_aliases_path, section, alias, project)
        if do_apply:
            _require_writable(resolved_aliases_path)
    _report(
        database,
        plan,
        InboxPlanner(aliases, build),
        do_apply=do_apply,
        backup_dir=backup_dir,
        keep_backups=keep_backups,
        headline=headline,
        aliases_path=resolved_aliases_path,
    )


def _report(
    database: Path,
    plan: Plan,
    planner: Planner,
    *,
    do_apply: bool,
    backup_dir: Path | None,
    keep_backups: int | None,
    headline: Callable[[Plan], str],
    aliases_path: Path | None = None,
) -> None:
    backup_dir, keep_backups = _backups(backup_dir, keep_backups)
    if len(plan.acks) > LARGE_SELECTION_ROWS:
        click.echo(
            f"note: {len(plan.acks)} rows: the write lock may outlast engram's ~85 ms busy retry, so an engram "
            "write at that moment could fail; stop engram serve/mcp first or narrow the selection with --cwd",
            err=True,
        )
    if not do_apply:
        click.echo(printable(f"dry run: {headline(plan)}; nothing was written"))
        for line in plan.describe():
            click.echo(printable(f"  {line}"))
        click.echo("run again with --apply to make these changes (a backup is taken first)")
        return
    result = apply(
        database, planner, backup_dir=backup_dir, aliases_path=aliases_path, keep_backups=keep_backups
    )
    click.echo(f"backup: {result.backup}")
    click.echo(printable(f"applied: {headline(result.plan)} (write lock held {result.lock_held_ms:.1f} ms)"))
    for line in result.plan.describe():
        click.echo(printable(f"  {line}"))
    if result.new_seqs:
        click.echo(f"new seqs: {', '.join(str(seq) for seq in result.new_seqs)}")
    if result.pruned_backups:
        kept = f"; kept {result.series_first}, from before this series" if result.series_first else ""
        click.echo(f"pruned {len(result.pruned_backups)} old backups (backups.keep {keep_backups}){kept}")
    if result.plan.alias is not None:
        section, alias, project = result.plan.alias
        state = "registered" if result.alias_registered else "already present"
        click.echo(f"alias {state}: {section} {alias!r} -> {project!r} in {aliases_path}")


def _claim_headline(selection: Selection) -> Callable[[Plan], str]:
    def headline(plan: Plan) -> str:
        text = f"claim {len(plan.acks)} rows of {selection.describe()} into enrolled project {plan.project!r}"
        if plan.refused:
            text += f", refusing {len(plan.refused)} rows the cloud would refuse"
        return text

    return headline


@inbox.command("show")
@click.argument("key")
@click.option("--cwd", help="only rows whose working directory is exactly this path")
@db_option
@_aliases_option("show")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table to read; json: the same rows for a script (docs/inbox.md).",
)
def show_command(
    key: str, cwd: str | None, db: Path | None, aliases_path: Path | None, output_format: str
) -> None:
    """The memories waiting under KEY (type, title, date, first line), to read before a claim or drop."""
    aliases, _ = load_aliases(_aliases_path(aliases_path))
    snapshot = _snapshot(resolve_db(db), aliases)
    selection = Selection(key=key, cwd=resolve_cwd(cwd))
    rows = matching_rows(snapshot, selection)
    if not rows:
        raise TriageError(
            f"no unacked inbox rows match {selection.describe()} (see: engram-canary inbox list)"
        )
    memories = [waiting_memory(row) for row in rows if not row.is_telemetry]
    telemetry = len(rows) - len(memories)
    if output_format == "json":
        document = {
            "schema": SHOW_SCHEMA,
            "key": key,
            "cwd": selection.cwd,
            "telemetry": telemetry,
            "memories": [memory.to_json() for memory in memories],
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        click.echo(render_memories(key, memories, telemetry))
    _note_undecodable(snapshot, output_format)


@inbox.command("claim")
@click.option("--project", "key", required=True, help="the inbox key to claim (see inbox list)")
@click.option("--as", "as_project", help="the enrolled project that receives the rows; registers the alias")
@click.option("--cwd", help="only rows whose working directory is this path (a relative path is resolved)")
@click.option("--all-cwds", is_flag=True, help="claim 'unsorted' rows of every directory at once")
@click.option(
    "--with-telemetry", is_flag=True, help="copy session and prompt rows too (default: memories only)"
)
@click.option(
    "--repair", is_flag=True, help="copy refused rows with a value derived from engram's tables (see dry run)"
)
@db_option
@_aliases_option("claim")
@_write_options("claim")
def claim_command(
    key: str,
    as_project: str | None,
    cwd: str | None,
    all_cwds: bool,
    with_telemetry: bool,
    repair: bool,
    db: Path | None,
    aliases_path: Path | None,
    backup_dir: Path | None,
    keep_backups: int | None,
    do_apply: bool,
) -> None:
    """Copy an inbox key's memories into the legacy lane of an enrolled project, then ack the originals.

    Every copy is checked against the cloud's push contract first; a row the cloud would refuse is never
    inserted (the dry run says why and what to do)."""
    selection = Selection(key=key, cwd=resolve_cwd(cwd), memories_only=not with_telemetry, all_cwds=all_cwds)
    _run(
        db,
        aliases_path,
        lambda snapshot: plan_claim(snapshot, selection, as_project, repair=repair),
        do_apply=do_apply,
        backup_dir=backup_dir,
        keep_backups=keep_backups,
        headline=_claim_headline(selection),
    )


@inbox.command("drop")
@click.option("--project", "key", help="the inbox key to drop (see inbox list)")
@click.option("--noise", is_flag=True, help="only the telemetry noise: session and prompt rows")
@click.option("--cwd", help="only rows whose working directory is this path (a relative path is resolved)")
@click.option(
    "--unattributed", is_flag=True, help="the legacy-lane rows without a project (the cloud refuses them)"
)
@click.option("--seq", "seqs", help="exact rows N[,N...] that engram cannot deliver (inbox or refused rows)")
@click.option(
    "--all-cwds", is_flag=True, help="drop the memories of 'unsorted' rows of every directory at once"
)
@db_option
@_aliases_option("drop")
@_write_options("drop")
def drop_command(
    key: str | None,
    noise: bool,
    cwd: str | None,
    unattributed: bool,
    seqs: str | None,
    all_cwds: bool,
    db: Path | None,
    aliases_path: Path | None,
    backup_dir: Path | None,
    keep_backups: int | None,
    do_apply: bool,
) -> None:
    """Ack rows as discarded: never delivered, never deleted. Select by --project, --unattributed or --seq."""
    chosen = [
        name
        for name, given in (("--project", key), ("--unattributed", unattributed), ("--seq", seqs))
        if given
    ]
    if len(chosen) != 1:
        raise TriageError("drop needs exactly one of --project KEY, --unattributed or --seq N[,N...]")
    if key is None and (noise or cwd is not None or all_cwds):
        raise TriageError(
            "--noise, --cwd and --all-cwds narrow a --project selection; they do not apply to " + chosen[0]
        )
    if key is not None:
        selection = Selection(key=key, cwd=resolve_cwd(cwd), telemetry_only=noise, all_cwds=all_cwds)
        _run(
            db,
            aliases_path,
            lambda snapshot: plan_drop(snapshot, selection),
            do_apply=do_apply,
            backup_dir=backup_dir,
            keep_backups=keep_backups,
            headline=lambda plan: f"drop {len(plan.acks)} rows of {selection.describe()}",
        )
        return
    rows = RowSelection(seqs=parse_seqs(seqs) if seqs is not None else (), unattributed=unattributed)
    database = resolve_db(db)
    planner = LaneRowsPlanner(rows)
    with EngramDb.open(database) as engram, engram.read_transaction():
        plan = planner.plan(engram)
    _report(
        database,
        plan,
        planner,
        do_apply=do_apply,
        backup_dir=backup_dir,
        keep_backups=keep_backups,
        headline=lambda plan: f"drop {len(plan.acks)} {rows.describe()}",
    )


@click.command("cleanup-phantoms")
@db_option
@deprecated_option("--keep", "cleanup-phantoms", multiple=True)
@_write_options("cleanup-phantoms")
def cleanup_phantoms_command(
    db: Path | None, keep: tuple[str, ...], backup_dir: Path | None, keep_backups: int | None, do_apply: bool
) -> None:
    """Delete sync_state rows outside the allowed targets (config allowed_targets too) that hold 0 unacked
    rows (sync_mutations untouched)."""
    database = resolve_db(db)
    keep = (*effective_config()[0].allowed_targets, *keep)
    try:
        aliases, _ = load_aliases(None)
    except AliasError:
        aliases = AliasMap()  # the aliases only sharpen the hints; a broken file must not block cleanup
    with EngramDb.open(database) as engram, engram.read_transaction():
        plan = plan_cleanup(engram, keep, aliases)
    headline = f"delete {len(plan.phantoms)} phantom sync_state rows"
    if not do_apply or plan.is_empty:
        prefix = "dry run" if do_apply is False else "nothing to do"
        click.echo(f"{prefix}: {headline}; nothing was written")
        for line in plan.describe():
            click.echo(printable(f"  {line}"))
        if not plan.is_empty:
            click.echo("run again with --apply to make these changes (a backup is taken first)")
        return
    backup_dir, keep_backups = _backups(backup_dir, keep_backups)
    result = apply(database, CleanupPlanner(keep, aliases), backup_dir=backup_dir, keep_backups=keep_backups)
    click.echo(f"backup: {result.backup}")
    click.echo(
        f"applied: delete {len(result.plan.phantoms)} phantom sync_state rows "
        f"(write lock held {result.lock_held_ms:.1f} ms)"
    )
    for line in result.plan.describe():
        click.echo(printable(f"  {line}"))


@click.command("repair")
@db_option
@_write_options("repair")
def repair_command(
    db: Path | None, backup_dir: Path | None, keep_backups: int | None, do_apply: bool
) -> None:
    """Pending rows the cloud refuses: append a corrected copy where engram's tables know the value.

    A session without a directory, an observation without content or type, a row without a project: the
    value comes from the sessions, observations or user_prompts table, never from a guess. The original
    is acked (replaced), nothing is deleted. A value that cannot be derived is named with its drop command."""
    database = resolve_db(db)
    with EngramDb.open(database) as engram, engram.read_transaction():
        plan = plan_repair(engram)
    if plan.is_empty and not plan.refused:
        click.echo(
            "nothing to repair: every pending row passes the cloud's push contract; nothing was written"
        )
        return
    if do_apply and plan.is_empty:
        first = plan.refused[0]
        raise TriageError(
            f"nothing to repair: {len(plan.refused)} refused rows have no derivable value "
            f"(first: seq {first.row.seq}, {first.reason}; {first.remedy})"
        )
    _report(
        database,
        plan,
        RepairPlanner(),
        do_apply=do_apply,
        backup_dir=backup_dir,
        keep_backups=keep_backups,
        headline=_repair_headline,
    )


def _repair_headline(plan: Plan) -> str:
    text = f"repair {len(plan.copies)} pending rows the cloud refuses"
    if plan.refused:
        text += f" ({len(plan.refused)} more cannot be derived: drop them)"
    return text
