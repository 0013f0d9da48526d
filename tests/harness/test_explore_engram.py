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

from engram_sync_kit.harness.explore.execute import play
from engram_sync_kit.harness.explore.operations import GeneratedStep, GeneratorSettings, generate_history
from engram_sync_kit.harness.explore.scenario_out import scenario_document, scenario_yaml
from engram_sync_kit.harness.loader import load_scenario

pytestmark = pytest.mark.engram

PLANTED_SEED = 17
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


#: the canary's own triage as explore plays it: a CLI save without a project journals project "" rows (the
#: canary suggests `inbox drop --unattributed`), the drop acks them on purpose, the manual sync delivers
DROP_HISTORY = [
    GeneratedStep("enroll", {"enroll": "my-app"}),
    GeneratedStep("save_cli", {"save": {"in": "app", "title": "no project", "content": "c", "via": "cli"}}),
    GeneratedStep("save_mcp", {"save": {"in": "app", "title": "with project", "content": "c"}}),
    GeneratedStep(
        "triage", {"triage": {"args": ["inbox", "drop", "--unattributed", "--apply"], "exit": None}}
    ),
    GeneratedStep("sync_manual", {"sync": {"via": "manual", "project": "my-app", "in": "app"}}),
]
#: a plain dir's memory claimed into my-app with the canary's own cwd claim command: its session stays in
#: the inbox, so the claim must copy it along (explore found the claim that did not: I4)
CLAIM_HISTORY = [
    GeneratedStep("enroll", {"enroll": "my-app"}),
    GeneratedStep("save_mcp", {"save": {"in": "scratch", "title": "plain dir", "content": "c"}}),
    GeneratedStep(
        "triage",
        {
            "triage": {
                "args": [
                    "inbox",
                    "claim",
                    "--project",
                    "unsorted",
                    "--cwd",
                    "{workspace:scratch}",
                    "--as",
                    "my-app",
                    "--apply",
                ],
                "exit": 0,
            }
        },
    ),
]


def _run_scenario(
    engram_bin: Path, path: Path, steps: list[dict[str, object]]
) -> subprocess.CompletedProcess[str]:
    path.write_text(scenario_yaml(scenario_document("triage", steps, autosync=False)), encoding="utf-8")
    return subprocess.run(
        [HARNESS, "run", str(path), "--engram", str(engram_bin)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_triage_drop_is_no_loss_for_explore_nor_for_the_replayed_scenario(
    engram_bin: Path, tmp_path: Path
) -> None:
    outcome = play(engram_bin, DROP_HISTORY, autosync=False)
    assert outcome.error == "" and outcome.violations == [], (outcome.error, outcome.violations)
    assert [step.status for step in outcome.steps] == ["ok"] * len(DROP_HISTORY)
    assert "rows_triaged" in outcome.steps[-1].states and "rows_lost" not in outcome.steps[-1].states
    replay = _run_scenario(engram_bin, tmp_path / "drop.scenario.yaml", [step.raw for step in DROP_HISTORY])
    assert replay.returncode == 0, replay.stdout + replay.stderr  # the dropped rows are not "lost"
    assert 'cloud/"" 0/2, cloud/my-app 2/2' in replay.stdout


def test_the_claim_explore_caught_copies_its_session_now_so_i4_holds_and_the_sync_delivers(
    engram_bin: Path, tmp_path: Path
) -> None:
    """The history explore found (I4/copy-without-session: the copy referenced a session my-app never got,
    so `engram sync --cloud --project my-app` failed); the claim now copies that session too."""
    outcome = play(engram_bin, CLAIM_HISTORY, autosync=False)
    assert outcome.error == "" and outcome.violations == [], (outcome.error, outcome.violations)
    sync: dict[str, object] = {
        "run": {"args": ["sync", "--cloud", "--project", "my-app"], "exit": 0, "as": "sync-my-app"}
    }
    replay = _run_scenario(
        engram_bin, tmp_path / "claim.scenario.yaml", [*(step.raw for step in CLAIM_HISTORY), sync]
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "cloud/my-app 2/2" in replay.stdout  # the copy and its session, both delivered


RENAME_SCENARIO = """\
name: rename
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
  inner: {dir: notes, parent: app}
steps:
  - save: {in: app, title: before, content: c, as: before}
  - rename: {workspace: app, to: my-app-2}
  - save: {in: app, title: after, content: c, as: after}
  - save: {in: inner, title: inside, content: c, as: inside}
  - rename: {workspace: app, to: my-app-2, expect_error: already exists}
expect:
  - {tag: design, design_section: "§4", save_answer: {of: before, fields: {project: my-app}}}
  - {tag: design, design_section: "§4", save_answer: {of: after, fields: {project: my-app-2}}}
  - {tag: design, design_section: "§4", save_answer: {of: inside, fields: {project: my-app-2}}}
"""


def test_a_renamed_repo_gives_the_saves_after_it_the_new_name(engram_bin: Path, tmp_path: Path) -> None:
    scenario = tmp_path / "rename.scenario.yaml"
    scenario.write_text(RENAME_SCENARIO, encoding="utf-8")
    replay = subprocess.run(
        [HARNESS, "run", str(scenario), "--engram", str(engram_bin)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
