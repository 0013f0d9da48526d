"""Run ``engram-fake-cloud serve`` as a child process and learn its base URL from its first line."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from fake_cloud.errors import FakeCloudError


def command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m fake_cloud``."""
    script = Path(sys.executable).parent / "engram-fake-cloud"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "fake_cloud"]


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
    ) -> None:
        """`launcher` replaces the local console script (e.g. a `docker run ... engram-fake-cloud`
        prefix); `stderr_log` keeps the server's stderr in a file instead of a pipe."""
        self.args = [*(launcher or command()), "serve", *args]
        self.env = dict(os.environ if env is None else env)
        self.ca_file = ca_file
        self.start_timeout = start_timeout
        self.stderr_log = stderr_log
        self.base_url = ""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> FakeCloudProcess:
        stderr_sink = self.stderr_log.open("ab") if self.stderr_log is not None else subprocess.PIPE
        try:
            self.process = subprocess.Popen(
                self.args, stdout=subprocess.PIPE, stderr=stderr_sink, env=self.env, start_new_session=True
            )
        finally:
            if self.stderr_log is not None:
                stderr_sink.close()  # type: ignore[union-attr]
        assert self.process.stdout is not None
        line = _read_line(self.process.stdout, self.start_timeout)
        if not line:
            code = self.process.poll()
            stderr = b""
            if self.stderr_log is not None:
                stderr = self.stderr_log.read_bytes()[-1000:]
            elif code is not None and self.process.stderr is not None:
                stderr = self.process.stderr.read()
            self.stop()
            message = (
                stderr.decode(errors="replace").strip() or f"no base URL within {self.start_timeout:g} s"
            )
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
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        return process.returncode

    def __enter__(self) -> FakeCloudProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


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
