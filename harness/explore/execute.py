"""Play a generated history step by step through the harness's own StepRunner, reading ground truth
after each step and checking the invariants."""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.checks import run_check
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import open_read_only
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.report import render_json
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.harness.engram_env import EngramEnvironment
from engram_sync_kit.harness.explore.invariants import (
    PUSH_PATH,
    Observation,
    Violation,
    check_all,
    lost_rows,
    reached_states,
)
from engram_sync_kit.harness.explore.operations import LOSSY_ACTIONS, GeneratedStep
from engram_sync_kit.harness.explore.scenario_out import scenario_document, scenario_yaml
from engram_sync_kit.harness.lanes import LaneTable, compute_lanes, read_local_mutations, triaged_seqs
from engram_sync_kit.harness.loader import Step, parse_scenario
from engram_sync_kit.harness.localdata import read_sync_state_rows
from engram_sync_kit.harness.results import StepRecord
from engram_sync_kit.harness.runner import SCENARIO_ERRORS, _make_workspaces, error_detail
from engram_sync_kit.harness.steps import StepRunner, _kit_command
from engram_sync_kit.harness.triage_copies import read_triage_entries
from engram_sync_kit.harness.world import CloudHandle, World, engram_version


@dataclass
class StepOutcome:
    operation: str
    raw: dict[str, Any]
    status: str
    error: str
    seconds: float
    check_seconds: float
    states: set[str] = field(default_factory=set)


@dataclass
class HistoryOutcome:
    steps: list[StepOutcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    violation_step: int | None = None  # index (0-based) of the step after which the first violation showed
    error: str = ""


def _enrolled(db_path: Path) -> set[str]:
    try:
        connection = open_read_only(db_path)
    except CanaryError:
        return set()
    try:
        with closing(connection.cursor()) as cursor:
            return {str(row[0]) for row in cursor.execute("SELECT project FROM sync_enrolled_projects")}
    except sqlite3.Error:
        return set()
    finally:
        connection.close()


def _is_lossy(raw: dict[str, Any]) -> bool:
    faults = raw.get("cloud", {}).get("faults") if isinstance(raw.get("cloud"), dict) else None
    return any(fault.get("action") in LOSSY_ACTIONS for fault in faults or [])


@dataclass
class CloudSide:
    """What the history told the cloud so far: paused projects, faults scheduled and not cleared."""

    paused: set[str] = field(default_factory=set)
    faults: bool = False

    def play(self, raw: dict[str, Any]) -> None:
        cloud = raw.get("cloud")
        if not isinstance(cloud, dict):
            return
        if cloud.get("pause"):
            self.paused.add(str(cloud["pause"]))
        if cloud.get("resume"):
            self.paused.discard(str(cloud["resume"]))
        if cloud.get("clear_faults"):
            self.faults = False
        if cloud.get("faults"):
            self.faults = True

    def states(self) -> set[str]:
        return {name for name, on in (("paused", bool(self.paused)), ("faults_scheduled", self.faults)) if on}


def _is_worker_cycle(raw: dict[str, Any]) -> bool:
    sync = raw.get("sync")
    return isinstance(sync, dict) and sync.get("via") == "autosync"


def _reconcile_lost(world: World) -> frozenset[int] | None:
    """The seqs `engram-canary reconcile` names as lost, or None when it could not say."""
    token_file = world.env.root / "explore-cloud-token"
    token_file.write_text(world.cloud.token or "", encoding="utf-8")
    command = [
        _kit_command("engram-canary"),
        "reconcile",
        "--db",
        str(world.db_path),
        "--cloud-url",
        world.cloud.base_url,
        "--cloud-token-file",
        str(token_file),
        "--format",
        "json",
    ]
    if world.cloud.ca_file is not None:
        command += ["--cloud-ca", str(world.cloud.ca_file)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        report = json.loads(result.stdout)
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    if not isinstance(report, dict) or report.get("error"):
        return None
    return frozenset(int(row["seq"]) for row in report.get("lost", []))


@functools.cache
def _version(binary: Path) -> str:
    return engram_version(binary)


def new_cloud(logs: Path) -> CloudHandle:
    """A fake cloud as `engram-harness run` starts one for a scenario: its own process, https, a token."""
    return CloudHandle("process", "harness-token", ["*"], logs / "fake-cloud.log", tls=True)


class HistoryPlayer:
    """One fresh world (its own engram data dir, HOME, workspaces and fake cloud) for one history."""

    def __init__(
        self, binary: Path, *, autosync: bool, root: Path | None = None, cloud: CloudHandle | None = None
    ) -> None:
        self.binary = binary.absolute()
        self.autosync = autosync
        self.own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="engram-explore-")) if root is None else root
        self.world: World | None = None
        self.shared_cloud = cloud

    def start(self) -> World:
        env = EngramEnvironment(binary=self.binary, root=self.root).prepare()
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        if self.shared_cloud is not None:
            cloud = self.shared_cloud
            cloud.client.reset()  # a clean journal, store, allowlist, pause set and fault schedule
        else:
            cloud = new_cloud(logs)
        engram_env = {"ENGRAM_CLOUD_SERVER": cloud.base_url, "ENGRAM_CLOUD_TOKEN": cloud.token or ""}
        if cloud.ca_file is not None:
            engram_env["SSL_CERT_FILE"] = str(cloud.ca_file)
        world = World(
            env=env,
            cloud=cloud,
            engram_env=engram_env,
            version=_version(self.binary),
            workspace_root=self.root / "workspaces",
        )
        self.world = world
        document = scenario_document("explore", [], autosync=self.autosync)
        header = parse_scenario(
            scenario_yaml({**document, "steps": []}), Path("explore.scenario.yaml")
        ).header
        _make_workspaces(world, header.workspaces)
        world.run(["stats"])
        if self.autosync:
            world.ensure_daemon(autosync=True)
        return world

    def close(self, keep: bool = False) -> None:
        try:
            if self.world is not None:
                if self.shared_cloud is not None:
                    self.world.close_processes()
                else:
                    with contextlib.suppress(FakeCloudError):  # the fake's own bug: the run has its answer
                        self.world.close()
        finally:  # the history's directory goes even when a process would not stop cleanly
            if self.own_root and not keep:
                shutil.rmtree(self.root, ignore_errors=True)


