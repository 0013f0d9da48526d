"""explore's newer invariants on two real engram v1.20.0 homes (marker: engram; the chunk path, a few
seconds each), each with a planted break that fails with its checker taken out of CHECKERS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.explore.execute import play
from engram_sync_kit.harness.explore.invariants import Observation, check_i7
from engram_sync_kit.harness.explore.operations import MACHINE_B, GeneratedStep
from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.localdata import MachineMemories

pytestmark = pytest.mark.engram


def _on_b(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"device": {"name": MACHINE_B, "steps": list(steps)}}


def _sync(*extra: str) -> dict[str, Any]:
    return {"run": {"args": ["sync", "--cloud", *extra, "--project", "my-app"], "exit": None}}


def _save(title: str, content: str) -> dict[str, Any]:
    return {"save": {"in": "app", "title": title, "content": content, "via": "cli", "project": "my-app"}}


def _quiesce() -> list[GeneratedStep]:
    return [
        GeneratedStep("quiesce", _sync()),
        GeneratedStep("quiesce", _on_b(_sync(), _sync("--import"))),
        GeneratedStep("converge", _sync("--import")),
    ]


def test_one_memory_under_two_sync_ids_is_a_duplicate_delivery_in_the_cloud_and_on_both_machines(
    engram_bin: Path,
) -> None:
    """Planted: the same memory saved on both machines, what a client that mints a second sync_id for one
    memory leaves behind. explore's titles are unique, so a generated history never does this itself."""
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_cli", _save("memory 1", "the same memory")),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(_save("memory 1", "the same memory"))),
        GeneratedStep("sync_manual", _sync()),
        GeneratedStep("sync_b", _on_b(_sync())),
        *_quiesce(),
    ]
    outcome = play(engram_bin, history, autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    assert violation.kind == "I7/cloud-stores-twice" and violation.owner == "engram"
    assert outcome.violation_step == 5 and outcome.steps[5].operation == "sync_b"  # the second copy stored
    assert "'memory 1' (my-app: 2 sync_ids)" in violation.detail


def test_a_machine_holding_one_memory_twice_after_quiescence_is_a_duplicate_delivery() -> None:
    """The machine side of I7, on what `read_machine_memories` returns (one title, two sync_ids on A; one
    sync_id on two rows on B)."""
    a = MachineMemories(
        frozenset({"my-app"}), {"my-app": frozenset({("o1", "memory 1", "c"), ("o2", "memory 1", "c")})}
    )
    b = MachineMemories(
        frozenset({"my-app"}), {"my-app": frozenset({("o1", "memory 1", "c")})}, repeated=frozenset({"o1"})
    )
    observation = Observation(
        local=[], lanes=LaneTable(), canary={}, sync_state=[], machines={"a": a, MACHINE_B: b}
    )
    (violation,) = check_i7(observation)
    assert violation.kind == f"I7/held-twice-on-a-and-{MACHINE_B}" and violation.owner == "engram"
    assert (
        f"a holds 'memory 1' (my-app) twice, {MACHINE_B} holds 'memory 1' (my-app) twice" in violation.detail
    )


def test_two_machines_saving_different_memories_deliver_each_once(engram_bin: Path) -> None:
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_cli", _save("memory 1", "one")),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(_save("memory 2", "two"))),
        *_quiesce(),
    ]
    outcome = play(engram_bin, history, autosync=False)
    assert outcome.error == "" and outcome.violations == []


def _deleted_on_a(*, b_pulls_after: bool) -> list[GeneratedStep]:
    return [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_cli", _save("memory 1", "one")),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("sync_manual", _sync()),
        GeneratedStep("pull_b", _on_b(_sync("--import"))),
        GeneratedStep("delete", {"delete": "memory 1"}),
        GeneratedStep("quiesce", _sync()),
        # the planted break: machine B's last pull replaced by a push, so A's delete never reaches it
        GeneratedStep("quiesce", _on_b(_sync(), _sync("--import") if b_pulls_after else _sync())),
        GeneratedStep("converge", _sync("--import")),
    ]


def test_a_deleted_memory_still_live_on_the_other_machine_is_reported(engram_bin: Path) -> None:
    outcome = play(engram_bin, _deleted_on_a(b_pulls_after=False), autosync=False)
    assert outcome.error == ""
    (violation,) = outcome.violations
    # B never got the delete; A, which deleted it, may hold it live again too (docs/explore.md, I8)
    assert violation.invariant == "I8" and violation.owner == "engram"
    assert violation.kind.startswith("I8/") and violation.kind.endswith(MACHINE_B)
    assert f"{MACHINE_B} holds 'memory 1' (my-app) live, deleted on a" in violation.detail
    assert outcome.violation_step == len(outcome.steps) - 1
