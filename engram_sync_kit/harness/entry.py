"""The `engram-harness` entry point, apart from harness.cli so a base install (no [harness] extra) gets
one line that names the command adding the extra, instead of a traceback."""

from __future__ import annotations

import re
import shlex
import sys
from importlib import metadata
from pathlib import Path

from engram_sync_kit.engram_contract.one_line_cli import USAGE_EXIT

#: The [harness] extra's import names: a base install (`pipx install .`) has none of them.
HARNESS_EXTRA_MODULES = frozenset({"rich", "faker", "pytest", "docker", "testcontainers"})
DISTRIBUTION = "engram-sync-kit"
_HARNESS_MARKER = re.compile(r"""extra\s*==\s*['"]harness['"]""")


def harness_requirements() -> list[str]:
    """The [harness] extra's pinned requirements, as this installed kit declares them."""
    requirements = []
    for requirement in metadata.requires(DISTRIBUTION) or []:
        name, _, marker = requirement.partition(";")
        if _HARNESS_MARKER.search(marker):
            requirements.append(name.strip().replace(" ", ""))
    return sorted(requirements)


def install_hint(prefix: Path = Path(sys.prefix), python: str = sys.executable) -> str:
    """A command that adds the extra to this very install. The kit is not on any package index, so
    `pipx install 'engram-sync-kit[harness]'` only goes round in a circle: this names the extra's own
    requirements instead, which are, for the environment the kit runs in (a pipx venv or another)."""
    requirements = " ".join(shlex.quote(requirement) for requirement in harness_requirements())
    if (prefix / "pipx_metadata.json").is_file():
        return f"pipx inject {shlex.quote(prefix.name)} {requirements}"
    return f"{shlex.quote(python)} -m pip install {requirements}"


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
            f" install it with: {install_hint()}",
            file=sys.stderr,
        )
        sys.exit(USAGE_EXIT)
    cli()
