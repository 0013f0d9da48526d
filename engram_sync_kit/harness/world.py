"""One scenario's world: the real engram (CLI, `engram serve`, `engram mcp`) and its own fake cloud.

Every world has its own ENGRAM_DATA_DIR, HOME, workspace root and fake cloud, so worlds run side by
side. This module composes the parts: the MCP client (mcp_client), the daemon (engram_serve), the cloud
launch (cloud_launch) and what they record (evidence). Every wait in them is a bounded poll of something
observable (a port, the cloud, the database).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engram_sync_kit.harness.cloud.launch import CloudHandle
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession
from engram_sync_kit.harness.engram.serve import EngramDaemon
from engram_sync_kit.harness.errors import HarnessError, StepFailed
from engram_sync_kit.harness.evidence import CommandRecord, Evidence, OutputLog, Process
from engram_sync_kit.harness.process_env import environment_snapshot
from engram_sync_kit.harness.scenario.step_results import StepResults

# harness/validate/run.py and harness/explore/ still import these two from here; new code imports each part
# from its own module.
__all__ = [
    "CloudHandle",
    "EngramDaemon",
    "SavedObservation",
    "World",
    "engram_version",
    "reported_engram_version",
]


@dataclass
class SavedObservation:
    id: int
    sync_id: str
    title: str
    content: str
    type: str
    project: str


@dataclass
class World:
    env: EngramEnvironment
    cloud: CloudHandle
    engram_env: dict[str, str]
    version: str
    workspace_root: Path
    workspaces: dict[str, Path] = field(default_factory=dict)
    observations: dict[str, SavedObservation] = field(default_factory=dict)
    results: StepResults = field(default_factory=StepResults)
    output: OutputLog = field(default_factory=OutputLog)
    evidence: Evidence = field(default_factory=Evidence)
    device: str = ""
    daemon: EngramDaemon | None = None
    devices: dict[str, World] = field(default_factory=dict)
    journal_seen: int = 0
    own_journal_seen: int = 0  # the latest journal entry of a request this engram home sent (its host)
    local_probes: dict[str, list[Any]] = field(default_factory=dict)  # observe name -> `local` checks at it
    _mcp: dict[Path, McpSession] = field(default_factory=dict)
    _capabilities: dict[str, set[str]] = field(default_factory=dict)
    _collected: dict[str, int] = field(default_factory=dict)

    @property
    def db_path(self) -> Path:
        return self.env.db_path

    @property
    def cloud_host(self) -> str:
        """The host name this engram home addresses the cloud by (device_cloud_env: B's differs from A's)."""
        return urlsplit(self.engram_env.get("ENGRAM_CLOUD_SERVER", "")).hostname or ""

    @property
    def logs(self) -> Path:
        path = self.env.root / "logs"
        path.mkdir(exist_ok=True)
        return path

    @property
    def _prefix(self) -> str:
        return f"{self.device}: " if self.device else ""

    def command_env(self) -> dict[str, str]:
        """engram's environment for a CLI command: ENGRAM_PORT names this scenario's `engram serve`, so
        `engram cloud status` probes it, never a daemon on the default port 7437."""
        env = dict(self.engram_env)
        if self.daemon is not None and self.daemon.port:
            env["ENGRAM_PORT"] = str(self.daemon.port)
        return env

    def run(
        self, args: list[str], *, cwd: Path | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        try:
            result = self.env.run(args, cwd=cwd, env=self.command_env(), timeout=timeout)
        except subprocess.TimeoutExpired:
            raise StepFailed(f"engram {' '.join(args)} did not finish within {timeout:.0f}s") from None
        self.record_command(
            [str(self.env.binary.name), *args], cwd or self.env.home, result, time.monotonic() - started
        )
        self.output.add(f"{self._prefix}engram {' '.join(args[:3])}", result.stderr)
        return result

    def record_command(
        self, args: list[str], cwd: Path, result: subprocess.CompletedProcess[str], seconds: float
    ) -> None:
        self.evidence.command(
            CommandRecord(
                args, str(cwd), result.returncode, result.stdout, result.stderr, seconds, self.device
            )
        )

    def mcp(self, cwd: Path) -> McpSession:
        if cwd not in self._mcp:
            self._mcp[cwd] = McpSession(
                self.env, cwd, self.engram_env, self.logs / f"mcp-{len(self._mcp)}.log", self.evidence
            )
        return self._mcp[cwd]

    def other_device(self, name: str) -> World:
        """Another engram device of this scenario: its own data dir and HOME, the same cloud and workspaces."""
        if name not in self.devices:
            env = EngramEnvironment(binary=self.env.binary, root=self.env.root / "devices" / name).prepare()
            device = World(
                env=env,
                cloud=self.cloud,
                engram_env=device_cloud_env(self.engram_env),
                version=self.version,
                workspace_root=self.workspace_root,
                workspaces=self.workspaces,
                results=self.results,
                output=self.output,
                evidence=self.evidence,
                device=name,
                local_probes=self.local_probes,
            )
            device.run(["stats"])  # creates its database through engram itself
            self.devices[name] = device
        return self.devices[name]

    def ensure_daemon(self, *, autosync: bool | None = None) -> EngramDaemon:
        if self.daemon is None:
            self.daemon = EngramDaemon(self.env, self.engram_env, self.logs / "serve.log", self.evidence)
        if not self.daemon.running:
            self.daemon.start(autosync=self.daemon.autosync if autosync is None else autosync)
        return self.daemon

    def cloud_subcommands(self) -> set[str]:
        """`engram cloud`'s subcommands as this binary lists them (the usage line)."""
        if "cloud" not in self._capabilities:
            result = self.env.run(["cloud"], env=self.engram_env)
            found: set[str] = set()
            for line in (result.stdout + result.stderr).splitlines():
                if line.strip().startswith("supported subcommands:"):
                    found = {part.strip() for part in line.split(":", 1)[1].split(",") if part.strip()}
            self._capabilities["cloud"] = found
        return self._capabilities["cloud"]

    def collect_logs(self) -> None:
        """Fold the long-running processes' logs into the output log (what is new since the last call)."""
        sources: list[tuple[Process, str, Path]] = [
            ("mcp", f"{self._prefix}engram mcp #{index}", self.logs / f"mcp-{index}.log")
            for index in range(len(self._mcp))
        ]
        if self.daemon is not None:
            sources.append(("serve", f"{self._prefix}engram serve", self.daemon.log_path))
        for process, source, path in sources:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            seen = self._collected.get(source, 0)
            self.output.add(source, text[seen:], process)
            self._collected[source] = len(text)
        for device in self.devices.values():
            device.collect_logs()

    def close(self) -> None:
        for device in self.devices.values():
            device.close_processes()
        self.close_processes()
        self.cloud.close()

    def close_processes(self) -> None:
        """Stop this device's engram processes (not the shared cloud) and read their last output."""
        for session in self._mcp.values():
            session.close()
        if self.daemon is not None:
            self.daemon.close()
        self.collect_logs()
        self._mcp.clear()


