"""explore's newer nemeses against two real engram v1.20.0 homes on the chunk path (marker: engram; no
worker ticks, a few seconds each): a partition of machine B alone, a truncated answer and a pull answered
with every row twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.explore.execute import HistoryOutcome, play
from engram_sync_kit.harness.explore.operations import (
    MACHINE_B,
    NEMESIS_KINDS,
    GeneratedStep,
    GeneratorSettings,
)

pytestmark = pytest.mark.engram

CHUNK_PATH = GeneratorSettings(autosync=False, nemesis=(), machines=2)


def _on_b(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"device": {"name": MACHINE_B, "steps": list(steps)}}


def _sync(*extra: str) -> dict[str, Any]:
    return {"run": {"args": ["sync", "--cloud", *extra, "--project", "my-app"], "exit": 0}}


def _save(title: str) -> dict[str, Any]:
    return {"save": {"in": "app", "title": title, "content": f"c {title}", "via": "cli", "project": "my-app"}}


def _play(engram_bin: Path, kind: str) -> HistoryOutcome:
    """Both machines save, the nemesis strikes, each pushes and pulls (exit 0 expected), then quiescence."""
    anyway = {"run": {"args": ["sync", "--cloud", "--project", "my-app"], "exit": None}}
    pull_anyway = {"run": {"args": ["sync", "--cloud", "--import", "--project", "my-app"], "exit": None}}
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_cli", _save("memory a")),
        GeneratedStep("enroll_b", _on_b({"enroll": "my-app"})),
        GeneratedStep("save_b", _on_b(_save("memory b"))),
        GeneratedStep("nemesis", {"cloud": {"faults": NEMESIS_KINDS[kind](CHUNK_PATH)}}),
        GeneratedStep("sync_manual", _sync()),
        GeneratedStep("sync_b", _on_b(_sync())),
        GeneratedStep("pull_b", _on_b(_sync("--import"))),
        GeneratedStep("pull", _sync("--import")),
        GeneratedStep("quiesce", {"cloud": {"clear_faults": True}}),
        GeneratedStep("quiesce", anyway),
        GeneratedStep("quiesce", _on_b(anyway, pull_anyway)),
        GeneratedStep("converge", pull_anyway),
    ]
    outcome = play(engram_bin, history, autosync=False, stop_at_violation=False)
    assert outcome.error == ""
    return outcome


def _failed(outcome: HistoryOutcome) -> dict[str, str]:
    return {step.operation: step.error for step in outcome.steps if step.status != "ok"}


def test_a_partition_of_machine_b_fails_its_syncs_only_and_heals_after_quiescence(engram_bin: Path) -> None:
    outcome = _play(engram_bin, "partition_b")
    failed = _failed(outcome)
    assert sorted(failed) == ["pull_b", "sync_b"]
    assert 'fetch manifest: Get "https://localhost:' in failed["sync_b"]
    assert outcome.violations == []


def test_a_truncated_manifest_fails_the_sync_and_v120_takes_a_cut_push_answer_as_success(
    engram_bin: Path,
) -> None:
    """v1.20's chunk push reads only a 200's status (remote/transport.go WriteChunk @ba9e46c), so only the
    cut manifest shows: `parse manifest: unexpected EOF`."""
    outcome = _play(engram_bin, "truncated")
    failed = _failed(outcome)
    assert list(failed) == ["sync_manual"]
    assert "parse manifest: unexpected EOF" in failed["sync_manual"]
    assert outcome.violations == []


def test_a_pull_answered_with_every_row_twice_still_converges(engram_bin: Path) -> None:
    outcome = _play(engram_bin, "dup_pull")
    assert _failed(outcome) == {} and outcome.violations == []
