"""engram-harness: a thin command line over the harness library."""

from __future__ import annotations

import sys
from typing import Any

import click

from harness import __version__
from harness.deployment_cli import make_deployment
from harness.engram_install import DEFAULT_VERSION, find_engram, install_engram
from harness.errors import HarnessError
from harness.run_cli import run_command, schema_command


class HarnessGroup(click.Group):
    """click's usage errors as one line (still exit 2), like every other error of the harness."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "engram-harness"
            click.echo(f"Error: {error.format_message()} (see {where} --help)", err=True)
            sys.exit(error.exit_code)
        except click.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)


@click.group(cls=HarnessGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="engram-harness")
def cli() -> None:
    """Replay engram sync scenarios against the real engram binary."""


@cli.group()
def engram() -> None:
    """Install and locate real engram binaries (one per version, side by side)."""


@engram.command("install")
@click.argument("versions", nargs=-1)
@click.option("--force", is_flag=True, help="Rebuild even when the cached binary exists.")
def engram_install(versions: tuple[str, ...], force: bool) -> None:
    """Install VERSIONS (default v1.20.0) with `go install` and print each binary's path."""
    for version in versions or (DEFAULT_VERSION,):
        try:
            path = install_engram(version, force=force)
        except HarnessError as error:
            raise click.ClickException(str(error)) from error
        click.echo(str(path))


@engram.command("path")
@click.argument("version", default=DEFAULT_VERSION)
def engram_path(version: str) -> None:
    """Print the binary used for VERSION (ENGRAM_BIN overrides); exit 1 if none is installed."""
    try:
        path = find_engram(version)
    except HarnessError as error:
        raise click.ClickException(str(error)) from error
    if path is None:
        raise click.ClickException(
            f"engram {version} is not installed; run: engram-harness engram install {version}"
        )
    click.echo(str(path))


cli.add_command(make_deployment)
cli.add_command(run_command)
cli.add_command(schema_command)


def main() -> None:
    cli()
