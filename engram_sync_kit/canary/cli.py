"""engram-canary: a thin command line over the canary library.

Exit codes follow the monitoring-plugin convention: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. Bad
arguments are UNKNOWN too (3, not click's usual 2, which would read as CRITICAL), with a one-line error.
"""

from __future__ import annotations

import importlib
import math
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from engram_sync_kit.canary.baseline import (
    Baseline,
    acknowledge,
    baseline_path_for,
    load_baseline,
    parse_expiry,
    record_baseline,
)
from engram_sync_kit.canary.checks import CheckResult, now_iso, run_check, unknown_result
from engram_sync_kit.canary.config import CanaryConfig, WatchSettings
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import Status
from engram_sync_kit.canary.report import render_json, render_text, write_textfile
from engram_sync_kit.canary.settings import (
    CONFIG_ENV,
    chosen_config_file,
    config_file_option,
    db_option,
    default_config_hint,
    deprecated_option,
    effective_config,
    render_settings,
    resolve_db,
    settings_with_sources,
)
from engram_sync_kit.canary.text import printable
from engram_sync_kit.engram_contract.one_line_cli import OneLineErrorGroup
from engram_sync_kit.engram_contract.version import __version__

PROG = "engram-canary"
# Commands whose modules a one-shot `check` never needs (triage, repair): imported when named or listed.
LAZY_COMMANDS = {
    "cleanup-phantoms": ("engram_sync_kit.canary.inbox.cli", "cleanup_phantoms_command"),
    "inbox": ("engram_sync_kit.canary.inbox.cli", "inbox"),
    "repair": ("engram_sync_kit.canary.inbox.cli", "repair_command"),
}


class CanaryGroup(OneLineErrorGroup):
    """click's usage errors (exit 2) and canary errors as one line and exit 3 (UNKNOWN)."""

    program = PROG
    error_exit = int(Status.UNKNOWN)
    package_error = CanaryError

    def usage_line(self, where: str, message: str) -> str:
        return f"{where}: error: {message} (see {where} --help)"

    def error_line(self, message: str) -> str:
        return f"{PROG}: error: {message}"

    def abort_line(self) -> str:
        return f"{PROG}: aborted"

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # A page that turns out damaged mid-read (every read path hands its open errors over already).
        try:
            return super().main(*args, **kwargs)
        except sqlite3.DatabaseError as error:
            self._exit(self.error_line(f"engram's database cannot be read ({error})"), 1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module, name = LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), name)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


def _a_number(_context: click.Context, _parameter: click.Parameter, value: float) -> float:
    if math.isnan(value):  # click's FloatRange lets NaN through every bound
        raise click.BadParameter("nan is not a number of seconds")
    return value


def _print_version(context: click.Context, _parameter: click.Parameter, value: bool) -> None:
    """click's version line (click's own version_option would read the installed metadata)."""
    if not value or context.resilient_parsing:
        return

    click.echo(f"{PROG}, version {__version__}")
    context.exit()


@click.group(cls=CanaryGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar=CONFIG_ENV,
    help=default_config_hint(),
)
def cli(config_file: Path | None) -> None:
    """Watch engram's sync target space and triage its virtual inbox.

    \b
    Examples:
      engram-canary check                                  # exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN
      engram-canary inbox list
      engram-canary inbox claim --project KEY --as ENROLLED --apply
      engram-canary install-systemd --print
    """


def baseline_option(command: str) -> Callable[[Any], Any]:
    return deprecated_option(
        "--baseline", command, "baseline_file", type=click.Path(path_type=Path, dir_okay=False)
    )


def _load(
    config_file: Path | None, baseline_file: Path | None, **typed: Any
) -> tuple[CanaryConfig, Path, Path]:
    config, config_path = effective_config(config_file, {"baseline": baseline_file, **typed})
    return config, config_path, config.baseline or baseline_path_for(config_path)


@cli.command("config")
def config_command() -> None:
    """Print the settings in effect and where each came from (config file line, environment, default)."""
    click.echo(render_settings(*settings_with_sources()))


