"""SIGTERM and Ctrl-C stop what the harness started (issue 35 item 3), with real processes.

Before: a SIGTERM (timeout, systemd, a CI cancel) to `engram-harness validate` or `run` left `engram serve`
and `engram-fake-cloud serve` running in their own sessions, with the temporary copies behind, and a Ctrl-C
in validate waited 48-61 s for the worker's ticks. Now both stop every child and remove their temporary
directories within a few seconds, exit 143 (SIGTERM) or 130 (SIGINT), and say so in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

HARNESS = Path(sys.executable).parent / "engram-harness"
SCENARIO = (
    Path(__file__).resolve().parents[2]
    / "scenarios"
    / "upstream"
    / "engram-1273-blocked-cycle-never-pulls.scenario.yaml"
)
#: From the signal to the harness's exit, children stopped and copies removed.
STOP_BOUND_SECONDS = 8.0
STOPPED_LINE = (
    "engram-harness: stopped by {name}: the engram and fake-cloud processes it started are stopped and its "
    "temporary copies removed"
)


def processes_under(directory: Path) -> dict[int, str]:
    """Every process whose working directory or command line is inside DIRECTORY (pid: command)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if cwd.startswith(str(directory)) or str(directory) in command or str(directory).encode() in environ:
            found[int(entry.name)] = command.strip()
    return found


def start(tmp_path: Path, *args: str, program: Path = HARNESS) -> tuple[subprocess.Popen[str], Path]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENGRAM_")}
    env.update(
        TMPDIR=str(temp), HOME=str(tmp_path / "home"), ENGRAM_KIT_CACHE=os.environ.get("ENGRAM_KIT_CACHE", "")
    )
    process = subprocess.Popen(
        [str(program), *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, temp


def wait_for_children(process: subprocess.Popen[str], temp: Path, names: tuple[str, ...]) -> dict[int, str]:
    """Until engram serve and the fake cloud run under TEMP (the harness is mid-run)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        children = processes_under(temp)
        if all(any(name in command for command in children.values()) for name in names):
            return children
        time.sleep(0.2)
    process.kill()
    pytest.fail(f"the harness never started {names}: {process.communicate()}")


def stop_and_check(
    process: subprocess.Popen[str], temp: Path, signum: signal.Signals, children: dict[int, str]
) -> float:
    sent = time.monotonic()
    process.send_signal(signum)  # to the harness alone, as `timeout` does
    try:
        _, stderr = process.communicate(timeout=STOP_BOUND_SECONDS + 5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        for pid in children:
            with_pid_gone(pid)
        pytest.fail("the harness did not exit after the signal")
    took = time.monotonic() - sent
    survivors = {pid: command for pid, command in {**children, **processes_under(temp)}.items() if alive(pid)}
    for pid in survivors:  # a failing run must not leave them behind either
        with_pid_gone(pid)
    assert survivors == {}, survivors
    assert processes_under(temp) == {}
    assert sorted(str(path.relative_to(temp)) for path in temp.rglob("*")) == [], stderr
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip().splitlines()[-1] == STOPPED_LINE.format(name=signum.name)
    assert took < STOP_BOUND_SECONDS, took
    return took


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def with_pid_gone(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def home(engram_world: EngramEnvironment) -> Path:
    """A real home: memories of an enrolled project and of one that is not."""
    for number in range(5):
        result = engram_world.run(["save", f"memory {number}", "content", "--project", "side-project"])
        assert result.returncode == 0, result.stderr
    return engram_world.db_path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_validate_stops_its_children_and_removes_its_copies(
    tmp_path: Path, home: Path, engram_bin: Path, signum: signal.Signals
) -> None:
    process, temp = start(tmp_path, "validate", "--db", str(home), "--engram", str(engram_bin), "--no-doctor")
    children = wait_for_children(process, temp, ("serve",))
    time.sleep(1.0)  # into the worker's first tick
    stop_and_check(process, temp, signum, children)


def test_run_stops_its_children_and_removes_its_scenario_dirs(tmp_path: Path, engram_bin: Path) -> None:
    process, temp = start(tmp_path, "run", str(SCENARIO), "--engram", str(engram_bin))
    children = wait_for_children(process, temp, ("engram-fake-cloud", " serve"))
    time.sleep(1.0)
    stop_and_check(process, temp, signal.SIGTERM, children)


def test_pytest_stops_the_scenarios_children_on_sigterm(tmp_path: Path, engram_bin: Path) -> None:
    """The gate as CI runs it: pytest on a scenario file, cancelled mid-scenario."""
    process, temp = start(
        tmp_path,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--basetemp",
        str(tmp_path / "tmp" / "basetemp"),
        f"--scenario-engram={engram_bin}",
        str(SCENARIO),
        program=Path(sys.executable),
    )
    children = wait_for_children(process, temp, ("engram-fake-cloud", " serve"))
    time.sleep(1.0)
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=STOP_BOUND_SECONDS + 5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("pytest did not exit after SIGTERM")
    took = time.monotonic() - sent
    survivors = {pid: command for pid, command in {**children, **processes_under(temp)}.items() if alive(pid)}
    for pid in survivors:
        with_pid_gone(pid)
    assert survivors == {}, survivors
    assert process.returncode == 2, stdout  # pytest's own code for an interrupted session
    assert "KeyboardInterrupt" in stdout and "SIGTERM" in stdout, stdout
    assert took < STOP_BOUND_SECONDS, took
