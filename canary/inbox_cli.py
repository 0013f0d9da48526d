"""`engram-canary inbox list|claim|drop` and `engram-canary cleanup-phantoms`: thin click commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from canary.aliases import check_alias_free, load_aliases
from canary.db import default_db_path, discover_schema, open_read_only, read_transaction
from canary.derive import AliasMap
from canary.inbox import InboxSnapshot, read_inbox, render_text, summarize
from canary.triage import (
    CleanupPlanner,
    InboxPlanner,
    Plan,
    Selection,
    apply,
    plan_claim,
    plan_cleanup,
    plan_drop,
)

DB_HELP = "engram database (default: $ENGRAM_DATA_DIR/engram.db, else ~/.engram/engram.db)"
ALIASES_HELP = "alias map YAML (default: $XDG_CONFIG_HOME/engram-canary/aliases.yaml)"
# Measured (bench/results/inbox.json): about 2,000 rows fit in engram v1.20's ~85 ms busy-retry budget.
LARGE_SELECTION_ROWS = 2000


def _db_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--db", "db", type=click.Path(path_type=Path, dir_okay=False), help=DB_HELP)(function)


def _aliases_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--aliases", "aliases_path", type=click.Path(path_type=Path, dir_okay=False), help=ALIASES_HELP
    )(function)


def _write_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option(
        "--backup-dir",
        type=click.Path(path_type=Path, file_okay=False),
        help="where --apply writes its backup (default: engram-canary-backups/ next to the database)",
    )(function)
    return click.option("--apply", "do_apply", is_flag=True, help="make the changes (default: dry run)")(
        function
    )


def _snapshot(db: Path, aliases: AliasMap) -> InboxSnapshot:
    connection = open_read_only(db)
    try:
        return read_inbox(connection, discover_schema(connection, db), aliases)
    finally:
        connection.close()


@click.group("inbox")
def inbox() -> None:
    """The virtual inbox: legacy-lane rows of projects that are not enrolled, which engram never delivers."""


@inbox.command("list")
@_db_option
@_aliases_option
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def list_command(db: Path | None, aliases_path: Path | None, output_format: str) -> None:
    """Count, oldest age and entities per inbox key; unsorted broken down by cwd; rows without a project."""
    aliases, _ = load_aliases(aliases_path)
    snapshot = _snapshot(db or default_db_path(), aliases)
    summaries = summarize(snapshot, db=db, aliases=aliases_path)
    if output_format == "json":
        # Rows without a project are listed last under the reserved key "(no project)" (never claimable).
        listed = [*summaries, *([snapshot.unattributed] if snapshot.unattributed is not None else [])]
        click.echo(json.dumps([summary.to_json() for summary in listed], indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(summaries, snapshot.unattributed))


def _run(
    db: Path | None,
    aliases_path: Path | None,
    build: Callable[[InboxSnapshot], Plan],
    *,
    do_apply: bool,
    backup_dir: Path | None,
    headline: Callable[[Plan], str],
) -> None:
    database = db or default_db_path()
    aliases, resolved_aliases_path = load_aliases(aliases_path)
    plan = build(_snapshot(database, aliases))
    if plan.alias is not None:
        section, alias, project = plan.alias
        check_alias_free(aliases, resolved_aliases_path, section, alias, project)
    if len(plan.acks) > LARGE_SELECTION_ROWS:
        click.echo(
            f"note: {len(plan.acks)} rows: the write lock may outlast engram's ~85 ms busy retry, so an engram "
            "write at that moment could fail; stop engram serve/mcp first or narrow the selection with --cwd",
            err=True,
        )
    if not do_apply:
        click.echo(f"dry run: {headline(plan)}; nothing was written")
        for line in plan.describe():
            click.echo(f"  {line}")
        click.echo("run again with --apply to make these changes (a backup is taken first)")
        return
    result = apply(
        database, InboxPlanner(aliases, build), backup_dir=backup_dir, aliases_path=resolved_aliases_path
    )
    click.echo(f"backup: {result.backup}")
    click.echo(f"applied: {headline(result.plan)} (write lock held {result.lock_held_ms:.1f} ms)")
    for line in result.plan.describe():
        click.echo(f"  {line}")
    if result.new_seqs:
        click.echo(f"new seqs: {', '.join(str(seq) for seq in result.new_seqs)}")
    if result.plan.alias is not None:
        section, alias, project = result.plan.alias
        state = "registered" if result.alias_registered else "already present"
        click.echo(f"alias {state}: {section} {alias!r} -> {project!r} in {resolved_aliases_path}")


@inbox.command("claim")
@click.option("--project", "key", required=True, help="the inbox key to claim (see inbox list)")
@click.option("--as", "as_project", help="the enrolled project that receives the rows; registers the alias")
@click.option("--cwd", help="only rows whose working directory is exactly this path")
@_db_option
@_aliases_option
@_write_options
def claim_command(
    key: str,
    as_project: str | None,
    cwd: str | None,
    db: Path | None,
    aliases_path: Path | None,
    backup_dir: Path | None,
    do_apply: bool,
) -> None:
    """Copy an inbox key's rows into the legacy lane of an enrolled project, then ack the originals."""
    selection = Selection(key=key, cwd=cwd)
    _run(
        db,
        aliases_path,
        lambda snapshot: plan_claim(snapshot, selection, as_project),
        do_apply=do_apply,
        backup_dir=backup_dir,
        headline=lambda plan: (
            f"claim {len(plan.acks)} rows of {selection.describe()} into enrolled project {plan.project!r}"
        ),
    )


