"""`daemon: kill` (issue 38): SIGKILL of `engram serve`, then a new one at once, as `kill -9` in the middle
of a worker's cycle would leave it. Without engram: a stand-in `engram serve` (a Python script) answers
/health on ENGRAM_PORT and notes each SIGTERM, so a kill tells itself from a restart by what the old process
could do before it went."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_sync_kit.harness.cloud.launch import CloudHandle
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.schema import DaemonStep
from engram_sync_kit.harness.scenario.steps import do_daemon
from engram_sync_kit.harness.world import World

FAKE_SERVE = """#!{python}
import http.server, os, pathlib, signal, sys

data = pathlib.Path(os.environ["ENGRAM_DATA_DIR"])
with (data / "started").open("a") as started:
    started.write(f"{{os.getpid()}} autosync={{os.environ.get('ENGRAM_CLOUD_AUTOSYNC', '')}}\\n")

def graceful(signum, frame):
    with (data / "terminated").open("a") as terminated:
        terminated.write(f"{{os.getpid()}}\\n")
    sys.exit(0)

signal.signal(signal.SIGTERM, graceful)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(os.environ["ENGRAM_PORT"])), Health).serve_forever()
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    binary = tmp_path / "engram"
    binary.write_text(FAKE_SERVE.format(python=sys.executable), encoding="utf-8")
    binary.chmod(0o755)
    env = EngramEnvironment(binary=binary, root=tmp_path / "world").prepare()
    cloud = CloudHandle("inprocess", "harness-token", ["*"], tmp_path / "cloud.log")
    made = World(env=env, cloud=cloud, engram_env={}, version="1.20.0", workspace_root=tmp_path / "ws")
    yield made
    made.close()


def _started(world: World) -> list[tuple[int, str]]:
    lines = (world.env.data_dir / "started").read_text(encoding="utf-8").splitlines()
    return [(int(pid), flags) for pid, flags in (line.split(" ", 1) for line in lines)]


def _terminated(world: World) -> list[int]:
    path = world.env.data_dir / "terminated"
    return [int(line) for line in path.read_text(encoding="utf-8").split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_sigkills_engram_serve_and_starts_it_again_at_once_with_the_worker(world: World) -> None:
    world.ensure_daemon(autosync=True)
    do_daemon(world, DaemonStep.model_validate("kill"))
    (first, first_flags), (second, second_flags) = _started(world)
    assert first != second and not _alive(first)
    assert _terminated(world) == []  # no SIGTERM: it had no chance to shut down (or release a lease)
    assert first_flags == second_flags == "autosync=1"  # the worker comes back with it
    assert world.daemon is not None and world.daemon.running and world.daemon.autosync


def test_restart_still_stops_engram_serve_with_sigterm(world: World) -> None:
    """The control: the same stand-in notes the SIGTERM of a restart, so the kill's silence is the kill's."""
    world.ensure_daemon(autosync=True)
    do_daemon(world, DaemonStep.model_validate("restart"))
    (first, _), (second, _) = _started(world)
    assert _terminated(world) == [first] and _alive(second)


def test_kill_before_any_engram_serve_just_starts_one(world: World) -> None:
    do_daemon(world, DaemonStep.model_validate({"action": "kill"}))
    ((pid, _),) = _started(world)
    assert _alive(pid) and _terminated(world) == []


def test_the_scenario_format_takes_daemon_kill_and_names_it_among_the_actions(tmp_path: Path) -> None:
    head = "name: n\nsteps:\n"
    (step,) = parse_scenario(head + "  - daemon: kill\n", tmp_path / "k.scenario.yaml").steps
    assert isinstance(step.body, DaemonStep) and step.body.action == "kill"
    with pytest.raises(ScenarioError, match="'restart', 'stop', 'start' or 'kill'"):
        parse_scenario(head + "  - daemon: crash\n", tmp_path / "c.scenario.yaml")