def parsed_steps(history: Sequence[GeneratedStep], autosync: bool) -> tuple[Step, ...]:
    """The history as the loader's Steps: the very models `engram-harness run` plays."""
    document = scenario_document("explore", [step.raw for step in history], autosync=autosync)
    return parse_scenario(scenario_yaml(document), Path("explore.scenario.yaml")).steps


def _observe(
    world: World, lossy: bool, reconcile_cache: dict[frozenset[int], frozenset[int] | None]
) -> Observation:
    # The very check `engram-canary check --no-baseline --format json` runs (the `canary` step), in process:
    # a new interpreter per step would cost more than engram's own work.
    canary: dict[str, Any] = json.loads(render_json(run_check(world.db_path, CanaryConfig(), None)))
    local = read_local_mutations(world.db_path)
    lanes = compute_lanes(local, world.cloud.client.received())
    observation = Observation(
        triaged=triaged_seqs(world.db_path),
        local=local,
        lanes=lanes,
        canary=canary,
        sync_state=read_sync_state_rows(world.db_path),
        lossy_nemesis=lossy,
        enrolled=_enrolled(world.db_path),
    )
    if lost_rows(observation):
        lost = frozenset(row.seq for row in lost_rows(observation))
        if lost not in reconcile_cache:
            reconcile_cache[lost] = _reconcile_lost(world)
        observation.reconcile_lost = reconcile_cache[lost]
    return observation


def play(
    binary: Path,
    history: Sequence[GeneratedStep],
    *,
    autosync: bool,
    check: bool = True,
    stop_at_violation: bool = True,
    on_step: Callable[[StepOutcome], None] | None = None,
    keep: bool = False,
    cloud: CloudHandle | None = None,
) -> HistoryOutcome:
    """Play HISTORY on a fresh world (CLOUD, reset, if given), checking every invariant after every step."""
    outcome = HistoryOutcome()
    player = HistoryPlayer(binary, autosync=autosync, cloud=cloud)
    try:
        world = player.start()
        runner = StepRunner(world)
        lossy = False
        cloud_side = CloudSide()
        reconcile_cache: dict[frozenset[int], frozenset[int] | None] = {}
        # what the step before left (a fresh world holds no row): a triage step is judged against it (I4)
        previous = Observation(local=[], lanes=LaneTable(), canary={}, sync_state=[])
        for index, (generated, step) in enumerate(zip(history, parsed_steps(history, autosync), strict=True)):
            lossy = lossy or _is_lossy(generated.raw)
            cloud_side.play(generated.raw)
            journal_before = _last_journal_id(world)
            log_before = len(read_triage_entries(world.db_path))
            started = time.monotonic()
            runner.run((step,), prefix=f"{index + 1}.")
            record: StepRecord = runner.records[-1]
            seconds = time.monotonic() - started
            mark = time.monotonic()
            violations: list[Violation] = []
            states: set[str] = set()
            if check:
                observation = _observe(world, lossy, reconcile_cache)
                if _is_worker_cycle(generated.raw):
                    observation.cycle_push_statuses = _push_statuses(world, journal_before)
                    observation.settled = generated.operation == "settle"
                if "triage" in generated.raw:
                    observation.before = previous
                    observation.triage_entries = read_triage_entries(world.db_path)[log_before:]
                violations = check_all(observation)
                observation.before, previous = None, observation
                states = reached_states(observation) | cloud_side.states()
            step_outcome = StepOutcome(
                generated.operation,
                generated.raw,
                record.status,
                record.error,
                seconds,
                time.monotonic() - mark,
                states,
            )
            outcome.steps.append(step_outcome)
            if on_step is not None:
                on_step(step_outcome)
            if violations and outcome.violation_step is None:
                outcome.violations, outcome.violation_step = violations, index
                if stop_at_violation:
                    break
    except SCENARIO_ERRORS as error:
        outcome.error = error_detail(error)
    finally:
        player.close(keep=keep)
    return outcome


def _last_journal_id(world: World) -> int:
    entries = world.cloud.client.journal(since_id=world.journal_seen).entries
    world.journal_seen = max((entry.id for entry in entries), default=world.journal_seen)
    return world.journal_seen


def _push_statuses(world: World, since_id: int) -> list[int]:
    """The statuses of the worker's pushes since SINCE_ID, one per request, in order."""
    statuses: list[int] = []
    seen: set[str] = set()
    for entry in world.cloud.client.journal(since_id=since_id).entries:
        if entry.path != PUSH_PATH or entry.request_id in seen:
            continue
        seen.add(entry.request_id)
        statuses.append(int(entry.status))
    return statuses
