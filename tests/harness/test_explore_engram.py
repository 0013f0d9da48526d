"""engram-harness explore against the real engram v1.20.0 (marker: engram): a planted violation (the fake
cloud's ack_without_store under the chunk path, no 30 s worker ticks) is found, shrunk, written as a
scenario and replayed by `engram-harness run`. This is also the explore smoke test
(about 40 s; timing goals live in bench/explore.py, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.explore.execute import play
from engram_sync_kit.harness.explore.explorer import replay_scenario
from engram_sync_kit.harness.explore.operations import GeneratedStep, GeneratorSettings, generate_history
from engram_sync_kit.harness.explore.scenario_out import scenario_document, scenario_yaml
from engram_sync_kit.harness.scenario.loader import load_scenario

pytestmark = pytest.mark.engram

#: enroll my-app, ack_without_store, two sessions of my-app, the manual sync that loses them (17 until the
#: pool grew by issue 38's revise, relate, reenqueue, move_session, clock_jump and kill9)
PLANTED_SEED = 218
SETTINGS = GeneratorSettings(autosync=False, nemesis=("ack_without_store",), steps=8)
HARNESS = str(Path(sys.executable).parent / "engram-harness")


def _explore(
    engram_bin: Path, tmp_path: Path, *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`engram-harness explore` on the chunk path with the planted nemesis, and the JSON report it wrote."""
    report_path = tmp_path / "explore.json"
    common = ["--engram", str(engram_bin), "--no-autosync", "--nemesis", "ack_without_store"]
    result = subprocess.run(
        [
            HARNESS,
            "explore",
            *common,
            "--steps",
            str(SETTINGS.steps),
            *args,
            "--out",
            str(tmp_path / "out"),
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    return result, report


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
    result, report = _explore(
        engram_bin, tmp_path, "--replay", str(PLANTED_SEED), "--budget", "60", timeout=180
    )
    assert result.returncode == 1, result.stdout + result.stderr
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
    assert f"I1 (nemesis's, the class of engram#264) seed {PLANTED_SEED}" in result.stdout

    replay = subprocess.run(
        [HARNESS, "run", str(scenario), "--engram", str(engram_bin)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert replay.returncode == 1, replay.stdout
    assert "acked, never received" in replay.stdout


def test_histories_side_by_side_on_the_real_engram_each_find_their_loss_and_keep_their_seed(
    engram_bin: Path, tmp_path: Path
) -> None:
    result, report = _explore(
        engram_bin, tmp_path, "--seed", str(PLANTED_SEED), "--parallel", "3", "--no-shrink", "--budget", "8"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert report["errors"] == [] and report["histories"] >= 3
    seeds = [violation["seed"] for violation in report["violations"]]
    assert PLANTED_SEED in seeds and seeds == sorted(seeds)  # the planted history, whichever player got it
    assert {violation["upstream"] for violation in report["violations"]} == {"engram#264"}


SETTLE = GeneratedStep("settle", {"sync": {"via": "autosync", "cycles": 2, "timeout": 100}})
#: #742's class: a CLI save without --project journals project "" rows at the head of the legacy lane
NO_PROJECT_HISTORY = [
    GeneratedStep("save_cli", {"save": {"in": "home", "title": "t", "content": "c", "via": "cli"}}),
    GeneratedStep("enroll", {"enroll": "other-repo"}),
    GeneratedStep("save_mcp", {"save": {"in": "other", "title": "t2", "content": "c"}}),
    SETTLE,
]
#: #1224's class: a session started without a directory, in an enrolled project
NO_DIRECTORY_HISTORY = [
    GeneratedStep("enroll", {"enroll": "other-repo"}),
    GeneratedStep(
        "session", {"session": {"id": "s1", "project": "other-repo", "in": "other", "directory": "omit"}}
    ),
    SETTLE,
]


def test_the_worker_blocked_by_engrams_own_rows_is_named_as_the_upstream_bug_it_rediscovers(
    engram_bin: Path,
) -> None:
    """I5 on the real worker (two 30 s cycles, both histories side by side): each names the filed bug whose
    class the refused head of the lane is."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        no_project, no_directory = pool.map(
            lambda history: play(engram_bin, history, autosync=True),
            [NO_PROJECT_HISTORY, NO_DIRECTORY_HISTORY],
        )
    for outcome, kind, issue in [
        (no_project, "I5/refused-session-project", 742),
        (no_directory, "I5/refused-session-directory", 1224),
    ]:
        assert outcome.error == "", outcome.error
        assert [(v.kind, v.upstream) for v in outcome.violations] == [(kind, issue)], outcome.violations
        assert outcome.violation_step == len(outcome.steps) - 1  # after the settle, not before


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
        # the replay is judged by the harness's own nothing-lost invariant only: no expectation of its own
        [HARNESS, "run", str(path), "--engram", str(engram_bin), "--allow-unjudged"],
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
    assert 'cloud/"" 0/2 delivered, cloud/my-app 2/2 delivered' in replay.stdout


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
    assert "cloud/my-app 2/2 delivered" in replay.stdout  # the copy and its session, both delivered


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


#: a delivered memory, then a plain dir's memory claimed into my-app: every I4 kind can show after it
I4_HISTORY = [
    GeneratedStep("enroll", {"enroll": "my-app"}),
    GeneratedStep("save_mcp", {"save": {"in": "app", "title": "delivered", "content": "c"}}),
    GeneratedStep("sync_manual", {"sync": {"via": "manual", "project": "my-app", "in": "app"}}),
    GeneratedStep("save_mcp", {"save": {"in": "scratch", "title": "plain dir", "content": "c"}}),
    GeneratedStep("triage", CLAIM_HISTORY[2].raw),
]
#: the canary's own triage with one bug planted per I4 kind (a test double of engram-canary: the real CLI
#: with one of its functions replaced), so each kind's scenario can be replayed while the bug holds
PLANTED_BUGS = {
    "copy-without-session": """
triage.with_referenced_sessions = lambda db, plan: plan
inbox_cli.with_referenced_sessions = triage.with_referenced_sessions
""",
    "new-refusal": """
real_preflight = triage.preflight_copy
def preflight_copy(row, project, *, repair):
    outcome = real_preflight(row, project, repair=repair)
    if isinstance(outcome, triage.Copy) and row.entity == "observation":
        body = json.loads(outcome.payload)
        body.pop("title")
        outcome = dataclasses.replace(outcome, payload=json.dumps(body))
    return outcome
triage.preflight_copy = preflight_copy
""",
    "no-copy": """
real_execute, real_log = triage.execute_plan, triage._log
triage.execute_plan = lambda db, plan, prepared=None: real_execute(db, dataclasses.replace(plan, copies=[]))
triage._log = lambda path, db, backup, plan, seqs, pruned: real_log(
    path, db, backup, dataclasses.replace(plan, copies=[]), (), pruned
)
""",
    "lost": """
real_log = triage._log
triage._log = lambda path, db, backup, plan, seqs, pruned: real_log(
    path, db, backup, dataclasses.replace(plan, acks=[]), seqs, pruned
)
""",
    "delivers-less": """
real_execute = triage.execute_plan
def execute_plan(db, plan, prepared=None):
    seqs = real_execute(db, plan, prepared)
    db.connection.execute(
        "UPDATE sync_mutations SET payload = json_set(payload, '$.title', 'rewritten') WHERE seq = "
        "(SELECT MIN(seq) FROM sync_mutations WHERE entity = 'observation' AND acked_at IS NOT NULL)"
    )
    return seqs
triage.execute_plan = execute_plan
""",
}


def _planted_canary(directory: Path, kind: str) -> Path:
    script = directory / f"engram-canary-{kind}"
    script.write_text(
        f"#!{sys.executable}\n"
        "import dataclasses, json\n"
        "from engram_sync_kit.canary.inbox import cli as inbox_cli\n"
        "from engram_sync_kit.canary.triage import plan as triage\n"
        "from engram_sync_kit.canary.cli import main\n"
        f"{PLANTED_BUGS[kind]}\n"
        "main()\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("kind", sorted(PLANTED_BUGS))
def test_every_i4_kind_is_caught_and_its_scenario_fails_while_the_bug_holds_and_passes_without_it(
    engram_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from engram_sync_kit.harness.scenario import steps

    real_kit_command = steps._kit_command
    planted = _planted_canary(tmp_path, kind)
    monkeypatch.setattr(
        steps,
        "_kit_command",
        lambda name: str(planted) if name == "engram-canary" else real_kit_command(name),
    )
    outcome = play(engram_bin, I4_HISTORY, autosync=False)
    assert outcome.error == "", outcome.error
    kinds = [v.kind for v in outcome.violations]
    [violation] = [v for v in outcome.violations if v.kind == f"I4/{kind}"] or pytest.fail(f"found {kinds}")
    assert violation.owner == "ours" and outcome.violation_step == len(I4_HISTORY) - 1
    path = tmp_path / f"{kind}.scenario.yaml"
    steps_out = [*(step.raw for step in I4_HISTORY), *violation.extra_steps]
    path.write_text(
        scenario_yaml(
            scenario_document(kind, steps_out, autosync=False, expectations=violation.expectations)
        ),
        encoding="utf-8",
    )
    replays, detail = replay_scenario(engram_bin, path)
    assert replays is True, detail
    monkeypatch.setattr(steps, "_kit_command", real_kit_command)
    assert replay_scenario(engram_bin, path) == (False, "every expectation held")
