"""Real monitoring parts on loopback for the fleet-view tests: textfile-only node_exporters, one Prometheus
with monitoring/'s rules, one Alertmanager with monitoring/alertmanager.yml, and a webhook that records
every notification with the moment it arrived."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx
import yaml
from real_parts import missing

from engram_sync_kit.harness.polling import free_port

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "engram-canary.rules.yml"
ALERTMANAGER_CONFIG = MONITORING / "alertmanager.yml"


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
        missing("Prometheus, promtool or node_exporter is missing (scripts/prometheus.sh installs them)")
    return found[0], found[1], found[2]


def alertmanager_tools() -> tuple[str, str]:
    """alertmanager, amtool: $ENGRAM_KIT_ALERTMANAGER (scripts/alertmanager.sh), else PATH."""
    listed = os.environ.get("ENGRAM_KIT_ALERTMANAGER", "").split()
    found = (
        listed
        if len(listed) == 2
        else [
            shutil.which("prometheus-alertmanager") or shutil.which("alertmanager") or "",
            shutil.which("amtool") or "",
        ]
    )
    if not all(found):
        missing("Alertmanager or amtool is missing (scripts/alertmanager.sh installs them)")
    return found[0], found[1]


@dataclass(frozen=True)
class Notification:
    received: float  # time.time() when the webhook got it
    body: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.body["status"])

    @property
    def group(self) -> dict[str, str]:
        return dict(self.body["groupLabels"])

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return list(self.body["alerts"])


class Webhook:
    """An HTTP receiver for Alertmanager's webhook_configs that keeps every notification in order."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.lock = threading.Lock()
        received = self.notifications
        lock = self.lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                with lock:
                    received.append(Notification(time.time(), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/engram-canary"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fleet-webhook", daemon=True)
        self.thread.start()

    def received(self) -> list[Notification]:
        with self.lock:
            return list(self.notifications)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


class Fleet:
    """One textfile-only node_exporter per machine, Prometheus scraping them and evaluating monitoring/'s
    rules every second, and Alertmanager with monitoring/alertmanager.yml sending to a webhook.

    Two settings differ from what ships, for the test's wall time, and only these: every `for:` of the
    rules is shortened to FOR (EngramCanaryWarning's 20 minutes would otherwise hide the inhibition),
    and Alertmanager's group_wait/group_interval are GROUP_WAIT/GROUP_INTERVAL."""

    FOR: str | None = "2s"
    GROUP_WAIT: str | None = "1s"
    GROUP_INTERVAL: str | None = "2s"
    SCRAPE_INTERVAL = "1s"  # and evaluation interval

    def __init__(self, tmp_path: Path, machines: list[str], webhook: Webhook) -> None:
        prometheus, _, exporter = prometheus_tools()
        alertmanager, _ = alertmanager_tools()
        self.textfiles = {machine: tmp_path / "textfiles" / machine for machine in machines}
        rules = tmp_path / "engram-canary.rules.yml"
        shipped_rules = yaml.safe_load(RULES.read_text())
        for group in shipped_rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule and self.FOR is not None:
                    rule["for"] = self.FOR
        rules.write_text(yaml.safe_dump(shipped_rules, sort_keys=False))
        routing = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
        if self.GROUP_WAIT is not None and self.GROUP_INTERVAL is not None:
            routing["route"].update(group_wait=self.GROUP_WAIT, group_interval=self.GROUP_INTERVAL)
        for receiver in routing["receivers"]:
            for webhook_config in receiver.get("webhook_configs", []):
                webhook_config["url"] = webhook.url
        alertmanager_config = tmp_path / "alertmanager.yml"
        alertmanager_config.write_text(yaml.safe_dump(routing, sort_keys=False))

        self.logs: list[IO[bytes]] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self.tmp_path = tmp_path
        self.exporter_commands: dict[str, list[str]] = {}
        self.exporters: dict[str, subprocess.Popen[bytes]] = {}
        targets = []
        for machine, directory in self.textfiles.items():
            directory.mkdir(parents=True)
            port = free_port()
            targets.append(
                f"      - targets: ['127.0.0.1:{port}']\n        labels: {{instance: {machine}}}\n"
            )
            self.exporter_commands[machine] = [
                exporter,
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={directory}",
            ]
            self.start_exporter(machine)
        self.alertmanager_port, self.port = free_port(), free_port()
        self._start(
            "alertmanager",
            [
                alertmanager,
                f"--config.file={alertmanager_config}",
                f"--storage.path={tmp_path / 'alertmanager'}",
                f"--web.listen-address=127.0.0.1:{self.alertmanager_port}",
                "--cluster.listen-address=",
            ],
            tmp_path,
        )
        config = tmp_path / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {self.SCRAPE_INTERVAL}\n  evaluation_interval: {self.SCRAPE_INTERVAL}\n"
            f"rule_files:\n  - {rules}\n"
            "alerting:\n  alertmanagers:\n    - static_configs:\n"
            f"        - targets: ['127.0.0.1:{self.alertmanager_port}']\n"
            "scrape_configs:\n  - job_name: node\n    static_configs:\n" + "".join(targets)
        )
        self._start(
            "prometheus",
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            tmp_path,
        )
        self.http = httpx.Client(timeout=5)

    def _start(self, name: str, command: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("ab")
        self.logs.append(log)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def start_exporter(self, machine: str) -> None:
        """(Re)start MACHINE's node_exporter on its port: Prometheus scrapes it again."""
        self.exporters[machine] = self._start(
            f"exporter-{machine}", self.exporter_commands[machine], self.tmp_path
        )

    def kill_exporter(self, machine: str) -> None:
        """MACHINE goes quiet: its node_exporter is killed, so `up` turns 0 and its series go stale."""
        process = self.exporters.pop(machine)
        process.kill()
        process.wait(timeout=10)

    def textfile(self, machine: str) -> Path:
        """The one textfile the machine's check writes (one database per machine here)."""
        [path] = self.textfiles[machine].glob("engram_canary_*.prom")
        return path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result, [] when Prometheus does not answer."""
        return list((self.api("/api/v1/query", query=expr) or {"result": []})["result"])

    def api(self, path: str, **params: str) -> Any:
        try:
            response = self.http.get(f"http://127.0.0.1:{self.port}{path}", params=params)
        except httpx.HTTPError:
            return None
        return response.json()["data"] if response.status_code == 200 else None

    def alerts(self, name: str | None = None) -> list[dict[str, Any]]:
        data = self.api("/api/v1/alerts") or {"alerts": []}
        return [alert for alert in data["alerts"] if name is None or alert["labels"]["alertname"] == name]

    def alertmanager_alerts(self) -> list[dict[str, Any]] | None:
        try:
            response = self.http.get(f"http://127.0.0.1:{self.alertmanager_port}/api/v2/alerts")
        except httpx.HTTPError:
            return None
        return list(response.json()) if response.status_code == 200 else None

    def close(self) -> None:
        self.http.close()
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for log in self.logs:
            log.close()
