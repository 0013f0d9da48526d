"""Play a generated history step by step through the harness's own StepRunner, reading ground truth
after each step and checking the invariants."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.checks import check_connection, run_check
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import DatabaseUnavailable, EngramDb, Schema
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.report import render_json
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.fake_cloud.state import ReceivedMutation
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.explore.invariants import (
    MACHINE_A,
    PUSH_PATH,
    Observation,
    Violation,
    check_all,
    cloud_memories,
    lost_rows,
    reached_states,
)
from engram_sync_kit.harness.explore.operations import LOSSY_ACTIONS, GeneratedStep
from engram_sync_kit.harness.explore.scenario_out import inner_step_path, scenario_document, scenario_yaml
from engram_sync_kit.harness.lanes import (
    LaneReadError,
    LaneTable,
    LocalMutation,
    compute_lanes,
    read_local_mutations,
    triaged_seqs,
)
from engram_sync_kit.harness.lanes import _local_mutations as read_local_mutations_on
from engram_sync_kit.harness.scenario.loader import Step, parse_scenario
from engram_sync_kit.harness.scenario.localdata import MachineMemories, read_machine_memories, sync_state_rows
from engram_sync_kit.harness.scenario.results import StepRecord
from engram_sync_kit.harness.scenario.runner import SCENARIO_ERRORS, _make_workspaces, error_detail
from engram_sync_kit.harness.scenario.schema import Header
from engram_sync_kit.harness.scenario.steps import StepRunner, _journal_mark, _kit_command
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
    inner: tuple[int, ...] = ()  # where in a `device:` step the step that failed sits (scenario_out)


@dataclass
class HistoryOutcome:
    steps: list[StepOutcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    violation_step: int | None = None  # index (0-based) of the step after which the first violation showed
    error: str = ""


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


def ended_worker_cycle(raw: dict[str, Any], status: str) -> bool:
    """A worker cycle whose pushes I2 may judge: one the step saw end. A step that gave up waiting (a hang
    past its wait) leaves the cycle's last push open, and engram has recorded nothing of it yet."""
    return _is_worker_cycle(raw) and status == "ok"


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


class ReceivedSoFar:
    """What the fake cloud stored in this history, fetched anew only after a step that may have pushed:
    without engram's worker, only a sync pushes (the cloud was reset when the history started)."""

    def __init__(self, world: World, autosync: bool) -> None:
        self.world = world
        self.autosync = autosync
        self.items: list[ReceivedMutation] = []

    def after(self, raw: dict[str, Any]) -> list[ReceivedMutation]:
        if self.autosync or "sync" in raw or "run" in raw or "device" in raw:  # a device step may push
            since = self.items[-1].seq if self.items else 0
            self.items.extend(self.world.cloud.client.received(since_seq=since))
        return self.items


class GroundTruth:
    """Reads engram's database after each step on one read-only connection: the canary's own check (the
    function `engram-canary check --no-baseline --format json` runs; in process, since a new interpreter
    per step would cost more than engram's own work), then the journal, sync_state and the enrolled set
    in one read transaction. The schema is discovered once per history and kept while engram does not
    change it (EngramDb.open's `known`). The check reads everything each time (use_cursor=False): its
    cursors are a cache for large databases, kept in the canary's state dir per database, so with them
    every history left files behind in the user's state dir and paid to write them."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.schema: Schema | None = None

    def read(self) -> tuple[dict[str, Any], list[LocalMutation], list[dict[str, Any]], set[str]]:
        """The canary's answer, the journal's rows, sync_state's rows and the enrolled projects."""
        try:
            db = EngramDb.open(self.db_path, known=self.schema)
        except DatabaseUnavailable:
            canary = run_check(self.db_path, CanaryConfig(), None, use_cursor=False)  # UNKNOWN, in its words
            return json.loads(render_json(canary)), read_local_mutations(self.db_path), [], set()
        try:
            self.schema = db.schema
            try:
                canary = check_connection(db, CanaryConfig(), None, use_cursor=False)
            except (sqlite3.DatabaseError, CanaryError):
                canary = run_check(self.db_path, CanaryConfig(), None, use_cursor=False)  # its words
            try:
                with db.read_transaction() as connection:
                    local = read_local_mutations_on(connection)
                    sync_state = sync_state_rows(connection)
                    enrolled = set(db.enrolled_projects())
            except sqlite3.Error as error:
                raise LaneReadError(f"cannot count the lanes: {self.db_path}: {error}") from error
        finally:
            db.close()
        return json.loads(render_json(canary)), local, sync_state, enrolled


@dataclass(frozen=True)
class _Template:
    root: Path
    workspaces: dict[str, Path]  # relative to the root, or absolute when outside it ("/")


_TEMPLATES: dict[tuple[Path, bool], _Template] = {}
_TEMPLATES_LOCK = threading.Lock()


