"""What check, inbox list and repair print on the seed-7 design deployment, pinned byte for byte (with the
canary's clock frozen): a refactoring that moves canary code must not change a byte. The digests change
only on purpose, like the deployment's own in tests/harness/test_deployment.py."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.harness.deployment import DeploymentSpec, generate

pytestmark = pytest.mark.engram

# Runs engram-canary with every canary module's clock at one instant (ages, checked_at, cache freshness).
FROZEN_CANARY = """
import datetime, importlib, pkgutil, sys, time
import engram_sync_kit.canary as canary
FROZEN = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
class Frozen(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN if tz is not None else FROZEN.replace(tzinfo=None)
for info in pkgutil.iter_modules(canary.__path__):
    module = importlib.import_module("engram_sync_kit.canary." + info.name)
    if getattr(module, "datetime", None) is datetime.datetime:
        module.datetime = Frozen
time.time = FROZEN.timestamp
from engram_sync_kit.canary.command import main
sys.argv[0] = "engram-canary"
main()
"""
# command -> (exit status, sha256 prefix of its output), recorded on 53aac01 before the read/write split
COMMANDS = {
    "check --format json --full": (2, "2c19f6ee"),
    "inbox list --format json": (0, "14ab886f"),
    "check --format text --full": (2, "a499aaaa"),
    "inbox list --format text": (0, "447dcf8e"),
    "repair": (0, "9c5ecbc9"),
}


def test_check_inbox_list_and_repair_print_the_same_bytes(engram_bin: Path, tmp_path: Path) -> None:
    generate(DeploymentSpec(), 7, tmp_path / "engram.db", engram_bin)
    outputs: dict[str, tuple[int, str]] = {}
    for command, _ in COMMANDS.items():
        state = tmp_path / f"state-{len(outputs)}"
        env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(state),
            "XDG_CONFIG_HOME": str(state / "config"),
        }
        env.pop("ENGRAM_CANARY_STATE_DIR", None)
        env.pop("ENGRAM_CANARY_CONFIG", None)
        env.pop("ENGRAM_DATA_DIR", None)
        ran = subprocess.run(
            [sys.executable, "-c", FROZEN_CANARY, *command.split(), "--db", "engram.db"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        outputs[command] = (ran.returncode, hashlib.sha256(ran.stdout + ran.stderr).hexdigest()[:8])
    assert outputs == COMMANDS
