"""HTTPS by default: each scenario's fake cloud serves TLS with a throwaway CA that engram gets as
SSL_CERT_FILE; `cloud: {tls: false}` keeps plain http; the JSON report names the URL used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engram

HARNESS = str(Path(sys.executable).parent / "engram-harness")
SCENARIO = """\
name: {name}
cloud: {{autosync: false{tls}}}
workspaces:
  app: {{git: my-app}}
steps:
  - enroll: my-app
  - save: {{in: app, title: t, content: c}}
  - sync: {{via: manual, project: my-app, in: app}}
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    lanes: {{rows: [{{lane: cloud, project: my-app, delivered: 2}}]}}
"""


@pytest.mark.parametrize("cloud", ["process", "inprocess"])
def test_the_cloud_is_https_unless_the_scenario_asks_for_http(
    cloud: str, engram_bin: Path, tmp_path: Path
) -> None:
    (tmp_path / "tls.scenario.yaml").write_text(SCENARIO.format(name="over-tls", tls=""))
    (tmp_path / "plain.scenario.yaml").write_text(SCENARIO.format(name="over-http", tls=", tls: false"))
    report = tmp_path / "report.json"
    done = subprocess.run(
        [HARNESS, "run", str(tmp_path), "--engram", str(engram_bin), "--cloud", cloud, "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    urls = {item["id"]: item["cloud_url"] for item in json.loads(report.read_text())["scenarios"]}
    # Two rows delivered over https prove engram trusted the throwaway CA (SSL_CERT_FILE).
    assert urls["tls"].startswith("https://127.0.0.1:")
    assert urls["plain"].startswith("http://127.0.0.1:")
