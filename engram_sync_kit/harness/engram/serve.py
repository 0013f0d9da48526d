"""`engram serve` as a scenario runs it: on a free port, optionally with the autosync worker; every wait
is a bounded poll of its /health."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

import httpx

from engram_sync_kit.engram_contract import children
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.errors import StepFailed
from engram_sync_kit.harness.evidence import Evidence
from engram_sync_kit.harness.polling import free_port


class EngramDaemon:
    """`engram serve` on a free port, optionally with the autosync worker (ENGRAM_CLOUD_AUTOSYNC=1)."""

    def __init__(
        self,
        env: EngramEnvironment,
        extra_env: dict[str, str],
        log_path: Path,
        evidence: Evidence | None = None,
    ) -> None:
        self._evidence = evidence
        self._env = env
        self._extra_env = extra_env
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port = 0
        self.autosync = False
        self.http = httpx.Client(timeout=30.0)
        # Seconds per start attempt; a 1M-row database makes engram serve take longer than 20 s.
        self.ready_timeout = 20.0

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, autosync: bool) -> None:
        self.stop()
        self.autosync = autosync
        for _attempt in range(3):
            self.port = free_port()
            overrides = dict(self._extra_env, ENGRAM_PORT=str(self.port))
            if autosync:
                overrides["ENGRAM_CLOUD_AUTOSYNC"] = "1"
            self._log = self.log_path.open("ab")
            self._process = children.track(
                subprocess.Popen(
                    [str(self._env.binary), "serve"],
                    cwd=self._env.home,
                    env=self._env.env(overrides),
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            if self._wait_ready():
                return
            self.stop()
        raise StepFailed(f"engram serve did not become ready; its log:\n{self.log_text()[-2000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if not self.running:
                return False
            try:
                if self.http.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            children.forget(self._process)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL, as `kill -9` would: no shutdown, so the worker neither finishes its cycle nor releases
        its sync lease (v1.20 releases it only when Run returns)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self.stop()  # forgets the dead process and closes its log

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        if not self.running:
            raise StepFailed(f"engram serve is not running (needed for {method} {path})")
        try:
            response = self.http.request(method, f"{self.base_url}{path}", json=body)
        except httpx.HTTPError as error:
            raise StepFailed(f"engram serve {method} {path}: {error}") from None
        try:
            data = response.json()
        except ValueError:
            data = response.text
        if self._evidence is not None and path != "/sync/status":
            self._evidence.request(
                {
                    "via": "http",
                    "method": method,
                    "path": path,
                    "body": body,
                    "status": response.status_code,
                    "answer": data,
                }
            )
        return response.status_code, data

    def sync_status(self) -> dict[str, Any]:
        status, data = self.request("GET", "/sync/status")
        return data if status == 200 and isinstance(data, dict) else {}

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        self.http.close()
