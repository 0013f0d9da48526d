"""`engram-harness run --cloud-url`: scenarios against a fake cloud that already runs (here a local
process over https with its CA and a control token, as compose runs one)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_sync_kit.fake_cloud.process import FakeCloudProcess

HARNESS = str(Path(sys.executable).parent / "engram-harness")
SCENARIO = """\
name: {name}
cloud: {{autosync: false, token: {token}, allowed_projects: [{allowed}]}}
workspaces:
  app: {{git: my-app}}
steps:
  - enroll: my-app
  - save: {{in: app, title: t, content: c}}
  - sync: {{via: manual, project: my-app, in: app}}
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    lanes: {{rows: [{{lane: cloud, project: my-app, delivered: {delivered}}}]}}
"""


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESS, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud-ca", __file__], "Error: --cloud-ca goes with --cloud-url"),
        (["--cloud-token", "t"], "Error: --cloud-token goes with --cloud-url"),
        (
            ["--cloud-url", "http://127.0.0.1:1", "--cloud", "docker"],
            "Error: --cloud and --cloud-url are exclusive",
        ),
        (
            ["--cloud-url", "127.0.0.1:8080"],
            "Error: --cloud-url 127.0.0.1:8080: give a base URL like https://",
        ),
        (
            ["--cloud-url", "http://127.0.0.1:1", "--cloud-ca", __file__],
            "Error: --cloud-ca needs an https://",
        ),
    ],
)
def test_cloud_url_usage_errors_are_one_line(args: list[str], message: str) -> None:
    done = harness("run", "scenarios/enrolled-legacy-lane.scenario.yaml", "--engram", "/bin/true", *args)
    assert done.returncode == 3
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


@pytest.fixture
def running_cloud(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    ca_file = tmp_path / "ca.pem"
    args = [
        "--port",
        "0",
        "--token",
        "url-token",
        "--control-token",
        "url-control",
        "--tls",
        "--ca-out",
        str(ca_file),
    ]
    with FakeCloudProcess(args, server_version="v1.20") as cloud:
        yield cloud.base_url, ca_file


@pytest.mark.engram
def test_scenarios_take_turns_on_a_running_cloud_each_with_its_own_allowlist(
    running_cloud: tuple[str, Path], engram_bin: Path, tmp_path: Path
) -> None:
    base_url, ca_file = running_cloud
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "b-open.scenario.yaml").write_text(
        SCENARIO.format(name="open", token="t", allowed='"*"', delivered=2)
    )
    (scenarios / "a-closed.scenario.yaml").write_text(
        SCENARIO.format(name="closed", token="t", allowed="other-app", delivered=0)
    )
    (scenarios / "c-no-auth.scenario.yaml").write_text(
        SCENARIO.format(name="no auth", token="null", allowed='"*"', delivered=0)
    )
    report = tmp_path / "report.json"
    done = harness(
        "run",
        str(scenarios),
        "--engram",
        str(engram_bin),
        "--cloud-url",
        base_url,
        "--cloud-token",
        "url-token",
        "--cloud-control-token",
        "url-control",
        "--cloud-ca",
        str(ca_file),
        "--expect",
        "baseline",
        "--json",
        str(report),
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    assert f"({base_url} cloud, 1 at a time)" in done.stdout
    results = {item["id"]: item for item in json.loads(report.read_text())["scenarios"]}
    assert results["b-open"]["status"] == "passed"
    assert results["b-open"]["cloud_url"] == base_url
    # The cloud took the first scenario's allowlist, and the second one's ("*") after it.
    assert results["a-closed"]["status"] == "failed"
    assert "status 403: forbidden: project is not allowed" in results["a-closed"]["steps"][2]["error"]
    assert (results["c-no-auth"]["status"], results["c-no-auth"]["error"]) == (
        "error",
        f"the scenario needs a cloud with no auth, and the cloud at {base_url} requires a token; "
        "run it with --cloud process",
    )
