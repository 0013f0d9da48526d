"""What check, inbox list, repair and reconcile print on the seed-7 design deployment, pinned byte for byte (with the
canary's clock frozen): a refactoring that moves canary code must not change a byte. The digests change
only on purpose, like the deployment's own in tests/harness/test_deployment.py."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
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


# reconcile against an empty fake cloud (recorded on 32e1326): every acked row of an enrolled project is
# lost. The cloud's URL (its port) and the run's wall time differ between runs; both are replaced.
RECONCILE_COMMANDS = {
    "reconcile --format json": (2, "ad5b17d5"),
    "reconcile --format text": (2, "647bf4b4"),
    "reconcile --format prometheus": (2, "f0ad2264"),
}
CLOUD_TOKEN = "design-deployment-bytes"


def canary(command: str, tmp_path: Path, number: int, extra_env: dict[str, str]) -> tuple[int, bytes]:
    state = tmp_path / f"state-{number}"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(state),
        "XDG_CONFIG_HOME": str(state / "config"),
        **extra_env,
    }
    for name in ("ENGRAM_CANARY_STATE_DIR", "ENGRAM_CANARY_CONFIG", "ENGRAM_DATA_DIR"):
        env.pop(name, None)
    ran = subprocess.run(
        [sys.executable, "-c", FROZEN_CANARY, *command.split(), "--db", "engram.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=300,
        check=False,
    )
    return ran.returncode, ran.stdout + ran.stderr


def digest(output: bytes) -> str:
    return hashlib.sha256(output).hexdigest()[:8]


def test_check_inbox_list_repair_and_reconcile_print_the_same_bytes(engram_bin: Path, tmp_path: Path) -> None:
    generate(DeploymentSpec(), 7, tmp_path / "engram.db", engram_bin)
    outputs: dict[str, tuple[int, str]] = {}
    for command in COMMANDS:
        status, output = canary(command, tmp_path, len(outputs), {})
        outputs[command] = (status, digest(output))
    with start_fake_cloud(FakeCloudConfig(token=CLOUD_TOKEN, tls=True, server_version="v1.20")) as cloud:
        cloud_env = {
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
            "ENGRAM_CLOUD_TOKEN": CLOUD_TOKEN,
            "SSL_CERT_FILE": str(cloud.ca_file),
        }
        for command in RECONCILE_COMMANDS:
            status, output = canary(command, tmp_path, len(outputs), cloud_env)
            output = output.replace(cloud.base_url.encode(), b"CLOUD")
            output = re.sub(rb'"seconds": [0-9.]+', b'"seconds": 0', output)
            outputs[command] = (status, digest(output))
    assert outputs == {**COMMANDS, **RECONCILE_COMMANDS}
