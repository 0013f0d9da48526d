"""engram-fake-cloud: a thin command line over the fake cloud library."""

from __future__ import annotations

import click

from fake_cloud import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="engram-fake-cloud")
def cli() -> None:
    """A recording, fault-injecting stand-in for engram's self-hosted cloud."""


def main() -> None:
    cli()
