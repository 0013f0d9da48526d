"""The `engram-canary` command's entry point, apart from canary.cli so it runs before any model is built."""

from __future__ import annotations

import os

PLUGINS_SWITCH = "PYDANTIC_DISABLE_PLUGINS"


def main() -> None:
    # Cron runs this every few minutes, and start-up is most of an unchanged check. pydantic searches
    # every installed package's metadata for plugins when it builds the first model (~20 ms); the canary
    # uses none. The caller's environment is restored before any command runs, so git and --exec hooks
    # see it unchanged.
    inherited = os.environ.get(PLUGINS_SWITCH)
    os.environ[PLUGINS_SWITCH] = "__all__"
    try:
        from engram_sync_kit.canary.cli import cli  # after the switch above, which it must see
    finally:
        if inherited is None:
            del os.environ[PLUGINS_SWITCH]
        else:
            os.environ[PLUGINS_SWITCH] = inherited
    cli()
