"""What check, inbox list, repair and reconcile print on the seed-7 design deployment, pinned byte for byte
(with the canary's clock frozen), and the JSON reports of two scenarios run on a copy of it: a refactoring
that moves canary or harness code must not change a byte. The digests change only on purpose, like the
deployment's own in tests/harness/test_deployment.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

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
for info in pkgutil.walk_packages(canary.__path__, "engram_sync_kit.canary."):  # rooms too
    module = importlib.import_module(info.name)
    if getattr(module, "datetime", None) is datetime.datetime:
        module.datetime = Frozen
time.time = FROZEN.timestamp
from engram_sync_kit.canary.command import main
sys.argv[0] = "engram-canary"
main()
"""
# command -> (exit status, sha256 prefix of its output), recorded on 53aac01 before the read/write split;
# check's two and inbox list's JSON re-recorded on purpose after issues 33-35 (the liveness and pull-side
# summary, the capped text, a telemetry-only key's drop_command), then unchanged by the rooms move
COMMANDS = {
    "check --format json --full": (2, "30860550"),
    "inbox list --format json": (0, "8d7a1699"),
    "check --format text --full": (2, "0adafa10"),
    "inbox list --format text": (0, "447dcf8e"),
    "repair": (0, "9c5ecbc9"),
}


# reconcile against an empty fake cloud (recorded on 32e1326): every acked row of an enrolled project is
# lost. The cloud's URL (its port) and the run's wall time differ between runs; both are replaced. All three
# re-recorded on purpose after issue 33's pull side (#693): the JSON's `pull`, its text line, three gauges.
RECONCILE_COMMANDS = {
    "reconcile --format json": (2, "968d7686"),
    "reconcile --format text": (2, "be39fa09"),
    "reconcile --format prometheus": (2, "266d45f4"),
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


ROOT = Path(__file__).parents[1]
# scenario -> sha256 prefix of its normalized `engram-harness run --db --json` report, recorded on 32e1326
# (before the harness's share of the architecture step). Both read engram's database through every harness
# reader: the lane table, sync_state, local counts, the inbox_row check, the canary's check and doctor.
# closed-target-invariant re-recorded on purpose after issue 34 split its prediction at rc.12, and again
# after c09f6e7: the deployment's phantoms hold legacy rows of their own project on their own lane, which
# the canary had counted twice (the digest with c09f6e7's checks.py reverted is the old one, 55cb7c35)
SCENARIO_REPORTS = {
    "closed-target-invariant": "82c3e21d",
    "inbox-surfaces-save-status-commands": "8eec7654",
}
# What the normalization replaces, and nothing else: timestamps (engram's and the canary's clocks) and
# durations (`seconds`, `timings`, the canary's `*_age_days`, which grow with the wall clock); temporary
# paths (the scenario's directory, this test's); and the noise of the run's environment that no kit code
# decides: the fake cloud's free port, the random sync ids engram mints, SQLite's WAL checkpoint counters
# in engram doctor's answer, and the checkout's path. The same keys are replaced inside the JSON that a
# step captured as text (the canary's and doctor's stdout).
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
DURATIONS = frozenset({"seconds", "timings"})
AGE = re.compile(r"[a-z_]*_age_days|[a-z_]*seconds[a-z_]*")  # and the liveness ages, which grow too
SCENARIO_DIR = re.compile(re.escape(tempfile.gettempdir()) + r"/engram-harness-[a-z0-9_]+")
FREE_PORT = re.compile(r"127\.0\.0\.1:\d+")
SYNC_ID = re.compile(r"\b(obs|sess|prompt|rel)-[0-9a-f]{16}\b")
WAL_COUNTERS = frozenset({"checkpoint_log", "checkpointed_frames"})
NUMBER_IN_TEXT = re.compile(
    r'("(?:checkpoint_log|checkpointed_frames|[a-z_]*_age_days|[a-z_]*seconds[a-z_]*)"): [0-9.]+'
)


def normalized(value: Any, here: Path) -> Any:
    if isinstance(value, dict):
        return {
            key: normalized(item, here)
            for key, item in value.items()
            if key not in DURATIONS and key not in WAL_COUNTERS and not AGE.fullmatch(key)
        }
    if isinstance(value, list):
        return [normalized(item, here) for item in value]
    if isinstance(value, str):
        text = SCENARIO_DIR.sub("<tmp>", value.replace(str(ROOT), "<checkout>"))
        text = FREE_PORT.sub("127.0.0.1:<port>", text.replace(str(here), "<tmp>"))
        text = NUMBER_IN_TEXT.sub(r"\1: <n>", SYNC_ID.sub(r"\1-<id>", text))
        return TIMESTAMP.sub("<time>", text)
    return value


def test_scenario_reports_on_the_design_deployment_keep_their_bytes(engram_bin: Path, tmp_path: Path) -> None:
    generate(DeploymentSpec(), 7, tmp_path / "engram.db", engram_bin)
    digests: dict[str, str] = {}
    harness = [sys.executable, "-c", "from engram_sync_kit.harness.entry import main; main()", "run"]
    for scenario in SCENARIO_REPORTS:
        report = tmp_path / f"{scenario}.json"
        scenario_file = ROOT / "scenarios" / f"{scenario}.scenario.yaml"
        ran = subprocess.run(
            [
                *harness,
                str(scenario_file),
                "--engram",
                str(engram_bin),
                "--db",
                "engram.db",
                "--json",
                str(report),
            ],
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert report.exists(), ran.stderr.decode(errors="replace")[-2000:]
        text = json.dumps(normalized(json.loads(report.read_bytes()), tmp_path), indent=2, ensure_ascii=False)
        digests[scenario] = hashlib.sha256(text.encode()).hexdigest()[:8]
    assert digests == SCENARIO_REPORTS
