"""`daemon: kill` (issue 38): SIGKILL of the real `engram serve`, then a new one at once, as `kill -9` in
the middle of a worker's cycle would leave it. v1.20's serve writes `[engram] shutting down...` to its log
when it is stopped (SIGTERM), and `[autosync] ...` each time it starts with the worker asked for, so the log
tells a kill from a restart."""

from __future__ import annotations

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

SHUTDOWN = "[engram] shutting down"
WORKER_START = "[autosync]"
LISTENING = "HTTP server listening"


@pytest.fixture
def world(engram_bin: Path, tmp_path: Path) -> Iterator[World]:
    env = EngramEnvironment(binary=engram_bin, root=tmp_path / "world").prepare()
    cloud = CloudHandle("inprocess", "harness-token", ["*"], tmp_path / "cloud.log")  # never asked
    made = World(env=env, cloud=cloud, engram_env={}, version="1.20.0", workspace_root=tmp_path / "ws")
    yield made
    made.close()


def _serve_log(world: World) -> list[str]:
    assert world.daemon is not None
    return world.daemon.log_path.read_text(encoding="utf-8", errors="replace").splitlines()


def _count(lines: list[str], text: str) -> int:
    return sum(text in line for line in lines)


@pytest.mark.engram
def test_kill_sigkills_engram_serve_and_starts_it_again_at_once_with_the_worker(world: World) -> None:
    first = world.ensure_daemon(autosync=True)
    first_port = first.port
    do_daemon(world, DaemonStep.model_validate("kill"))
    log = _serve_log(world)
    assert _count(log, LISTENING) == 2 and _count(log, WORKER_START) == 2, log
    assert _count(log, SHUTDOWN) == 0, log  # no SIGTERM: it had no chance to shut down or release a lease
    assert world.daemon is not None and world.daemon.running and world.daemon.autosync
    status, _ = world.daemon.request("GET", "/health")
    assert status == 200 and world.daemon.port != 0 and first_port != 0


@pytest.mark.engram
def test_restart_still_stops_engram_serve_gracefully(world: World) -> None:
    """The control: the same log shows a restart's shutdown, so the kill's silence is the kill's."""
    world.ensure_daemon(autosync=True)
    do_daemon(world, DaemonStep.model_validate("restart"))
    log = _serve_log(world)
    assert _count(log, SHUTDOWN) == 1 and _count(log, LISTENING) == 2, log


@pytest.mark.engram
def test_kill_before_any_engram_serve_just_starts_one(world: World) -> None:
    do_daemon(world, DaemonStep.model_validate({"action": "kill"}))
    log = _serve_log(world)
    assert _count(log, LISTENING) == 1 and _count(log, SHUTDOWN) == 0, log
    assert world.daemon is not None and world.daemon.running


def test_the_scenario_format_takes_daemon_kill_and_names_it_among_the_actions(tmp_path: Path) -> None:
    head = "name: n\nsteps:\n"
    (step,) = parse_scenario(head + "  - daemon: kill\n", tmp_path / "k.scenario.yaml").steps
    assert isinstance(step.body, DaemonStep) and step.body.action == "kill"
    with pytest.raises(ScenarioError, match="'restart', 'stop', 'start' or 'kill'"):
        parse_scenario(head + "  - daemon: crash\n", tmp_path / "c.scenario.yaml")


@pytest.mark.engram
@pytest.mark.parametrize(("autosync", "worker_lines"), [(True, 1), (False, 0)])
def test_daemon_start_names_whether_the_worker_runs(world: World, autosync: bool, worker_lines: int) -> None:
    """A `device:` machine has no `cloud.autosync` of its own: `daemon: {action: start, autosync: true}`
    gives it engram serve's worker (issue 38: machine B's worker pushes through the mutation route)."""
    do_daemon(world, DaemonStep.model_validate({"action": "start", "autosync": autosync}))
    log = _serve_log(world)
    assert _count(log, LISTENING) == 1 and _count(log, WORKER_START) == worker_lines, log
    assert world.daemon is not None and world.daemon.autosync is autosync
    do_daemon(world, DaemonStep.model_validate("restart"))  # omitted: as it ran
    assert world.daemon.autosync is autosync and _count(_serve_log(world), WORKER_START) == 2 * worker_lines


def test_daemon_autosync_is_a_boolean(tmp_path: Path) -> None:
    head = "name: n\nsteps:\n"
    with pytest.raises(ScenarioError, match="autosync"):
        parse_scenario(
            head + "  - daemon: {action: start, autosync: sometimes}\n", tmp_path / "a.scenario.yaml"
        )
