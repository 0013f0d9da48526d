"""`engram-harness make-deployment`: the command over harness.deployment."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click
from pydantic import ValidationError

from engram_sync_kit.engram_contract.one_line_cli import refuse_overwriting_inputs
from engram_sync_kit.harness.deployment import DeploymentSpec, generate
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram
from engram_sync_kit.harness.errors import HarnessError


@click.command("make-deployment")
@click.option(
    "--scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply every volume; 1 is the measured deployment (~7.6k mutation rows).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same rows.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The engram.db to create; must not exist yet.",
)
@click.option(
    "--engram",
    "engram_binary",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help=f"The engram binary that creates the file (default: the installed {DEFAULT_VERSION}).",
)
@click.option(
    "--now",
    "use_now",
    is_flag=True,
    help="End the history at the current time instead of the measurement date (not reproducible).",
)
@click.option(
    "--digest", is_flag=True, help="Add the sha256 of a canonical dump of every row to the summary."
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Put the home dir under this existing directory and create its git repositories there.",
)
def make_deployment(
    scale: float,
    seed: int,
    out: Path,
    engram_binary: Path | None,
    use_now: bool,
    digest: bool,
    workspace: Path | None,
) -> None:
    """Create a messy engram deployment shaped like the one measured in the design; print a JSON summary."""
    refuse_overwriting_inputs({"--out": out}, {}, {"--engram": engram_binary})
    binary = engram_binary or find_engram(DEFAULT_VERSION)
    if binary is None:
        raise click.ClickException(
            f"engram {DEFAULT_VERSION} is not installed; run: engram-harness engram install (or pass --engram)"
        )
    try:
        spec = DeploymentSpec().scaled(scale)
        if use_now:
            now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
            spec = spec.model_copy(update={"reference_time": now})
        summary = generate(spec, seed, out, binary, with_digest=digest, workspace=workspace)
    except ValidationError as error:
        first = error.errors()[0]
        raise click.ClickException(f"--scale {scale}: {first['msg']}") from error
    except HarnessError as error:
        raise click.ClickException(str(error)) from error
    click.echo(summary.model_dump_json(indent=2))
