"""Two real engram v1.20.0 homes through one fake cloud (marker: engram; the chunk path, no 30 s worker
ticks, a few seconds each): a history that quiesces converges, I6 reports the planted breaks (a
quiescence whose machine B never pulls, a push the cloud acks without storing) and the pull v1.20
refuses over a local session without a directory, and `engram-harness explore --machines 2` finds,
shrinks, writes and replays a lost push of machine B (about 20 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.explore.execute import play
from engram_sync_kit.harness.explore.operations import (
    MACHINE_B,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.scenario.loader import load_scenario

pytestmark = pytest.mark.engram

HARNESS = str(Path(sys.executable).parent / "engram-harness")


def _push(project: str) -> dict[str, Any]:
    return {"run": {"args": ["sync", "--cloud", "--project", project], "exit": None}}


def _pull(project: str) -> dict[str, Any]:
    return {"run": {"args": ["sync", "--cloud", "--import", "--project", project], "exit": None}}


def _on_b(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"device": {"name": MACHINE_B, "steps": list(steps)}}


def _history(
    *, b_pulls: bool = True, b_push_fault: list[dict[str, Any]] | None = None
) -> list[GeneratedStep]:
    b_save = {
        "save": {"in": "app", "title": "memory b", "content": "from b", "via": "cli", "project": "my-app"}
    }
    steps = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep(
            "save_cli",
            {
                "save": {
                    "in": "app",
                    "title": "memory a",
                    "content": "from a",
                    "via": "cli",
                    "project": "my-app",
                }
            },
        ),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(b_save)),
    ]
    if b_push_fault is not None:
        steps += [
            GeneratedStep("nemesis", {"cloud": {"faults": b_push_fault}}),
            GeneratedStep("sync_b", _on_b(_push("my-app"))),
        ]
    steps += [
        GeneratedStep("quiesce", {"cloud": {"clear_faults": True}}),
        GeneratedStep("quiesce", _push("my-app")),
        # the planted break: machine B's pull replaced by a plain `engram sync --cloud`, which pulls nothing
        GeneratedStep("quiesce", _on_b(_push("my-app"), _pull("my-app") if b_pulls else _push("my-app"))),
        GeneratedStep("converge", _pull("my-app")),
    ]
    return steps


def test_two_machines_that_push_then_pull_converge(engram_bin: Path) -> None:
    outcome = play(engram_bin, _history(), autosync=False)
    assert outcome.error == "" and outcome.violations == []
    assert [step.status for step in outcome.steps] == ["ok"] * len(outcome.steps)
    assert outcome.steps[-1].operation == "converge"


def test_a_machine_that_never_pulls_is_reported_missing_the_other_machines_memory(engram_bin: Path) -> None:
    """v1.20's `engram sync --cloud --project P` pushes only: machine B ends without machine A's memory."""
    outcome = play(engram_bin, _history(b_pulls=False), autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    assert violation.kind == f"I6/not-pulled-missing-on-{MACHINE_B}" and violation.owner == "engram"
    assert f"{MACHINE_B} lacks 'memory a' (my-app)" in violation.detail
    assert outcome.violation_step == len(outcome.steps) - 1


def test_a_push_the_cloud_acked_without_storing_leaves_machine_a_without_it_the_nemesiss(
    engram_bin: Path,
) -> None:
    fault = [{"route": "chunk_push", "times": 1, "action": "ack_without_store"}]
    outcome = play(engram_bin, _history(b_push_fault=fault), autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    assert violation.kind == "I6/lost-in-cloud-missing-on-a" and violation.owner == "nemesis"
    assert violation.upstream == 264
    assert (
        "acked yet not in the cloud after an ack_without_store fault: a lacks 'memory b' (my-app)"
        in violation.detail
    )


def test_a_local_session_without_directory_blocks_the_pull_of_the_other_machines_memory(
    engram_bin: Path,
) -> None:
    """What explore met on its first two-machine runs (seed 246, shrunk to 8 steps): v1.20's preflight
    refuses `engram sync --cloud --import --project my-app` too (upgrade_blocked_legacy_mutation_manual)
    while one local session row has no directory, so machine A never gets the memory machine B delivered."""
    b_save = {
        "save": {"in": "app", "title": "memory b", "content": "from b", "via": "cli", "project": "my-app"}
    }
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep(
            "session", {"session": {"id": "s1", "project": "my-app", "in": "app", "directory": "omit"}}
        ),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(b_save)),
        GeneratedStep("quiesce", _push("my-app")),
        GeneratedStep("quiesce", _on_b(_push("my-app"), _pull("my-app"))),
        GeneratedStep("converge", _pull("my-app")),
    ]
    outcome = play(engram_bin, history, autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    assert violation.kind == "I6/not-pulled-missing-on-a" and violation.owner == "engram"
    assert (
        "the cloud stores it and the pull did not bring it: a lacks 'memory b' (my-app)" in violation.detail
    )


#: B saves in my-app, pushes it through ack_without_store; A pulls my-app at the end and lacks it (119
#: until the pool grew by issue 38's new operations)
PLANTED_TWO_MACHINE_SEED = 751
TWO_MACHINES = GeneratorSettings(autosync=False, nemesis=("ack_without_store",), steps=10, machines=2)


def test_the_planted_two_machine_seed_still_loses_machine_bs_push() -> None:
    operations = [step.operation for step in generate_history(PLANTED_TWO_MACHINE_SEED, TWO_MACHINES)]
    nemesis = operations.index("nemesis")
    pushes = [name for name in operations[nemesis:] if name in ("sync_manual", "sync_b", "quiesce")]
    assert pushes[0] == "sync_b" and operations[-1] == "converge", (
        f"the generator changed and seed {PLANTED_TWO_MACHINE_SEED} no longer loses B's push ({operations}); "
        "pick a two-machine seed whose first push after ack_without_store is machine B's"
    )


def test_explore_with_two_machines_finds_shrinks_writes_and_replays_the_lost_push(
    engram_bin: Path, tmp_path: Path
) -> None:
    report_path = tmp_path / "explore.json"
    result = subprocess.run(
        [
            HARNESS,
            "explore",
            "--engram",
            str(engram_bin),
            "--machines",
            "2",
            "--no-autosync",
            "--nemesis",
            "ack_without_store",
            "--steps",
            str(TWO_MACHINES.steps),
            "--replay",
            str(PLANTED_TWO_MACHINE_SEED),
            "--out",
            str(tmp_path / "out"),
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (found,) = json.loads(report_path.read_text(encoding="utf-8"))["violations"]
    assert found["kind"] == "I6/lost-in-cloud-missing-on-a" and found["owner"] == "nemesis"
    assert found["replayed"] is True and found["minimized_steps"] < found["steps"]
    assert f"I6 (nemesis's, the class of engram#264) seed {PLANTED_TWO_MACHINE_SEED}" in result.stdout
    scenario = load_scenario(Path(found["scenario"]))
    assert "device" in [step.name for step in scenario.steps]


def test_a_memory_saved_over_http_converges_under_two_different_projects(engram_bin: Path) -> None:
    """Seed 5005 of the first 2-minute `--machines 2` run: `POST /observations` with a session of my-app
    stores the observation with no project on machine A; the chunk A pushes carries it as my-app, so
    machine B holds it under my-app and A under ''."""
    history = [
        GeneratedStep("session", {"session": {"id": "s1", "project": "my-app", "in": "app"}}),
        GeneratedStep(
            "save_http", {"save": {"via": "http", "session": "s1", "title": "memory h", "content": "c"}}
        ),
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("quiesce", _push("my-app")),
        GeneratedStep("quiesce", _on_b(_push("my-app"), _pull("my-app"))),
        GeneratedStep("converge", _pull("my-app")),
    ]
    outcome = play(engram_bin, history, autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    assert violation.kind == "I6/project-differs-missing-on-a" and violation.owner == "engram"
    assert "a lacks 'memory h' (my-app; holds it under '')" in violation.detail


@pytest.mark.nightly
def test_machine_bs_worker_push_never_reaches_machine_a_while_unenrolled_rows_wait(engram_bin: Path) -> None:
    """#1273's class rediscovered with explore's own operations (I9): B's worker pushes my-app through
    /sync/mutations/push; A enrolled my-app, but a save of other-repo (not enrolled on A) waits, so v1.20's
    worker records non_enrolled_pending_mutations and ends each cycle before its pull (about 2 min)."""
    b_save = {
        "save": {"in": "app", "title": "memory b", "content": "from b", "via": "cli", "project": "my-app"}
    }
    a_save = {
        "save": {
            "in": "other",
            "title": "memory a",
            "content": "from a",
            "via": "cli",
            "project": "other-repo",
        }
    }
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_cli", a_save),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(b_save)),
        GeneratedStep(
            "worker_b",
            _on_b({"daemon": {"action": "start", "autosync": True}}, {"sync": {"via": "autosync"}}),
        ),
        GeneratedStep("settle", {"sync": {"via": "autosync", "cycles": 2, "timeout": 100}}),
    ]
    outcome = play(engram_bin, history, autosync=True)
    assert outcome.error == ""
    assert [(step.status, step.error) for step in outcome.steps] == [("ok", "")] * len(history)
    i9 = [violation for violation in outcome.violations if violation.invariant == "I9"]
    assert [(violation.kind, violation.upstream) for violation in i9] == [
        ("I9/blocked-by-unenrolled-rows", 1273)
    ]
    assert "memory b" in i9[0].detail
