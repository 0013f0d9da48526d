"""One scenario's world: the real engram (CLI, `engram serve`, `engram mcp`) and its own fake cloud.

Every world has its own ENGRAM_DATA_DIR, HOME, workspace root and fake cloud, so worlds run side by
side. Every wait here is a bounded poll of something observable (a port, the cloud, the database).
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

import httpx

from engram_sync_kit.harness.cloud_image import ensure_image
from engram_sync_kit.harness.engram_env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.errors import HarnessError, StepFailed
from engram_sync_kit.harness.polling import free_port
from engram_sync_kit.harness.process_env import environment_snapshot
from engram_sync_kit.harness.step_results import StepResults

CloudMode = Literal["process", "docker", "inprocess"]
Process = Literal["serve", "mcp", "cli"]

# Which real cloud server the harness's fake answers as: the one the engram it runs (v1.20) talks to.
CLOUD_SERVER_VERSION: Final = "v1.20"


@dataclass(frozen=True)
class OutputEntry:
    process: Process
    source: str
    text: str


@dataclass
class OutputLog:
    """Everything engram printed on stderr, by process and source, in the order it was read.

    Long-running processes (serve, mcp) are read from their log files at each labelled step's start and
    end and when the scenario ends, so a window `since: L` holds what was read from L's start on.
    """

    entries: list[OutputEntry] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, source: str, text: str, process: Process = "cli") -> None:
        text = meaningful_stderr(text)
        if text:
            with self.lock:
                self.entries.append(OutputEntry(process, source, text))

    def mark(self) -> int:
        with self.lock:
            return len(self.entries)

    def text(self, *, process: Process | None = None, start: int = 0, end: int | None = None) -> str:
        with self.lock:
            chosen = self.entries[start:end]
        return "\n".join(
            f"[{entry.source}] {line}"
            for entry in chosen
            if process is None or entry.process == process
            for line in entry.text.splitlines()
        )


@dataclass(frozen=True)
class CommandRecord:
    """One command the harness ran (engram or a checker), with everything it printed."""

    args: list[str]
    cwd: str
    exit: int
    stdout: str
    stderr: str
    seconds: float
    device: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "args": self.args,
            "cwd": self.cwd,
            "exit": self.exit,
            "seconds": round(self.seconds, 3),
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


@dataclass
class Evidence:
    """What a scenario's world recorded as it ran, shared by every device of the scenario."""

    commands: list[CommandRecord] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, record: CommandRecord) -> None:
        with self.lock:
            self.commands.append(record)

    def request(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)


# ─── MCP over stdio ──────────────────────────────────────────────────────────


