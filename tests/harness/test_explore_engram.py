"""engram-harness explore against the real engram v1.20.0 (marker: engram): a planted violation (the fake
cloud's ack_without_store under the chunk path, no 30 s worker ticks) is found, shrunk, written as a
scenario and replayed by `engram-harness run`. This is also the explore smoke test
(about 40 s; timing goals live in bench/explore.py, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.harness.explore.operations import GeneratorSettings, generate_history
from engram_sync_kit.harness.loader import load_scenario

pytestmark = pytest.mark.engram

PLANTED_SEED = 9
SETTINGS = GeneratorSettings(autosync=False, nemesis=("ack_without_store",), steps=8)
HARNESS = str(Path(sys.executable).parent / "engram-harness")


def test_the_planted_seed_still_holds_the_lossy_push() -> None:
    operations = [step.operation for step in generate_history(PLANTED_SEED, SETTINGS)]
    nemesis, sync = operations.index("nemesis"), operations.index("sync_manual", operations.index("nemesis"))
    assert "enroll" in operations[:sync] and "clear_faults" not in operations[nemesis:sync], (
        f"the generator changed and seed {PLANTED_SEED} no longer plants the lost push ({operations}); "
        "pick a seed whose history enrolls, saves, schedules ack_without_store and syncs by hand"
    )


def test_a_planted_ack_without_store_is_found_shrunk_written_and_replayed(
    engram_bin: Path, tmp_path: Path
) -> None:
    out, report_path = tmp_path / "out", tmp_path / "explore.json"
    result = subprocess.run(
        [
            HARNESS,
            "explore",
            "--engram",
            str(engram_bin),
            "--no-autosync",
            "--nemesis",
            "ack_without_store",
            "--steps",
            str(SETTINGS.steps),
            "--replay",
            str(PLANTED_SEED),
            "--budget",
            "60",
            "--out",
            str(out),
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert {"histories", "steps", "violations", "coverage"} <= set(report)
    assert report["histories"] == 1 and report["steps"] >= 1
    assert report["coverage"]["operations"]["nemesis"] >= 1
    (violation,) = report["violations"]
    assert violation["invariant"] == "I1" and violation["owner"] == "nemesis"
    assert violation["seed"] == PLANTED_SEED
    assert violation["minimized_steps"] <= 6 < violation["steps"] + 1
    assert violation["replayed"] is True, violation["replay_detail"]
    scenario = Path(violation["scenario"])
    assert [step.name for step in load_scenario(scenario).steps][-1] == "sync"
    assert f"I1 (nemesis's) seed {PLANTED_SEED}" in result.stdout

    replay = subprocess.run(
        [HARNESS, "run", str(scenario), "--engram", str(engram_bin)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 1, replay.stdout
    assert "acked, never received" in replay.stdout
