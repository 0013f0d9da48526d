"""Evidence, a second device, raw HTTP and local-data checks, against the real engram v1.20.0 (marker: engram).

Only the manual chunk path (`engram sync --cloud`, `--import`), which runs at once: the autosync path is
played by scenarios/upstream/ under the pytest plugin.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.report import as_json, print_result
from engram_sync_kit.harness.scenario.results import ScenarioResult, judge
from engram_sync_kit.harness.scenario.runner import run_scenario

pytestmark = pytest.mark.engram

TWO_DEVICES = """\
name: another device's memory arrives here
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
steps:
  - device:
      name: laptop-b
      steps:
        - enroll: my-app
        - save: {in: app, title: written on laptop b, content: must replicate, via: cli, project: my-app}
        - sync: {via: manual, project: my-app, in: app, label: b-push}
  - enroll: my-app
  - observe: before-import
  - run: {args: [sync, --cloud, --import, --project, my-app], in: app, as: import, label: import}
  - observe: after-import
  - session: {id: s-nodir, project: my-app, directory: omit}
  - session: {id: s-dir, project: my-app, directory: "{workspace:app}/elsewhere"}
  - http: {method: POST, path: /sessions, body: {id: s-empty, project: ""}, status: 400, as: empty-project}
expect:
  - {tag: design, local: {title: written on laptop b, project: my-app}}
  - {tag: design, local: {entity: session, key: s-nodir, project: my-app}}
  - {tag: design, local: {entity: session, key: s-empty, present: false}}
  - {tag: design, journal: {until: b-push, count: 2, match: {path: /sync/push, status: 200}}}
  - {tag: design, journal: {since: import, at_least: 2, match: {method: GET, transport: chunk, status: 200}}}
  - {tag: design, journal: {since: import, count: 0, match: {method: POST}}}
  - {tag: design, sync_state: {at: before-import, target: "cloud:my-app", absent: true}}
  - {tag: design, command: {of: import, stdout_contains: [Imported 1 new remote chunk], stdout_not_contains: [error]}}
  - {tag: design, stderr: {process: serve, not_contains: [panic]}}
