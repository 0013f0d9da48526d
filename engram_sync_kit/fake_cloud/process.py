"""Run ``engram-fake-cloud serve`` as a child process and learn its base URL from its first line."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from engram_sync_kit.engram_contract import children
from engram_sync_kit.fake_cloud.errors import FakeCloudError

T = TypeVar("T")
STDERR_KEPT = 256 * 1024


def command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m fake_cloud``."""
    script = Path(sys.executable).parent / "engram-fake-cloud"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "engram_sync_kit.fake_cloud"]


class FakeCloudProcess:
    """A fake cloud subprocess; ``with FakeCloudProcess([...]) as proc: proc.base_url``."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        ca_file: Path | None = None,
        start_timeout: float = 20.0,
        launcher: Sequence[str] | None = None,
        stderr_log: Path | None = None,
        control_token: str | None = None,
        server_version: str | None = None,
    ) -> None:
        """`launcher` replaces the local console script (e.g. a `docker run ... engram-fake-cloud`
        prefix); `stderr_log` keeps the server's stderr in a file instead of a pipe; `server_version`
        adds --server-version (the fake's default is the newest, v3)."""
        version_args = ["--server-version", server_version] if server_version else []
        self.args = [*(launcher or command()), "serve", *args, *version_args]
        if ca_file is None:
            ca_file = _option(args, "--ca-out", Path)
        if control_token is None:
            control_token = _option(args, "--control-token", str)
        self.env = dict(os.environ if env is None else env)
        self.ca_file = ca_file
        self.start_timeout = start_timeout
        self.stderr_log = stderr_log
        self.control_token = control_token
        self.base_url = ""
        self.process: subprocess.Popen[bytes] | None = None
        # The server's stderr is read as it comes (its newest STDERR_KEPT bytes kept): a pipe read only
        # at the end fills up, and the server then blocks on its next line.
        self._stderr_tail = bytearray()
        self._stderr_lock = threading.Lock()
        self._stderr_reader: threading.Thread | None = None

    def start(self) -> FakeCloudProcess:
        stderr_sink = self.stderr_log.open("ab") if self.stderr_log is not None else subprocess.PIPE
        try:
            self.process = children.track(
                subprocess.Popen(
                    self.args,
                    stdout=subprocess.PIPE,
                    stderr=stderr_sink,
                    env=self.env,
                    start_new_session=True,
                )
            )
        finally:
            if self.stderr_log is not None:
                stderr_sink.close()  # type: ignore[union-attr]
        if self.process.stderr is not None:
            self._stderr_reader = threading.Thread(
                target=self._keep_stderr, args=(self.process.stderr.fileno(),), daemon=True
            )
            self._stderr_reader.start()
        assert self.process.stdout is not None
        line = _read_line(self.process.stdout, self.start_timeout)
        if not line:
            # stdout closes a moment before the exit status can be reaped: wait for it briefly.
            try:
                code: int | None = self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            self.stop()
            stderr = self.stderr_text()[-1000:] if code is not None or self.stderr_log is not None else ""
            message = stderr.strip() or f"no base URL within {self.start_timeout:g} s"
            raise FakeCloudError(f"engram-fake-cloud serve did not start (exit {code}): {message}")
        self.base_url = line.decode().strip()
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        children.forget(process)
        if self._stderr_reader is not None:
            self._stderr_reader.join(2.0)  # the server is gone: its stderr ends (unless a child keeps it)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        return process.returncode

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far (its stderr_log file when it has one)."""
        if self.stderr_log is not None:
            return self.stderr_log.read_bytes()[-STDERR_KEPT:].decode(errors="replace")
        with self._stderr_lock:
            return self._stderr_tail.decode(errors="replace")

    def _keep_stderr(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(fd, 65536):
                with self._stderr_lock:
                    self._stderr_tail += chunk
                    del self._stderr_tail[:-STDERR_KEPT]

    def check(self) -> None:
        """Raise FakeCloudInternalError when the server recorded a bug of its own (and forget them)."""
        from engram_sync_kit.fake_cloud.client import FakeCloudClient  # httpx only when a check is asked

        with FakeCloudClient(self.base_url, self.ca_file, control_token=self.control_token) as client:
            client.check()

    def __enter__(self) -> FakeCloudProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # Like pytest-httpserver's check(): a bug in the fake fails the block that used it.
        try:
            if exc_type is None and self.process is not None and self.process.poll() is None:
                self.check()
        finally:
            self.stop()


def _option(args: Sequence[str], name: str, kind: Callable[[str], T]) -> T | None:
    """The value given to ``name`` in a command line (``--name value`` or ``--name=value``)."""
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            return kind(args[index + 1])
        if arg.startswith(name + "="):
            return kind(arg.split("=", 1)[1])
    return None


def _read_line(stream: object, timeout: float) -> bytes:
    fd = stream.fileno()  # type: ignore[attr-defined]
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    data = b""
    try:
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return b""
            chunk = os.read(fd, 4096)
            if not chunk:
                return b""
            data += chunk
    finally:
        selector.close()
    return data.split(b"\n", 1)[0]