def _fresh_world(world: World, autosync: bool) -> None:
    """The world a history starts from: its workspaces (git repos, plain dirs) and engram's database as
    `engram stats` creates it. The first history of a process builds it; the others copy that one (taken
    before any step, with engram not running), which costs a fraction of two `git init` and an engram
    start per history."""
    root = world.env.root
    key = (world.env.binary, autosync)
    with _TEMPLATES_LOCK:
        template = _TEMPLATES.get(key)
    if template is not None:
        shutil.copytree(template.root, root, symlinks=True, dirs_exist_ok=True)
        world.workspaces.update(
            {name: path if path.is_absolute() else root / path for name, path in template.workspaces.items()}
        )
        return
    _make_workspaces(world, _header(autosync).workspaces)
    world.run(["stats"])
    copy = Path(tempfile.mkdtemp(prefix="engram-explore-template-"))
    for part in ("engram-data", "home", "workspaces"):
        if (root / part).exists():
            shutil.copytree(root / part, copy / part, symlinks=True)
    relative = {
        name: path.relative_to(root) if path.is_relative_to(root) else path
        for name, path in world.workspaces.items()
    }
    with _TEMPLATES_LOCK:
        if key not in _TEMPLATES:
            _TEMPLATES[key] = _Template(copy, relative)
            atexit.register(shutil.rmtree, copy, ignore_errors=True)
            return
    shutil.rmtree(copy, ignore_errors=True)  # another thread's copy won


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
        _fresh_world(world, self.autosync)
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


@functools.cache
def _header(autosync: bool) -> Header:
    """The world every history starts from, as the loader reads it (the same for every history)."""
    document = scenario_document("explore", [], autosync=autosync)
    return parse_scenario(scenario_yaml(document), Path("explore.scenario.yaml")).header


def parsed_steps(history: Sequence[GeneratedStep], autosync: bool) -> tuple[Step, ...]:
    """The history as the loader's Steps: the very models `engram-harness run` plays."""
    document = scenario_document("explore", [step.raw for step in history], autosync=autosync)
    return parse_scenario(scenario_yaml(document), Path("explore.scenario.yaml")).steps


def _observe(
    world: World,
    truth: GroundTruth,
    lossy: bool,
    reconcile_cache: dict[frozenset[int], frozenset[int] | None],
    received: Sequence[ReceivedMutation],
) -> Observation:
    canary, local, sync_state, enrolled = truth.read()
    triaged = triaged_seqs(world.db_path)
    observation = Observation(
        triaged=triaged,
        local=local,
        lanes=compute_lanes(local, received, triaged=triaged),
        canary=canary,
        sync_state=sync_state,
        lossy_nemesis=lossy,
        enrolled=enrolled,
        cloud_memories=cloud_memories(received),
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
        received = ReceivedSoFar(world, autosync)
        truth = GroundTruth(world.db_path)
        reconcile_cache: dict[frozenset[int], frozenset[int] | None] = {}
        # what the step before left (a fresh world holds no row): a triage step is judged against it (I4)
        previous = Observation(local=[], lanes=LaneTable(), canary={}, sync_state=[])
        for index, (generated, step) in enumerate(zip(history, parsed_steps(history, autosync), strict=True)):
            lossy = lossy or _is_lossy(generated.raw)
            cloud_side.play(generated.raw)
            worker_cycle = _is_worker_cycle(generated.raw)
            journal_before = _journal_mark(world) if worker_cycle else 0
            triage = "triage" in generated.raw
            log_before = len(read_triage_entries(world.db_path)) if triage else 0
            started = time.monotonic()
            runner.run((step,), prefix=f"{index + 1}.")
            record: StepRecord = runner.records[-1]
            seconds = time.monotonic() - started
            mark = time.monotonic()
            violations: list[Violation] = []
            states: set[str] = set()
            if check:
                observation = _observe(world, truth, lossy, reconcile_cache, received.after(generated.raw))
                if worker_cycle:
                    if ended_worker_cycle(generated.raw, record.status):
                        observation.cycle_push_statuses = _push_statuses(world, journal_before)
                    observation.settled = generated.operation == "settle"
                    if observation.settled and world.devices:
                        observation.worker_memories = read_machine_memories(world.db_path)
                        observation.cloud_mutations = _pulled_observations(received.items)
                if generated.operation == "converge":
                    observation.machines = _machines(world)
                    observation.cloud_observations = frozenset(
                        item.entity_key for item in received.items if item.entity == "observation"
                    )
                if triage:
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
                inner_step_path(record.index) if record.status == "failed" else (),
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


def _machines(world: World) -> dict[str, MachineMemories]:
    """Every engram home of the history (its own and its `device:` machines), each read read-only (an
    unreadable one ends the history with its error: a convergence never judged is no pass)."""
    homes = {MACHINE_A: world.db_path, **{name: device.db_path for name, device in world.devices.items()}}
    return {name: read_machine_memories(path) for name, path in homes.items()}


def _pulled_observations(received: Sequence[ReceivedMutation]) -> tuple[tuple[str, str, str, str], ...]:
    """The observation mutations the cloud's mutation pull serves, as (project, sync_id, op, title)."""
    return tuple(
        (
            item.project,
            item.entity_key,
            item.op,
            str(item.payload.get("title") or "") if isinstance(item.payload, dict) else "",
        )
        for item in received
        if item.entity == "observation" and item.transport == "mutation"
    )


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