class McpSession:
    """`engram mcp` started in one cwd, spoken to with newline-delimited JSON-RPC."""

    def __init__(
        self,
        env: EngramEnvironment,
        cwd: Path,
        extra_env: dict[str, str],
        log_path: Path,
        evidence: Evidence | None = None,
    ) -> None:
        self.cwd = cwd
        self._evidence = evidence
        self._log = log_path.open("ab")
        self._process = subprocess.Popen(
            [str(env.binary), "mcp"],
            cwd=cwd,
            env=env.env(extra_env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._pump, daemon=True).start()
        self.request(
            "initialize",
            {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "engram-harness", "version": "1"},
            },
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}})

    def _pump(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()

    def request(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise StepFailed(f"engram mcp did not answer {method} within {timeout:.0f}s") from None
            if line is None:
                raise StepFailed(f"engram mcp exited while answering {method} (exit {self._process.poll()})")
            message = json.loads(line)
            if message.get("id") != request_id:
                continue
            if "error" in message:
                raise StepFailed(f"engram mcp {method}: {message['error'].get('message', message['error'])}")
            result: dict[str, Any] = message.get("result", {})
            return result

    def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(part.get("text", "") for part in result.get("content", []))
        if self._evidence is not None:
            self._evidence.request(
                {
                    "via": "mcp",
                    "cwd": str(self.cwd),
                    "tool": tool,
                    "arguments": arguments,
                    "error": bool(result.get("isError")),
                    "answer": text,
                }
            )
        if result.get("isError"):
            raise StepFailed(f"engram mcp {tool} failed: {text}")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return {"text": text}
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


# ─── engram serve ────────────────────────────────────────────────────────────


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
            self._process = subprocess.Popen(
                [str(self._env.binary), "serve"],
                cwd=self._env.home,
                env=self._env.env(overrides),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

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


# ─── the fake cloud ──────────────────────────────────────────────────────────


@dataclass(frozen=True)
class CloudTarget:
    """An already-running fake cloud (`run --cloud-url`), local or remote; scenarios take turns on it."""

    url: str
    token: str | None
    ca_file: Path | None = None
    control_token: str | None = None


class CloudHandle:
    """The scenario's own fake cloud, as a local process, a container or (tests) in this process."""

    def __init__(
        self,
        mode: CloudMode,
        token: str | None,
        allowed_projects: list[str],
        log_path: Path,
        target: CloudTarget | None = None,
        *,
        tls: bool = False,
    ) -> None:
        from engram_sync_kit.fake_cloud.client import FakeCloudClient

        self.mode = mode
        self.token = target.token if target is not None else token
        self.ca_file = target.ca_file if target is not None else None
        self.log_path = log_path
        self._stop: Callable[[], object] = lambda: None
        if target is None:
            if tls:
                self.ca_file = log_path.parent / "fake-cloud-ca" / "ca.pem"
                self.ca_file.parent.mkdir(parents=True, exist_ok=True)
            self.base_url = self._start(mode, token, allowed_projects, log_path)
            self.client = FakeCloudClient(self.base_url, self.ca_file)
        else:
            self.base_url = target.url.rstrip("/")
            self.client = FakeCloudClient(self.base_url, self.ca_file, control_token=target.control_token)
            self._attach(token, allowed_projects)

    def _attach(self, token: str | None, allowed: list[str]) -> None:
        """Make a running cloud this scenario's: same auth kind, a clean journal, the scenario's allowlist."""
        from engram_sync_kit.fake_cloud.errors import FakeCloudError

        if (token is None) != (self.token is None):
            wanted = "no auth" if token is None else "a token"
            raise HarnessError(
                f"the scenario needs a cloud with {wanted}, and the cloud at {self.base_url} "
                f"{'requires a token' if self.token else 'has no auth'}; run it with --cloud process"
            )
        try:
            self.client.reset()
            self.client.set_allowlist(allowed)
        except FakeCloudError as error:
            self.client.close()
            raise HarnessError(f"--cloud-url {self.base_url}: {error}") from None

    def _start(self, mode: CloudMode, token: str | None, allowed: list[str], log_path: Path) -> str:
        serve_args = [
            "--port",
            "0",
            *(["--token", token] if token else ["--insecure-no-auth"]),
            # The fake answers as the newest server unless told; the harness drives engram v1.20.
            *("--server-version", CLOUD_SERVER_VERSION),
        ]
        allowed_text = ",".join(allowed) if allowed != ["*"] else "*"
        ca_file = self.ca_file
        if mode == "inprocess":
            from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

            config = FakeCloudConfig(
                token=token,
                allowed_projects=tuple(allowed),
                insecure_no_auth=token is None,
                server_version=CLOUD_SERVER_VERSION,
                tls=ca_file is not None,
                ca_out=ca_file,
            )
            manager = start_fake_cloud(config)
            cloud = manager.__enter__()
            self._stop = lambda: manager.__exit__(None, None, None)
            return str(cloud.base_url)
        if mode == "process":
            tls_args = ["--tls", "--ca-out", str(ca_file)] if ca_file else []
            return self._start_process(
                None, [*serve_args, *tls_args, "--allowed-projects", allowed_text], log_path
            )
        image = ensure_image()
        # The image's HEALTHCHECK probes its fixed port 8080; this server picks a free one instead.
        launcher = ["docker", "run", "--rm", "-i", "--network", "host", "--no-healthcheck"]
        tls_args = []
        if ca_file is not None:  # the container writes its CA into a directory of this scenario
            launcher += ["-v", f"{ca_file.parent.absolute()}:/run/engram-fake-cloud-ca"]
            tls_args = ["--tls", "--ca-out", f"/run/engram-fake-cloud-ca/{ca_file.name}"]
        launcher += [image, "engram-fake-cloud"]
        serve_args = [*serve_args, *tls_args, "--host", "127.0.0.1", "--allowed-projects", allowed_text]
        return self._start_process(launcher, serve_args, log_path)

    def _start_process(self, launcher: list[str] | None, serve_args: list[str], log_path: Path) -> str:
        from engram_sync_kit.fake_cloud.errors import FakeCloudError
        from engram_sync_kit.fake_cloud.process import FakeCloudProcess

        process = FakeCloudProcess(serve_args, launcher=launcher, stderr_log=log_path, start_timeout=60.0)
        try:
            process.start()
        except FakeCloudError as error:
            # docker run's own error spans lines ("See 'docker run --help'."): the first one, and the log.
            first = next((line.strip() for line in str(error).splitlines() if line.strip()), "no output")
            raise HarnessError(f"the fake cloud did not start: {first} (its stderr: {log_path})") from error
        self._stop = process.stop
        return process.base_url

    def close(self) -> None:
        try:
            self.client.check()  # a bug the fake recorded fails the run as the fake's, never as engram's
        finally:
            self._stop()


# ─── the world ───────────────────────────────────────────────────────────────


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
    local_probes: dict[str, list[Any]] = field(default_factory=dict)  # observe name -> `local` checks at it
    _mcp: dict[Path, McpSession] = field(default_factory=dict)
    _capabilities: dict[str, set[str]] = field(default_factory=dict)
    _collected: dict[str, int] = field(default_factory=dict)

    @property
    def db_path(self) -> Path:
        return self.env.db_path

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
                engram_env=dict(self.engram_env),
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


def engram_version(binary: Path) -> str:
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
    match = re.search(r"(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)", result.stdout)
    if match is None:
        raise HarnessError(f"{binary}: `engram version` printed no version ({result.stdout.strip()!r})")
    return match.group(1)