@inbox.command("drop")
@click.option("--project", "key", required=True, help="the inbox key to drop (see inbox list)")
@click.option("--noise", is_flag=True, help="only the telemetry noise: session and prompt rows")
@click.option("--cwd", help="only rows whose working directory is exactly this path")
@_db_option
@_aliases_option
@_write_options
def drop_command(
    key: str,
    noise: bool,
    cwd: str | None,
    db: Path | None,
    aliases_path: Path | None,
    backup_dir: Path | None,
    do_apply: bool,
) -> None:
    """Ack an inbox key's rows as discarded: never delivered, never deleted."""
    selection = Selection(key=key, cwd=cwd, telemetry_only=noise)
    _run(
        db,
        aliases_path,
        lambda snapshot: plan_drop(snapshot, selection),
        do_apply=do_apply,
        backup_dir=backup_dir,
        headline=lambda plan: f"drop {len(plan.acks)} rows of {selection.describe()}",
    )


@click.command("cleanup-phantoms")
@_db_option
@click.option("--keep", multiple=True, help="a further sync target key to keep (repeatable)")
@_write_options
def cleanup_phantoms_command(
    db: Path | None, keep: tuple[str, ...], backup_dir: Path | None, do_apply: bool
) -> None:
    """Delete sync_state rows outside the allowed targets that hold 0 unacked rows (sync_mutations untouched)."""
    database = db or default_db_path()
    connection = open_read_only(database)
    try:
        schema = discover_schema(connection, database)
        with read_transaction(connection):
            plan = plan_cleanup(connection, schema, keep)
    finally:
        connection.close()
    headline = f"delete {len(plan.phantoms)} phantom sync_state rows"
    if not do_apply or plan.is_empty:
        prefix = "dry run" if do_apply is False else "nothing to do"
        click.echo(f"{prefix}: {headline}; nothing was written")
        for line in plan.describe():
            click.echo(f"  {line}")
        if not plan.is_empty:
            click.echo("run again with --apply to make these changes (a backup is taken first)")
        return
    result = apply(database, CleanupPlanner(keep), backup_dir=backup_dir)
    click.echo(f"backup: {result.backup}")
    click.echo(
        f"applied: delete {len(result.plan.phantoms)} phantom sync_state rows "
        f"(write lock held {result.lock_held_ms:.1f} ms)"
    )
    for line in result.plan.describe():
        click.echo(f"  {line}")
