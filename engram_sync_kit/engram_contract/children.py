"""The processes the kit starts (engram serve, engram doctor, engram-fake-cloud serve), stopped with it.

They run in sessions of their own (a Ctrl-C in the terminal must not reach engram serve mid-write), so a
SIGTERM from `timeout`, systemd or a CI cancel, sent to the kit's process alone, never reached them: they
outlived the kit and held its temporary copies open. Every child is tracked here; `stop_signals` turns
SIGTERM and SIGINT into: stop every child (TERM, then KILL after a grace), raise `Stopped` in the main
thread so each `finally` removes its temporary files, and refuse new children from then on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: Seconds a child gets to exit after SIGTERM before SIGKILL (engram serve closes its database in ms).
GRACE_SECONDS = 2.0
#: Seconds the kit may take to clean up after a stop signal before it exits regardless.
CLEANUP_SECONDS = 10.0

_lock = threading.Lock()
_children: set[subprocess.Popen[Any]] = set()
stopping = threading.Event()


class Stopped(BaseException):
    """A stop signal arrived (a BaseException, so no `except Exception` in the work swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 130 for SIGINT


class ChildRefused(RuntimeError):
    """A child started after the stop signal: it was stopped at once."""


def track(process: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    """Remember PROCESS until it is reaped; one started after a stop signal is stopped at once."""
    with _lock:
        _children.add(process)
    if stopping.is_set():
        _stop([process])
        raise ChildRefused("stopping: no new process is started")
    return process


def forget(process: subprocess.Popen[Any]) -> None:
    with _lock:
        _children.discard(process)


def live_children() -> list[subprocess.Popen[Any]]:
    with _lock:
        return [process for process in _children if process.poll() is None]


def run(
    args: Sequence[str], *, timeout: float, input_text: str | None = None, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(capture_output=True, text=True) for a tracked child."""
    process = track(
        subprocess.Popen(
            list(args),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )
    )
    try:
        try:
            stdout, stderr = process.communicate(input_text, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        except BaseException:
            process.kill()
            process.wait()
            raise
    finally:
        forget(process)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _signal(process: subprocess.Popen[Any], signum: int) -> None:
    """The child's whole process group when it leads one (it was started in its own session)."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(processes: Sequence[subprocess.Popen[Any]], grace: float = GRACE_SECONDS) -> None:
    alive = [process for process in processes if process.poll() is None]
    for process in alive:
        _signal(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in alive:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
    for process in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)


def stop_children() -> None:
    """Stop every tracked child now, and every one started from now on."""
    stopping.set()
    with _lock:
        children = list(_children)
    _stop(children)


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within: SIGTERM and SIGINT stop every child and raise `Stopped` in the main thread; a watchdog ends
    the process with the signal's exit code if the cleanup that follows takes over CLEANUP_SECONDS."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stopping.is_set():
            return  # a second signal while cleaning up: the first one's cleanup goes on
        stop_children()
        watchdog = threading.Timer(CLEANUP_SECONDS, os._exit, args=(128 + signum,))
        watchdog.daemon = True
        watchdog.start()
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, handle) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
