"""Scenarios played against the real engram v1.20.0 and a fake cloud process (marker: engram).

These use the manual `engram sync --cloud` path, which runs at once; the autosync path is exercised by
the shipped scenarios under scenarios/ (collected by the harness's own pytest plugin).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from rich.console import Console

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.report import print_result
from engram_sync_kit.harness.scenario.results import ScenarioResult, judge
from engram_sync_kit.harness.scenario.runner import run_scenario

pytestmark = pytest.mark.engram

MANUAL = """\
name: manual
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
  scratch: {dir: Scratch}
steps:
  - enroll: my-app
  - save: {in: app, title: kept, content: enrolled work, as: kept}
  - save: {in: scratch, title: noise, content: from a plain dir}
  - sync: {via: manual, project: my-app, in: app}
"""


def play(tmp_path: Path, engram_bin: Path, text: str, **options: object) -> ScenarioResult:
    scenario = parse_scenario(text, tmp_path / "t.scenario.yaml")
    return run_scenario(scenario, engram_bin, root=tmp_path / "world", **options)  # type: ignore[arg-type]


def rendered(result: ScenarioResult) -> str:
    buffer = io.StringIO()
    print_result(Console(file=buffer, width=200, color_system=None), result, "all")
    return buffer.getvalue()


def test_a_manual_sync_delivers_the_enrolled_key_and_strands_the_basename_key(
    tmp_path: Path, engram_bin: Path
) -> None:
    result = play(tmp_path, engram_bin, MANUAL)
    assert judge(result, "all") == "passed", rendered(result)
    rows = {(row.lane, row.project): row.counts() for row in result.lanes.rows}
    assert rows == {
        ("cloud", "my-app"): {
            "enqueued": 2,
            "acked": 2,
            "delivered": 2,
            "stranded": 0,
            "lost": 0,
            "duplicated": 0,
        },
        ("cloud", "scratch"): {
            "enqueued": 2,
            "acked": 0,
            "delivered": 0,
            "stranded": 2,
            "lost": 0,
            "duplicated": 0,
        },
    }
    assert result.sync_state_targets == ["cloud", "cloud:my-app", "cloud:scratch"]
    assert [step.status for step in result.steps] == ["ok"] * 4


def test_a_failure_shows_the_step_the_replay_both_lane_tables_stderr_and_the_journal(
    tmp_path: Path, engram_bin: Path
) -> None:
    text = MANUAL + (
        "  - run: {args: [cloud, unenroll, my-app]}\n"
        "expect:\n"
        "  - tag: design\n"
        "    lanes: {rows: [{lane: 'cloud:my-app', project: my-app, delivered: 1}]}\n"
    )
    result = play(tmp_path, engram_bin, text)
    assert result.status == "failed"
    report = rendered(result)
    assert (
        "failed step 5 at " in report
        and "t.scenario.yaml:11: engram cloud unenroll my-app exited 1" in report
    )
    assert "unknown cloud command: unenroll" in report
    assert "  ✓ 1. {enroll: my-app}" in report and "  ✗ 5. {run: {args: [cloud, unenroll, my-app]}}" in report
    assert "actual lanes" in report and "expected (failing lane expectations)" in report
    assert "cloud:my-app/my-app delivered: expected 1, got 0" in report
    assert "engram stderr:" in report and "cloud journal (last entries):" in report
    assert '"path": "/sync/push"' in report


def test_unenroll_is_unsupported_on_v120_unless_the_step_may_be_skipped(
    tmp_path: Path, engram_bin: Path
) -> None:
    failing = play(
        tmp_path / "a", engram_bin, "name: u\ncloud: {autosync: false}\nsteps:\n  - unenroll: my-app\n"
    )
    assert failing.status == "failed"
    assert failing.steps[0].error.startswith(
        "engram 1.20.0 has no `engram cloud unenroll`: `engram cloud` lists bootstrap, config, enroll, repair, "
        "serve, status, upgrade"
    )
    skipped = play(
        tmp_path / "b",
        engram_bin,
        "name: u\ncloud: {autosync: false}\nsteps:\n  - unenroll: {project: my-app, if_unsupported: skip}\n",
    )
    assert skipped.status == "passed" and skipped.steps[0].status == "skipped"


def test_expect_error_turns_an_engram_refusal_into_the_expected_outcome(
    tmp_path: Path, engram_bin: Path
) -> None:
    text = (
        "name: e\ncloud: {autosync: false}\nsteps:\n"
        "  - run: {args: [cloud, enroll], expect_error: 'exited 1'}\n"
        "  - run: {args: [version], expect_error: 'exited'}\n"
    )
    result = play(tmp_path, engram_bin, text)
    assert [step.status for step in result.steps] == ["ok", "failed"]
    assert result.steps[1].error == "expected an error containing 'exited', the step succeeded"


def test_a_run_against_a_database_copy_leaves_the_original_untouched(
    tmp_path: Path, engram_bin: Path
) -> None:
    source = EngramEnvironment(binary=engram_bin, root=tmp_path / "real").prepare()
    assert source.run(["save", "old", "memory", "--project", "legacy-key"]).returncode == 0
    before = hashlib.sha256(source.db_path.read_bytes()).hexdigest()
    siblings = sorted(p.name for p in source.data_dir.iterdir())
    result = play(tmp_path, engram_bin, MANUAL, db_copy_source=source.db_path)
    assert judge(result, "all") == "passed", rendered(result)
    assert result.lanes.row("cloud", "legacy-key") is not None
    assert hashlib.sha256(source.db_path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in source.data_dir.iterdir()) == siblings


def test_a_scenario_that_outlives_its_timeout_stops_at_the_next_step(
    tmp_path: Path, engram_bin: Path
) -> None:
    result = play(
        tmp_path, engram_bin, "name: slow\ntimeout: 0.001\ncloud: {autosync: false}\nsteps:\n  - enroll: a\n"
    )
    assert result.status == "failed"
    assert (
        result.steps[0].error
        == "the scenario's timeout ran out before this step (raise `timeout:` in the scenario)"
    )


def test_rows_acked_before_a_run_on_a_copy_are_not_lost(tmp_path: Path, engram_bin: Path) -> None:
    from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

    source = EngramEnvironment(binary=engram_bin, root=tmp_path / "real").prepare()
    with start_fake_cloud(FakeCloudConfig(token="t", server_version="v1.20")) as cloud:
        cloud_env = {"ENGRAM_CLOUD_SERVER": cloud.base_url, "ENGRAM_CLOUD_TOKEN": "t"}
        assert source.run(["cloud", "enroll", "earlier"]).returncode == 0
        assert source.run(["save", "old", "memory", "--project", "earlier"]).returncode == 0
        synced = source.run(["sync", "--cloud", "--project", "earlier"], env=cloud_env)
        assert synced.returncode == 0, synced.stderr
    result = play(tmp_path, engram_bin, MANUAL, db_copy_source=source.db_path)
    row = result.lanes.row("cloud", "earlier")
    assert row is not None and row.acked_before_run == 2 and row.lost == 0, rendered(result)
    assert judge(result, "all") == "passed"
