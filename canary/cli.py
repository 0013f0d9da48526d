"""engram-canary: a thin command line over the canary library."""

from __future__ import annotations

import click

from canary import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="engram-canary")
def cli() -> None:
    """Watch engram's sync target space and triage its virtual inbox."""


def main() -> None:
    cli()
