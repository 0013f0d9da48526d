"""`engram-harness run` and `schema` as a user runs them (marker engram where the real binary plays)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

HARNESS = str(Path(sys.executable).parent / "engram-harness")
SCENARIO = """\
name: cli
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
steps:
  - enroll: my-app
  - save: {in: app, title: t, content: c}
  - sync: {via: manual, project: my-app}
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    lanes: {exact: true, rows: [{lane: cloud, project: my-app, enqueued: 2, delivered: 2}]}
  - tag: design
    why: telemetry is not enqueued
    lanes: {rows: [{lane: cloud, project: my-app, enqueued: 1}]}
"""


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESS, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_schema_prints_a_json_schema(tmp_path: Path) -> None:
    result = harness("schema", cwd=tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$id"] == "engram-harness/scenario/v1" and schema["additionalProperties"] is False


def test_an_invalid_scenario_exits_1_with_file_line_and_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.scenario.yaml").write_text("name: x\nsteps:\n  - savee: {}\n")
    result = harness("run", "bad.scenario.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(
        "Error: bad.scenario.yaml:3: steps.0.savee: unknown step 'savee' (did you mean 'save'?); allowed: session,"
    )
    assert "Traceback" not in result.stderr + result.stdout


def test_no_scenarios_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = harness("run", "empty", cwd=tmp_path)
    assert result.returncode == 3 and "no *.scenario.yaml under empty" in result.stderr


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_report_in_a_missing_directory_is_refused_before_running(tmp_path: Path, option: str) -> None:
    (tmp_path / "cli.scenario.yaml").write_text(SCENARIO)
    result = harness("run", "cli.scenario.yaml", option, "missing/report.out", cwd=tmp_path)
    assert result.returncode == 3
    assert result.stderr == (
        f"Error: {option} missing/report.out: no such directory missing (see engram-harness run --help)\n"
    )
    assert "running" not in result.stdout and "Traceback" not in result.stderr


def test_usage_errors_are_one_line_and_exit_3(tmp_path: Path) -> None:
    result = harness("make-deployment", "--scale", "-1", "--out", "x.db", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        "Error: Invalid value for '--scale': -1.0 is not in the range x>0. "
        "(see engram-harness make-deployment --help)\n"
    )


def test_schema_out_in_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    result = harness("schema", "--out", "missing/schema.json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "Error: --out missing/schema.json: cannot write (No such file or directory)\n"


@pytest.mark.engram
def test_expect_selects_which_tagged_expectations_decide_the_exit_code(
    tmp_path: Path, engram_bin: Path
) -> None:
    (tmp_path / "cli.scenario.yaml").write_text(SCENARIO)
    baseline = harness(
        "run", "cli.scenario.yaml", "--engram", str(engram_bin), "--expect", "baseline",
        "--json", "report.json", "--junit", "junit.xml", cwd=tmp_path,
    )  # fmt: skip
    assert baseline.returncode == 0, baseline.stdout[-3000:]
    assert "  cli ✓ 3. sync" in baseline.stdout
    assert "fail (not selected)" in baseline.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    (scenario,) = report["scenarios"]
    assert report["schema"] == "engram-harness/report/v1" and report["passed"] is True
    assert (
        scenario["name"] == "cli"
        and scenario["status"] == "passed"
        and scenario["engram_version"] == "1.20.0"
    )
    assert scenario["lanes"][0] == {
        "lane": "cloud", "project": "my-app", "enqueued": 2, "acked": 2, "delivered": 2, "stranded": 0,
        "lost": 0, "duplicated": 0, "delivered_as_current_state": 0, "acked_before_run": 0, "triaged": 0,
    }  # fmt: skip
    assert [e["status"] for e in scenario["expectations"]] == ["pass", "fail", "pass"]
    suite = ElementTree.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0"

    everything = harness(
        "run", "cli.scenario.yaml", "--engram", str(engram_bin), "--junit", "all.xml", cwd=tmp_path
    )
    assert everything.returncode == 1
    assert "cloud/my-app enqueued: expected 1, got 2" in everything.stdout
    failure = ElementTree.parse(tmp_path / "all.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None and "[design] lanes" in (failure.text or "")


@pytest.mark.engram
def test_a_version_matrix_prints_scenario_by_version(tmp_path: Path, engram_bin: Path) -> None:
    (tmp_path / "cli.scenario.yaml").write_text(SCENARIO)
    result = harness(
        "run",
        "cli.scenario.yaml",
        "--engram-version",
        "v1.20.0,v1.20.0",
        "--expect",
        "baseline",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert "┃ scenario ┃ 1.20.0 ┃" in result.stdout and "│ cli      │ passed │" in result.stdout


def test_without_an_engram_binary_run_fails_in_one_line_unless_skipping_is_asked(tmp_path: Path) -> None:
    # No ENGRAM_BIN, an empty cache and no Go to build one: before, nothing said how to point at a binary.
    (tmp_path / "cli.scenario.yaml").write_text(SCENARIO)
    env = {
        "PATH": str(Path(HARNESS).parent),
        "ENGRAM_KIT_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
    }
    result = subprocess.run(
        [HARNESS, "run", "cli.scenario.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "Error: no engram binary: give --engram PATH, set ENGRAM_BIN=PATH, or run `engram-harness engram "
        "install` (building v1.20.0 failed: no Go toolchain on PATH; engram is built with `go install` "
        "(Go 1.25+)); --skip-without-engram skips the scenarios instead\n"
    )
    skipped = subprocess.run(
        [HARNESS, "run", "cli.scenario.yaml", "--skip-without-engram"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (skipped.returncode, skipped.stdout.strip()) == (
        0,
        "skipped 1 scenario(s): no engram binary (--skip-without-engram)",
    )
    missing = subprocess.run(
        [HARNESS, "run", "cli.scenario.yaml"],
        cwd=tmp_path,
        env={**env, "ENGRAM_BIN": str(tmp_path / "nowhere")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        missing.returncode == 3
        and f"ENGRAM_BIN={tmp_path / 'nowhere'}: not an executable file" in missing.stderr
    )


@pytest.mark.engram
def test_keep_dir_keeps_every_run_directory_where_the_user_says(tmp_path: Path, engram_bin: Path) -> None:
    # Before: --keep was a flag and kept directories landed in the shared temporary directory.
    (tmp_path / "cli.scenario.yaml").write_text(SCENARIO)
    result = harness(
        "run", "cli.scenario.yaml", "--engram", str(engram_bin), "--keep", "runs/here", cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the design expectation fails
    (kept,) = (tmp_path / "runs" / "here").iterdir()
    assert kept.name.startswith("cli-") and (kept / "evidence").is_dir()
    assert f"evidence kept in {kept}/evidence" in result.stdout.replace("\n", "")
    refused = harness("run", "--keep", ".", "cli.scenario.yaml", cwd=tmp_path)
    assert refused.returncode == 3 and "--keep .: that holds scenarios; write --keep=DIR" in refused.stderr
