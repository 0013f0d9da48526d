"""`check --full`'s work per foreign target (issue 35 item 12: <= 1 s CPU at 10k targets), counted as Python
calls, which a clock on a shared machine is not; the time itself is bench/canary_scale.py's.

The home is made by the real engram v1.20 binary; the foreign targets are a SIMULATION OF LEGACY DATA
(harness.deployment.many_targets), written straight into engram's tables.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest

from engram_sync_kit.canary.checks import run_check
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.inbox.selection import payload_object
from engram_sync_kit.harness.deployment.many_targets import add_foreign_targets
from engram_sync_kit.harness.engram.env import EngramEnvironment

TARGETS = 1500


@pytest.mark.engram
def test_a_full_check_makes_few_python_calls_per_foreign_target(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed first: 55.8 calls a target (json.loads' wrappers per inbox row, readable() per sync_state value, a scan
    check per target after the one scan); now 44.8."""
    for args in (["save", "alpha note", "c", "--project", "alpha"], ["cloud", "enroll", "alpha"]):
        assert engram_world.run(args).returncode == 0
    db = engram_world.db_path
    add_foreign_targets(db, TARGETS)  # SIMULATION OF LEGACY DATA
    monkeypatch.setenv("ENGRAM_CANARY_STATE_DIR", str(tmp_path / "state"))
    run_check(db, CanaryConfig(), None, use_cursor=False)  # first-use work (caches, lazy imports) aside
    calls = [0]

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls[0] += 1

    sys.setprofile(count)
    try:
        result = run_check(db, CanaryConfig(), None, use_cursor=False)
    finally:
        sys.setprofile(None)
    assert result.summary["foreign_sync_targets"] == TARGETS
    assert calls[0] <= 50 * TARGETS, calls[0] / TARGETS


@pytest.mark.parametrize(
    "payload",
    [
        '{"project": "p"}',
        ' {"project": "p"}\n',
        '\ufeff{"project": "p"}',
        '{"project": "p"} trailing',
        '{"project": "p"}\x0c',
        "\u00a0{}",
        "",
        "   ",
        '"{\\"project\\": \\"q\\"}"',
        '"not json"',
        "[1]",
        '{"a": NaN, "project": "p"}',
        '{"project": "a", "project": "b"}',
        "[" * 100_000,
    ],
)
def test_a_payload_reads_as_json_loads_reads_it(payload: str) -> None:
    """The inbox's payload parse skips json.loads' wrappers; what it returns must not move."""

    def loads(text: str) -> object:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return {}

    expected = loads(payload)
    if isinstance(expected, str):
        expected = loads(expected)
    assert repr(payload_object(payload)) == repr(expected if isinstance(expected, dict) else {})


GC_PROBE = """
import gc, sys
import engram_sync_kit.canary.command as command
passes = [0, 0, 0]
gc.callbacks.append(lambda phase, info: phase == "start" and passes.__setitem__(info["generation"], passes[info["generation"]] + 1))
sys.argv = ["engram-canary", "check", "--db", sys.argv[1], "--format", "json", "--full"]
try:
    command.main()
except SystemExit as exit:
    print(exit.code, passes, file=sys.stderr)
"""


@pytest.mark.engram
def test_a_full_check_spends_little_on_the_garbage_collector(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """The check's objects live until it ends and hold almost no cycles, so the collector's passes over
    them are waste (at 10k targets 445 passes, 3 of them over every object: a tenth of the CPU).
    Failed first: [98, 9, 0] passes (young, middle, all); now the import's objects are frozen and the
    young generation is collected rarely."""
    for args in (["save", "alpha note", "c", "--project", "alpha"], ["cloud", "enroll", "alpha"]):
        assert engram_world.run(args).returncode == 0
    db = engram_world.db_path
    add_foreign_targets(db, TARGETS)  # SIMULATION OF LEGACY DATA
    env = engram_world.env({"ENGRAM_CANARY_STATE_DIR": str(tmp_path / "state")})
    probe = subprocess.run(
        [sys.executable, "-c", GC_PROBE, str(db)], env=env, capture_output=True, text=True, check=False
    )
    code, passes = probe.stderr.strip().splitlines()[-1].split(" ", 1)
    assert code == "2", probe.stderr[-2000:]  # the foreign targets are critical
    young, middle, everything = json.loads(passes)
    assert (young <= 5, middle <= 1, everything) == (True, True, 0), passes
