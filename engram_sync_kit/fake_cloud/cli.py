"""engram-fake-cloud: a thin command line over the fake cloud library."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from engram_sync_kit.engram_contract.one_line_cli import OneLineErrorGroup
from engram_sync_kit.engram_contract.version import __version__
from engram_sync_kit.fake_cloud.errors import FakeCloudError

if TYPE_CHECKING:
    from engram_sync_kit.fake_cloud.state import ServerVersion


def _env_bool(name: str) -> bool:
    # Same spelling rules as engram's envBool.
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


PROG = "engram-fake-cloud"


class FakeCloudGroup(OneLineErrorGroup):
    """Every error one line: click's usage errors and refused configurations exit 3, others 1."""

    program = PROG
    package_error = FakeCloudError

    def usage_line(self, where: str, message: str) -> str:
        return f"{PROG}: {message} (see {where} --help)"

    def error_line(self, message: str) -> str:
        return f"{PROG}: {message}"

    def abort_line(self) -> str:
        return f"{PROG}: aborted"


@click.group(cls=FakeCloudGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="engram-fake-cloud")
def cli() -> None:
    """A recording, fault-injecting stand-in for engram's self-hosted cloud.

    \b
    Examples:
      engram-fake-cloud serve --port 0 --token T     # the first stdout line is the base URL
      engram-fake-cloud serve --tls --ca-out ca.pem --token T
    """


@cli.command()
@click.option(
    "--host",
    envvar="ENGRAM_CLOUD_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind [env ENGRAM_CLOUD_HOST]; anything but loopback needs --control-token.",
)
@click.option(
    "--control-token",
    envvar="ENGRAM_FAKE_CLOUD_CONTROL_TOKEN",
    help="Bearer token every /_fake/ request must carry; required off loopback "
    "[env ENGRAM_FAKE_CLOUD_CONTROL_TOKEN].",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="0 picks a free port."
)
@click.option("--tls", is_flag=True, help="Serve https with a throwaway CA (see --ca-out).")
@click.option(
    "--ca-out", type=click.Path(dir_okay=False, path_type=Path), help="Where to write the CA's PEM."
)
@click.option(
    "--token", envvar="ENGRAM_CLOUD_TOKEN", help="Bearer token clients must send [env ENGRAM_CLOUD_TOKEN]."
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="No token, like the real server: every project route answers 403 "
    "'principal is required' [env ENGRAM_CLOUD_INSECURE_NO_AUTH].",
)
@click.option(
    "--insecure-permissive",
    is_flag=True,
    help="Fake only, with --insecure-no-auth: serve projects by the allowlist instead "
    "[env ENGRAM_FAKE_CLOUD_INSECURE_PERMISSIVE].",
)
@click.option(
    "--allowed-projects",
    envvar="ENGRAM_CLOUD_ALLOWED_PROJECTS",
    default="*",
    show_default=True,
    help="Comma-separated project allowlist, '*' for all [env ENGRAM_CLOUD_ALLOWED_PROJECTS].",
)
@click.option(
    "--journal-limit",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Most requests kept in the journal (/_fake/journal); the oldest go first.",
)
@click.option(
    "--store-limit",
    type=click.IntRange(min=1),
    default=200_000,
    show_default=True,
    help="Most mutations, received entries and chunks kept; the oldest go first (see /_fake/stats).",
)
@click.option(
    "--max-push-bytes",
    type=click.IntRange(min=1),
    envvar="ENGRAM_CLOUD_MAX_PUSH_BYTES",
    default=8 * 1024 * 1024,
    show_default=True,
    help="Largest push body accepted; a bigger one is answered 413 [env ENGRAM_CLOUD_MAX_PUSH_BYTES].",
)
@click.option(
    "--server-version",
    type=click.Choice(["v1.20", "v2", "v3"]),
    envvar="ENGRAM_FAKE_CLOUD_SERVER_VERSION",
    default="v3",
    show_default=True,
    help="Which real server to answer as: v1.20 (observed), v2 or v3 (predicted from engram's source; "
    "v2 and v3 serve the prompt-provenance routes) [env ENGRAM_FAKE_CLOUD_SERVER_VERSION].",
)
def serve(
    host: str,
    control_token: str | None,
    port: int,
    tls: bool,
    ca_out: Path | None,
    token: str | None,
    insecure_no_auth: bool,
    insecure_permissive: bool,
    allowed_projects: str,
    journal_limit: int,
    store_limit: int,
    max_push_bytes: int,
    server_version: ServerVersion,
) -> None:
    """Serve until SIGTERM; the first stdout line is the base URL actually bound, printed once the
    server is ready."""
    from engram_sync_kit.fake_cloud.server import FakeCloudConfig  # the server only for serve, not --help

    if tls and ca_out is None:
        raise click.UsageError("--tls needs --ca-out FILE: clients must be given the CA to trust")
    if ca_out is not None and not tls:
        raise click.UsageError("--ca-out only makes sense with --tls")
    insecure = insecure_no_auth or _env_bool("ENGRAM_CLOUD_INSECURE_NO_AUTH")
    projects = tuple(name.strip() for name in allowed_projects.split(",") if name.strip())
    if not projects:
        raise click.UsageError("--allowed-projects is empty: give one or more names, or '*' for all")
    config = FakeCloudConfig(
        token=token.strip() if token and token.strip() else None,
        allowed_projects=projects,
        insecure_no_auth=insecure,
        insecure_permissive=insecure_permissive or _env_bool("ENGRAM_FAKE_CLOUD_INSECURE_PERMISSIVE"),
        tls=tls,
        host=host,
        port=port,
        journal_limit=journal_limit,
        store_limit=store_limit,
        max_push_bytes=max_push_bytes,
        server_version=server_version,
        ca_out=ca_out,
        control_token=control_token.strip() if control_token and control_token.strip() else None,
    )
    try:
        config.validate()
    except FakeCloudError as error:  # a configuration the server refuses: a usage error
        raise click.UsageError(str(error)) from None
    try:
        asyncio.run(_serve(config))
    except FakeCloudError as error:
        click.echo(f"{PROG}: {error}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        pass


async def _serve(config: object) -> None:
    # the server only for serve, not --help (config is typed object for the same reason)
    from engram_sync_kit.fake_cloud.server import FakeCloudConfig, serve_until

    assert isinstance(config, FakeCloudConfig)
    _raise_descriptor_limit()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def ready(url: str) -> None:
        sys.stdout.write(url + "\n")
        sys.stdout.flush()

    await serve_until(config, stop, ready)


def _raise_descriptor_limit() -> None:
    """As Go's runtime does at start: the soft limit on open files up to the hard one."""
    import resource  # POSIX only; the CLI's other commands run anywhere

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    cli()