"""


def play(tmp_path: Path, engram_bin: Path, text: str) -> ScenarioResult:
    scenario = parse_scenario(text, tmp_path / "t.scenario.yaml")
    return run_scenario(scenario, engram_bin, root=tmp_path / "world")


def rendered(result: ScenarioResult, *, verbose: bool) -> str:
    buffer = io.StringIO()
    print_result(Console(file=buffer, width=250, color_system=None), result, "all", verbose=verbose)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory: pytest.TempPathFactory, engram_bin: Path) -> ScenarioResult:
    return play(tmp_path_factory.mktemp("two"), engram_bin, TWO_DEVICES)


def test_a_second_device_pushes_and_this_device_imports_its_memory(two_devices: ScenarioResult) -> None:
    result = two_devices
    assert judge(result, "all") == "passed", rendered(result, verbose=True)
    assert [step.index for step in result.steps][:4] == ["1.1", "1.2", "1.3", "1"]
    assert result.steps[0].device == "laptop-b"


def test_the_evidence_is_in_the_kept_directory(two_devices: ScenarioResult) -> None:
    folder = Path(two_devices.root) / "evidence"
    files = sorted(path.name for path in folder.iterdir())
    assert files == [
        "commands.json",
        "devices.json",
        "journal.json",
        "observe.json",
        "received.json",
        "requests.json",
        "results.json",
        "stderr.txt",
        "steps.json",
        "sync_state.json",
    ]
    commands = json.loads((folder / "commands.json").read_text())
    imported = next(c for c in commands if c["args"][1:3] == ["sync", "--cloud"] and "--import" in c["args"])
    assert imported["exit"] == 0 and "Imported 1 new remote chunk" in imported["stdout"]
    assert any(c["device"] == "laptop-b" and c["args"][1] == "save" for c in commands)
    requests = json.loads((folder / "requests.json").read_text())
    no_directory = next(r for r in requests if r["body"] and r["body"].get("id") == "s-nodir")
    assert "directory" not in no_directory["body"] and no_directory["status"] == 201
    explicit = next(r for r in requests if r["body"] and r["body"].get("id") == "s-dir")
    assert explicit["body"]["directory"].endswith("/workspaces/my-app/elsewhere")
    observe = json.loads((folder / "observe.json").read_text())
    assert [row["target_key"] for row in observe["after-import"]["sync_state"]] == ["cloud", "cloud:my-app"]
    journal = json.loads((folder / "journal.json").read_text())
    assert {entry["path"] for entry in journal} >= {"/sync/push", "/sync/pull"}
    assert (Path(two_devices.root) / "devices" / "laptop-b" / "engram-data" / "engram.db").is_file()


def test_the_json_report_carries_the_evidence(two_devices: ScenarioResult) -> None:
    (scenario,) = as_json([two_devices], "all")["scenarios"]
    evidence = scenario["evidence"]
    assert set(evidence) >= {
        "journal",
        "received",
        "results",
        "commands",
        "requests",
        "observe",
        "sync_state",
        "logs",
    }
    assert evidence["results"]["empty-project"] == {
        "status": 400,
        "body": {"error": "id and project are required"},
    }
    assert (
        "logs/serve.log" in evidence["logs"] and "HTTP server listening" in evidence["logs"]["logs/serve.log"]
    )
    assert scenario["sync_state"][0]["target_key"] == "cloud"
    json.dumps(scenario)


def test_verbose_prints_every_piece_and_the_plain_report_the_sync_state(two_devices: ScenarioResult) -> None:
    plain = rendered(two_devices, verbose=False)
    assert "sync_state at the end" in plain and "cloud:my-app" in plain
    assert "cloud journal (" not in plain
    verbose = rendered(two_devices, verbose=True)
    for piece in (
        "sync_state at observe after-import",
        "sync_state of device laptop-b at the end",
        "results/import (checker or command answer):",
        "command on laptop-b: engram save written on laptop b",
        "Imported 1 new remote chunk",
        "http POST /sessions -> 400",
        "cloud journal (",
        '"path": "/sync/push"',
        "log logs/serve.log:",
    ):
        assert piece in verbose, piece


def test_a_local_check_on_an_absent_memory_fails_and_the_report_says_where_evidence_is(
    tmp_path: Path, engram_bin: Path
) -> None:
    text = TWO_DEVICES.split("expect:")[0] + (
        "expect:\n  - {tag: design, local: {title: never written, project: my-app}}\n"
        "  - {tag: design, sync_state: {target: cloud, lifecycle: healthy}}\n"
        "  - {tag: design, command: {of: import, stdout_not_contains: [Imported]}}\n"
    )
    result = play(tmp_path, engram_bin, text)
    details = [e.detail for e in result.expectations if e.status == "fail"]
    assert details == [
        "local {'entity': 'observation', 'title': 'never written', 'project': 'my-app'}: expected present, found none",
        "sync_state cloud at the end lifecycle: expected 'healthy', got 'pending'",
        "import: stdout has 'Imported'",
    ]
    report = rendered(result, verbose=False)
    assert f"evidence kept in {result.root}/evidence" in report
    assert (
        "results/import (the answer a failing check judged):" in report and "Imported 1 new remote" in report
    )


def test_an_http_step_with_an_unexpected_status_fails_the_step(tmp_path: Path, engram_bin: Path) -> None:
    text = (
        "name: http\ncloud: {autosync: false}\nsteps:\n"
        "  - http: {method: POST, path: /sessions, body: {id: s1, project: p}, status: 400}\n"
    )
    result = play(tmp_path, engram_bin, text)
    assert result.status == "failed"
    assert result.steps[0].error.startswith("engram serve POST /sessions answered 201, expected 400: ")


def test_a_refused_seed_and_a_failing_device_step_fail_their_steps(tmp_path: Path, engram_bin: Path) -> None:
    text = (
        "name: refusals\ncloud: {autosync: false}\nsteps:\n"
        "  - cloud: {seed: [{project: my-app, entity: observation, entity_key: k, payload: {title: t}}]}\n"
    )
    seeded = play(tmp_path / "seed", engram_bin, text)
    assert seeded.status == "failed"
    error = seeded.steps[0].error
    assert error.startswith("seeding the cloud: POST /sync/mutations/push answered "), error
    assert "observation payload" in error and "is required" in error  # the cloud's own refusal, 4xx or 5xx
    text = (
        "name: device\ncloud: {autosync: false}\nsteps:\n"
        "  - device: {name: laptop-b, steps: [{run: {args: [cloud, unenroll, my-app]}}]}\n"
        "  - enroll: never-reached\n"
    )
    device = play(tmp_path / "device", engram_bin, text)
    assert device.status == "failed"
    assert [(step.index, step.device, step.status) for step in device.steps] == [
        ("1.1", "laptop-b", "failed")
    ]
    assert "engram cloud unenroll my-app exited 1" in device.steps[0].error


def test_a_failing_save_answer_check_shows_the_answer_it_judged(tmp_path: Path, engram_bin: Path) -> None:
    text = """\
name: a save answer the check refuses
cloud: {autosync: false}
workspaces:
  app: {git: my-app}
steps:
  - save: {in: app, title: judged answer, content: shown on failure, via: cli, as: noisy}
expect:
  - {tag: design, save_answer: {of: noisy, warning: true}}
"""
    result = play(tmp_path, engram_bin, text)
    assert [e.status for e in result.expectations if "save_answer" in e.detail or "noisy" in e.detail] == [
        "fail"
    ]
    report = rendered(result, verbose=False)
    assert "results/noisy (the answer a failing check judged):" in report, report
    assert "judged answer" in report.split("results/noisy", 1)[1]
