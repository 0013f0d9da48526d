"""The `engram-canary` command's entry point, apart from canary.cli so it runs before any model is built."""

from __future__ import annotations

import gc
import os

PLUGINS_SWITCH = "PYDANTIC_DISABLE_PLUGINS"
SCHEMA_CHECK_SWITCH = "PYDANTIC_SKIP_VALIDATING_CORE_SCHEMAS"
# A check's objects live until it ends and hold almost no cycles (10k targets: 445 passes collected 1,366
# objects), and neither do the modules it imports, so frequent young-generation passes only cost time: a
# tenth of a 10k-target check.
YOUNG_GENERATION_THRESHOLD = 100_000


def main() -> None:
    # Cron runs this every few minutes, and start-up is most of an unchanged check. While the models are
    # built, pydantic neither searches every installed package's metadata for plugins (the canary uses
    # none) nor checks the schemas it generated itself (16 models: a tenth of start-up). The caller's
    # environment is restored before any command runs, so git and --exec hooks see it unchanged.
    _young, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)
    inherited = {name: os.environ.get(name) for name in (PLUGINS_SWITCH, SCHEMA_CHECK_SWITCH)}
    os.environ[PLUGINS_SWITCH] = "__all__"
    os.environ[SCHEMA_CHECK_SWITCH] = "1"
    try:
        from engram_sync_kit.canary.cli import cli  # after the switches above, which it must see
    finally:
        for name, value in inherited.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    gc.freeze()  # modules, classes and schemas live as long as the process: never scan them again
    cli()
