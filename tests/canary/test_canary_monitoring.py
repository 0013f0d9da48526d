"""The fleet view (issue 12): per-key inbox and per-finding gauges, monitoring/'s alerting rules under
the real promtool, and a real Prometheus scraping node_exporter's textfile collector over a real engram
database, where the new-foreign-target alert fires and resolves after an enroll."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from canary_support import run_canary
from real_parts import missing

from harness.engram_env import EngramEnvironment
from harness.polling import eventually, free_port

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "engram-canary.rules.yml"


def prometheus_tools() -> tuple[str, str, str]:
    """prometheus, promtool, node_exporter: $ENGRAM_KIT_PROMETHEUS (scripts/prometheus.sh), else PATH."""
    listed = os.environ.get("ENGRAM_KIT_PROMETHEUS", "").split()
    found = (
        listed
        if len(listed) == 3
        else [
            shutil.which("prometheus") or "",
            shutil.which("promtool") or "",
            shutil.which("prometheus-node-exporter") or shutil.which("node_exporter") or "",
        ]
    )
    if not all(found):
        reason = "Prometheus, promtool or node_exporter is missing (scripts/prometheus.sh installs them)"
        missing(reason)
    return found[0], found[1], found[2]


def test_promtool_accepts_the_rules_and_their_unit_tests() -> None:
    _, promtool, _ = prometheus_tools()
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=MONITORING / "tests",
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_catches_a_rule_that_no_longer_fires(tmp_path: Path) -> None:
    """The unit tests can fail: a rule that stopped firing on a new target makes them exit non-zero."""
    _, promtool, _ = prometheus_tools()
    broken = tmp_path / "engram-canary.rules.yml"
    broken.write_text(
        RULES.read_text().replace(
            "engram_canary_new_foreign_targets > 0", "engram_canary_new_foreign_targets > 5"
        )
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(MONITORING / "tests" / "engram-canary.rules.test.yml", tests)
    tested = subprocess.run(
        [promtool, "test", "rules", "engram-canary.rules.test.yml"],
        cwd=tests,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode != 0
    assert "EngramCanaryNewForeignTarget" in tested.stdout + tested.stderr


@pytest.mark.engram
def test_the_dashboard_only_queries_metrics_the_textfile_has(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    saved = engram_world.run(["save", "t", "c", "--project", "side"])
    assert saved.returncode == 0, saved.stderr
    textfiles = tmp_path / "prom"
    textfiles.mkdir()
    run_canary(
        ["check", "--db", str(engram_world.db_path), "--textfile-dir", str(textfiles)], tmp_path / "xdg"
    )
    exposed = set(re.findall(r"^# TYPE (\w+) ", (textfiles / "engram_canary.prom").read_text(), re.MULTILINE))
    dashboard = json.loads((MONITORING / "grafana" / "engram-canary.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(engram_canary_\w+)", target["expr"])
    }
    rules = set(re.findall(r"\b(engram_canary_\w+)", RULES.read_text()))
    assert queried and rules
    assert queried - exposed == set()
    assert rules - exposed == set()


def test_textfile_gauges_per_inbox_key_and_per_finding_with_acknowledged_labels(
    engram_world_for_gauges: tuple[EngramEnvironment, Path],
) -> None:
    world, config_home = engram_world_for_gauges
    prom = (config_home.parent / "prom" / "engram_canary.prom").read_text()
    db = str(world.db_path)
    assert f'engram_canary_inbox_rows{{db="{db}",key="side",kind="memories"}} 1.0' in prom
    assert f'engram_canary_inbox_rows{{db="{db}",key="side",kind="telemetry"}} 1.0' in prom
    assert (
        f'engram_canary_finding_rows{{acknowledged="true",check="foreign_sync_target",db="{db}",key="",'
        'target_key="cloud:side"} 2.0'
    ) in prom
    assert f'engram_canary_acknowledged_findings{{db="{db}"}} 1.0' in prom
    assert f'engram_canary_new_foreign_targets{{db="{db}"}} 0.0' in prom


@pytest.fixture
def engram_world_for_gauges(
    engram_world: EngramEnvironment, tmp_path: Path
) -> tuple[EngramEnvironment, Path]:
    saved = engram_world.run(["save", "t", "c", "--project", "side"])
    assert saved.returncode == 0, saved.stderr
    config_home = tmp_path / "xdg"
    assert run_canary(["baseline", "--db", str(engram_world.db_path)], config_home).returncode == 0
    (tmp_path / "prom").mkdir()
    run_canary(
        ["check", "--db", str(engram_world.db_path), "--textfile-dir", str(tmp_path / "prom")], config_home
    )
    return engram_world, config_home


class Fleet:
    """node_exporter (textfile collector only) and Prometheus scraping it every second, on loopback."""

    def __init__(self, tmp_path: Path) -> None:
        prometheus, _, exporter = prometheus_tools()
        self.textfiles = tmp_path / "textfiles"
        self.textfiles.mkdir()
        exporter_port, self.port = free_port(), free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n  - job_name: node\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exporter_port}']\n"
        )
        self.logs = [(tmp_path / "exporter.log").open("wb"), (tmp_path / "prometheus.log").open("wb")]
        self.processes = [
            subprocess.Popen(
                [
                    exporter,
                    f"--web.listen-address=127.0.0.1:{exporter_port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={self.textfiles}",
                ],
                stdout=self.logs[0],
                stderr=subprocess.STDOUT,
            ),
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=self.logs[1],
                stderr=subprocess.STDOUT,
            ),
        ]
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=5)

    def api(self, path: str, **params: str) -> Any:
        try:
            response = self.http.get(path, params=params)
        except httpx.HTTPError:
            return None
        return response.json()["data"] if response.status_code == 200 else None

    def alerts(self, name: str) -> list[dict[str, Any]]:
        data = self.api("/api/v1/alerts") or {"alerts": []}
        return [alert for alert in data["alerts"] if alert["labels"]["alertname"] == name]

    def close(self) -> None:
        self.http.close()
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for log in self.logs:
            log.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.mark.engram
def test_prometheus_fires_for_a_new_foreign_target_and_resolves_after_an_enroll(
    engram_world: EngramEnvironment, fleet: Fleet, tmp_path: Path
) -> None:
    db = str(engram_world.db_path)

    def check() -> None:
        run_canary(["check", "--db", db, "--textfile-dir", str(fleet.textfiles)], tmp_path / "xdg")

    check()
    eventually(
        lambda: fleet.api("/api/v1/query", query="engram_canary_new_foreign_targets == 0") or None,
        timeout=60,
        what="Prometheus scraping a clean textfile",
        interval=0.5,
    )
    assert fleet.alerts("EngramCanaryNewForeignTarget") == []

    saved = engram_world.run(["save", "a note", "content", "--project", "scratch"])
    assert saved.returncode == 0, saved.stderr
    check()
    firing = eventually(
        lambda: [a for a in fleet.alerts("EngramCanaryNewForeignTarget") if a["state"] == "firing"] or None,
        timeout=60,
        what="the alert to fire",
        interval=0.5,
    )
    assert firing[0]["labels"]["db"] == db
    assert firing[0]["annotations"]["summary"].startswith(
        "engram: 1 unacknowledged foreign sync target(s) on "
    )

    enrolled = engram_world.run(["cloud", "enroll", "scratch"])
    assert enrolled.returncode == 0, enrolled.stderr
    check()
    eventually(
        lambda: fleet.alerts("EngramCanaryNewForeignTarget") == [] or None,
        timeout=60,
        what="the alert to resolve",
        interval=0.5,
    )
