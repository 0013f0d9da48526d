"""`engram-harness cloud image`: build (or find) the fake cloud's container image ahead of time."""

from __future__ import annotations

import click

from engram_sync_kit.harness.cloud.image import ensure_image


def show_progress(line: str) -> None:
    click.echo(f"fake cloud image: {line}", err=True)


@click.group("cloud")
def cloud_group() -> None:
    """The fake cloud the scenarios run against."""


@cloud_group.command("image")
@click.option("--base-image", help="The base image (default: ENGRAM_KIT_BASE_IMAGE or the local Debian one).")
def image_command(base_image: str | None) -> None:
    """Find or build the fake cloud image for this checkout and print its name (progress on stderr)."""
    click.echo(ensure_image(show_progress, base_image=base_image))