#: the host name a `device:` machine reaches a loopback cloud by, so a fault can partition it alone
DEVICE_CLOUD_HOST = "localhost"


def device_cloud_env(engram_env: dict[str, str]) -> dict[str, str]:
    """Another device's environment: the same cloud, addressed as localhost where the scenario's own
    engram addresses it as 127.0.0.1 (its Host header then tells the two apart: a fault's `host`)."""
    env = dict(engram_env)
    server = env.get("ENGRAM_CLOUD_SERVER", "")
    for scheme in ("https://", "http://"):
        if server.startswith(f"{scheme}127.0.0.1:"):
            env["ENGRAM_CLOUD_SERVER"] = f"{scheme}{DEVICE_CLOUD_HOST}:" + server[len(scheme) + 10 :]
    return env


def reported_engram_version(binary: Path) -> str:
    """What `engram version` prints after "engram " ("" when it prints nothing like a version line)."""
    # An explicit environment: the child then never reads the C library's environ, which another thread
    # may reallocate meanwhile (CI once saw execve fail with EFAULT on this very call).
    result = subprocess.run(
        [str(binary), "version"],
        env=environment_snapshot(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    match = re.search(r"^engram (\S+)", result.stdout, re.MULTILINE)
    return match.group(1) if match else result.stdout.strip()[:80]


def engram_version(binary: Path) -> str:
    """The release version BINARY reports, as MAJOR.MINOR.PATCH[-PRERELEASE]."""
    reported = reported_engram_version(binary)
    match = VERSION_PATTERN.fullmatch(reported)
    if match is None:
        raise HarnessError(
            f"{binary}: `engram version` printed no version ({reported!r}); name the version under test "
            "(`run --engram-version-as VERSION`, pytest's --scenario-engram-version-as VERSION)"
        )
    return reported


VERSION_PATTERN = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?")