@cli.command()
@db_option
@config_file_option("check")
@baseline_option("check")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: the status line and one line per finding; json: the whole report (docs/canary.md).",
)
@click.option(
    "--no-baseline", is_flag=True, help="Report every foreign target as new, ignoring the baseline."
)
@click.option(
    "--textfile-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write this database's engram_canary_<id>.prom here (node_exporter textfile collector), atomically.",
)
@click.option(
    "--full", is_flag=True, help="Read every inbox row again instead of the cursor in the canary's state dir."
)
@deprecated_option("--key-map", "check", "key_map", type=click.Path(path_type=Path, dir_okay=False))
def check(
    db: Path | None,
    config_file: Path | None,
    baseline_file: Path | None,
    output_format: str,
    no_baseline: bool,
    textfile_dir: Path | None,
    full: bool,
    key_map: Path | None,
) -> None:
    """One-shot check, for cron and systemd timers. Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
    config = CanaryConfig()
    db_path = resolve_db(db, CanaryConfig())
    try:
        config, _, baseline_path = _load(
            config_file, baseline_file, key_map=key_map, textfile_dir=textfile_dir
        )
        db_path = resolve_db(db, config)
        textfile_dir = config.textfile_dir
        baseline: Baseline | None = None if no_baseline else load_baseline(baseline_path)
        result = run_check(db_path, config, baseline, use_cursor=not full)
    except CanaryError as error:
        result = unknown_result(db_path, str(error))
    if textfile_dir is not None:
        try:
            write_textfile(result, textfile_dir, config, chosen_config_file(config_file))
        except CanaryError as error:
            click.echo(f"{PROG}: error: {error}", err=True)
            result = CheckResult.model_validate(
                {**result.model_dump(by_alias=True), "status": Status.UNKNOWN.label, "error": str(error)}
            )
    click.echo(render_json(result) if output_format == "json" else render_text(result, config))
    sys.exit(int(result.exit_status))


@cli.command("baseline")
@db_option
@config_file_option("baseline")
@baseline_option("baseline")
@click.option("--reason", help="Why these findings are acceptable for now (shown next to each of them).")
@click.option("--expires", help="When the acknowledgements lapse: 12h, 30d, 2w, a date or an ISO time.")
def baseline_command(
    db: Path | None,
    config_file: Path | None,
    baseline_file: Path | None,
    reason: str | None,
    expires: str | None,
) -> None:
    """Acknowledge every current finding at its current size; it alarms again when it grows or expires."""
    config, _, baseline_path = _load(config_file, baseline_file)
    db_path = resolve_db(db, config)
    result = run_check(db_path, config, None)
    if result.error is not None:
        raise CanaryError(result.error)
    acknowledged_at = now_iso()
    until = parse_expiry(expires, datetime.now(UTC)) if expires is not None else None
    acknowledgements = acknowledge(result.findings, acknowledged_at, reason=reason, expires=until)
    record_baseline(baseline_path, db_path, acknowledgements, acknowledged_at)
    click.echo(f"acknowledged {len(acknowledgements)} findings for {db_path} in {baseline_path}")
    for ack in acknowledgements:
        about = " ".join(part for part in (ack.target_key, ack.key) if part)
        click.echo(printable(f"  {ack.check} {about} ({ack.size} rows)"))


@cli.command("watch")
@db_option
@config_file_option("watch")
@baseline_option("watch")
@click.option("--no-baseline", is_flag=True, help="Alert on every foreign target, ignoring the baseline.")
@deprecated_option("--poll", "watch", is_flag=True)
@deprecated_option("--poll-interval", "watch", type=click.FloatRange(min=0.01))
@deprecated_option("--debounce-ms", "watch", type=click.FloatRange(min=0))
@deprecated_option("--full-every", "watch", type=click.FloatRange(min=0.1))
@click.option(
    "--exec",
    "exec_command",
    help="Shell command run for each alert (line on stdin, ENGRAM_CANARY_*); else config watch.exec.",
)
@click.option(
    "--ping-url",
    help="Healthchecks-style URL, pinged as URL/<exit status> on each full check; else config watch.ping_url.",
)
@click.option("--verbose", "-v", is_flag=True, help="Also log every confirmed commit and full check.")
def watch_command(
    db: Path | None,
    config_file: Path | None,
    baseline_file: Path | None,
    no_baseline: bool,
    poll: bool,
    poll_interval: float | None,
    debounce_ms: float | None,
    full_every: float | None,
    exec_command: str | None,
    ping_url: str | None,
    verbose: bool,
) -> None:
    """Real-time watch: one stderr line per foreign target when it appears and when it goes away."""
    # Imported here: watchdog and httpx cost a one-shot `check` about 0.1 s of start-up.
    from engram_sync_kit.canary.watch import WatchOptions, watch

    config, _, baseline_path = _load(
        config_file,
        baseline_file,
        **{"watch.exec": exec_command, "watch.ping_url": ping_url, "watch.poll": poll or None},
    )
    watch_settings = _watch_settings(
        config.watch,
        {"--poll-interval": poll_interval, "--debounce-ms": debounce_ms, "--full-every": full_every},
    )
    config = config.model_copy(update={"watch": watch_settings})
    ping_url = watch_settings.ping_url
    if ping_url is not None and not ping_url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{ping_url!r} is not an http(s) URL", param_hint="--ping-url")
    options = WatchOptions(
        db_path=resolve_db(db, config),
        config=config,
        baseline=None if no_baseline else load_baseline(baseline_path),
        poll=watch_settings.poll,
        exec_command=watch_settings.exec,
        ping_url=ping_url,
        verbose=verbose,
    )
    sys.exit(watch(options))


_WATCH_FIELDS = {
    "--poll-interval": "poll_interval_seconds",
    "--debounce-ms": "debounce_ms",
    "--full-every": "full_recheck_seconds",
}


def _watch_settings(settings: WatchSettings, options: dict[str, float | None]) -> WatchSettings:
    """SETTINGS with the given options applied, validated by the same model as the config file."""
    overrides = {_WATCH_FIELDS[option]: value for option, value in options.items() if value is not None}
    try:
        return WatchSettings.model_validate(settings.model_dump() | overrides)
    except ValidationError as error:
        problem = error.errors()[0]
        option = next(option for option, name in _WATCH_FIELDS.items() if name == problem["loc"][0])
        raise click.BadParameter(f"{options[option]:g}: {problem['msg']}", param_hint=f"'{option}'") from None


@cli.command("install-systemd")
@db_option
@config_file_option("install-systemd")
@click.option("--system", is_flag=True, help="System units in /etc/systemd/system (default: user units).")
@click.option("--user", "run_as", help="With --system: the account the services run as.")
@click.option("--print", "print_only", is_flag=True, help="Print the units instead of writing them.")
@click.option(
    "--unit-dir", type=click.Path(path_type=Path, file_okay=False), help="Where to write (default per mode)."
)
@deprecated_option("--textfile-dir", "install-systemd", type=click.Path(path_type=Path, file_okay=False))
@click.option("--on-calendar", default="*:0/15", show_default=True, help="When the backstop check runs.")
@deprecated_option("--exec", "install-systemd", "exec_command")
@deprecated_option("--ping-url", "install-systemd")
def install_systemd(
    db: Path | None,
    config_file: Path | None,
    system: bool,
    run_as: str | None,
    print_only: bool,
    unit_dir: Path | None,
    textfile_dir: Path | None,
    on_calendar: str,
    exec_command: str | None,
    ping_url: str | None,
) -> None:
    """Write (or --print) a hardened watcher service and a timer running `check` as a backstop."""
    # Loaded by this command alone, not on every cron-run check.
    from engram_sync_kit.canary.systemd import (
        UnitOptions,
        check_database_file,
        default_executable,
        default_unit_dir,
        enable_hint,
        prepare_state_dir,
        render_units,
        user_state_dir,
        write_units,
    )

    config, config_path = effective_config(
        config_file, {"textfile_dir": textfile_dir, "watch.exec": exec_command, "watch.ping_url": ping_url}
    )
    named_config = config_file or chosen_config_file()
    options = UnitOptions(
        executable=default_executable(),
        db_path=resolve_db(db, config).resolve(),
        config_path=config_path.resolve() if named_config is not None else None,
        textfile_dir=config.textfile_dir.resolve() if config.textfile_dir is not None else None,
        on_calendar=on_calendar,
        system=system,
        user=run_as,
        exec_command=config.watch.exec,
        ping_url=config.watch.ping_url,
        state_dir=None if system else user_state_dir(),
    )
    units = render_units(options)  # refuses a value that would add a unit line, first
    check_database_file(options.db_path)
    if print_only:
        for name, text in units.items():
            click.echo(f"# {name}\n{text}")
        return
    prepare_state_dir(options)
    for path in write_units(units, unit_dir or default_unit_dir(system)):
        click.echo(f"wrote {path}")
    click.echo(f"enable with: {enable_hint(system)}")


@cli.command("reconcile")
@db_option
@config_file_option("reconcile")
@click.option(
    "--cloud-url", help="The cloud's base URL (default: $ENGRAM_CLOUD_SERVER, else cloud.json's server_url)."
)
@click.option(
    "--cloud-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the bearer token (default: $ENGRAM_CLOUD_TOKEN, else cloud.json's token).",
)
@click.option(
    "--cloud-ca",
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM CA bundle to trust (default: $SSL_CERT_FILE, else the system's).",
)
@click.option("--since", "since_text", help="Only rows acked in this window: 24h, 7d, 90m or an ISO time.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json", "prometheus"]),
    default="text",
    show_default=True,
    help="text: the status line and the lost rows; json: the whole report; prometheus: the metrics.",
)
@click.option(
    "--textfile-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write this database's engram_canary_reconcile_<id>.prom here (node_exporter textfile collector), atomically.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=3600),
    callback=_a_number,
    default=300.0,
    show_default=True,
    help="Seconds for the whole cloud read: every connection, TLS handshake, answer and page.",
)
def reconcile_command(
    db: Path | None,
    config_file: Path | None,
    cloud_url: str | None,
    cloud_token_file: Path | None,
    cloud_ca: Path | None,
    since_text: str | None,
    output_format: str,
    textfile_dir: Path | None,
    timeout: float,
) -> None:
    """Prove delivery: match acked local rows to what the cloud holds (GET routes only). Exit codes as check."""
    # httpx and the cloud client load only for reconcile, not on every cron-run check.
    from engram_sync_kit.canary.reconcile import run_reconcile_command

    config = CanaryConfig()
    db_path = resolve_db(db, config)
    config_error: str | None = None
    try:
        config, _ = effective_config(config_file)
        db_path = resolve_db(db, config)
    except CanaryError as error:
        config_error = str(error)
    text, status = run_reconcile_command(
        db_path,
        cloud_url,
        cloud_token_file,
        cloud_ca,
        since_text,
        output_format,
        textfile_dir,
        timeout,
        config_error,
        config.thresholds.stall_after_seconds,
    )
    click.echo(text)
    sys.exit(status)


def main() -> None:
    cli()
