"""Bounded polling and ephemeral ports, shared by the harness, the benchmarks and the tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

from engram_sync_kit.engram_contract import children
from engram_sync_kit.harness.errors import StepFailed

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    error: type[Exception] = StepFailed,
) -> T:
    """Poll PROBE until it returns a value that is not None; raise ERROR after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if children.stopping.is_set():
            raise error(f"stopped while waiting for {what}")
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise error(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
