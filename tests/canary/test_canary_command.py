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


SCHEMA_PROBE = """
import os, sys
import pydantic._internal._core_utils as core_utils
checked = []
original = core_utils._validate_core_schema
core_utils._validate_core_schema = lambda schema: checked.append(1) or original(schema)
import engram_sync_kit.canary.command
sys.argv = ["engram-canary", "--help"]
try:
    engram_sync_kit.canary.command.main()
except SystemExit:
    pass
print(repr(os.environ.get("PYDANTIC_SKIP_VALIDATING_CORE_SCHEMAS")), len(checked))
"""


@pytest.mark.parametrize(("inherited", "expected"), [(None, "None"), ("1", "'1'")])
def test_the_models_schemas_are_not_checked_again_and_the_environment_restored(
    inherited: str | None, expected: str
) -> None:
    """Failed first: 16 schema checks (a tenth of start-up); pydantic's own generated schemas need none."""
    env = {key: value for key, value in os.environ.items() if key != "PYDANTIC_SKIP_VALIDATING_CORE_SCHEMAS"}
    if inherited is not None:
        env["PYDANTIC_SKIP_VALIDATING_CORE_SCHEMAS"] = inherited
    probe = subprocess.run(
        [sys.executable, "-c", SCHEMA_PROBE], env=env, capture_output=True, text=True, check=False
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[-1] == f"{expected} 0"
