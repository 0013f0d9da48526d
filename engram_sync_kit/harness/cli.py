"""engram-harness: a thin command line over the harness library."""

from __future__ import annotations

import sys
from typing import Any

import click

from engram_sync_kit.engram_contract import children
from engram_sync_kit.engram_contract.one_line_cli import OneLineErrorGroup
from engram_sync_kit.engram_contract.version import __version__
from engram_sync_kit.harness.cloud.cli import cloud_group
from engram_sync_kit.harness.deployment.cli import make_deployment
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram, install_engram
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.explore.cli import explore_command
from engram_sync_kit.harness.run_cli import run_command, schema_command
from engram_sync_kit.harness.validate.cli import validate_command


class HarnessGroup(OneLineErrorGroup):
    """click's usage errors as one line (still exit 2), like every other error of the harness."""

    program = "engram-harness"
    package_error = HarnessError

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with children.stop_signals():
                return super().main(*args, **kwargs)
        except children.Stopped as stopped:
            click.echo(
                f"engram-harness: stopped by {stopped}: the engram and fake-cloud processes it started are "
                "stopped and its temporary copies removed",
                err=True,
            )
            sys.exit(stopped.exit_code)


@click.group(cls=HarnessGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="engram-harness")
def cli() -> None:
    """Replay engram sync scenarios against the real engram binary.

    \b
    Examples:
      engram-harness engram install v1.20.0
      engram-harness run --expect baseline
      engram-harness run --engram ./engram --engram-version-as 1.20.0 my-scenarios/
      engram-harness validate --db ~/.engram/engram.db --html report.html
    """


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


cli.add_command(cloud_group)
cli.add_command(make_deployment)
cli.add_command(explore_command)
cli.add_command(run_command)
cli.add_command(schema_command)
cli.add_command(validate_command)


def main() -> None:
    cli()
