"""The `engram-harness` entry point, apart from harness.cli so a base install (no [harness] extra) gets
one line that names the extra instead of a traceback."""

from __future__ import annotations

import sys

#: The [harness] extra's import names: a base install (`pipx install engram-sync-kit`) has none of them.
HARNESS_EXTRA_MODULES = frozenset({"rich", "faker", "pytest", "docker", "testcontainers"})
INSTALL_HINT = "pipx install 'engram-sync-kit[harness]'"


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        # answered before the [harness] extra's imports, which may be missing
        from engram_sync_kit.engram_contract.version import __version__

        print(f"engram-harness, version {__version__}")
        return
    try:
        from engram_sync_kit.harness.cli import cli  # inside try: a missing [harness] extra is one line
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] not in HARNESS_EXTRA_MODULES:
            raise
        print(
            f"engram-harness: error: the harness needs the [harness] extra ({error.name} is not installed);"
            f" install it with: {INSTALL_HINT}",
            file=sys.stderr,
        )
        sys.exit(2)
    cli()
