"""The engram-canary entry point: pydantic's plugin search is skipped while the models are built, and the
caller's environment is back before any command runs (git and --exec hooks inherit it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os, sys
import engram_sync_kit.canary.command
sys.argv = ["engram-canary", "--help"]
try:
    engram_sync_kit.canary.command.main()
except SystemExit:
    pass
import pydantic.plugin._loader as loader
print(repr(os.environ.get("PYDANTIC_DISABLE_PLUGINS")), loader._plugins)
"""


@pytest.mark.parametrize(("inherited", "expected"), [(None, "None"), ("logfire", "'logfire'")])
def test_the_plugin_search_is_skipped_and_the_environment_restored(
    inherited: str | None, expected: str
) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYDANTIC_DISABLE_PLUGINS"}
    if inherited is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = inherited
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=False
    )
    assert probe.returncode == 0, probe.stderr
    # None: pydantic never searched the installed packages for plugins
    assert probe.stdout.splitlines()[-1] == f"{expected} None"
