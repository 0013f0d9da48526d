"""Run a scenario end to end: build its world, play its steps, gather what happened, judge expectations."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

from engram_sync_kit.engram_contract import children
from engram_sync_kit.engram_contract.read_only import connect_read_only
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.harness.cloud.launch import CloudHandle, CloudMode, CloudTarget
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.lanes import (
    compute_lanes,
    read_acked_seqs,
    read_local_mutations,
    read_sync_state_targets,
    triaged_seqs,
)
from engram_sync_kit.harness.scenario.checks import Observed, evaluate
from engram_sync_kit.harness.scenario.loader import Scenario, Step
from engram_sync_kit.harness.scenario.localdata import count_local_rows, read_sync_state_rows
from engram_sync_kit.harness.scenario.report import EMPTY_PROJECT
from engram_sync_kit.harness.scenario.results import (
    ExpectationResult,
    ExpectMode,
    ScenarioResult,
    StepMarks,
    StepRecord,
)
from engram_sync_kit.harness.scenario.schema import (
    LanesExpectation,
    LocalExpectation,
    LostExpectation,
    WorkspaceSpec,
)
from engram_sync_kit.harness.scenario.steps import StepRunner, plain
from engram_sync_kit.harness.world import World, engram_version, reported_engram_version


def _make_workspaces(world: World, specs: dict[str, WorkspaceSpec]) -> None:
    pending = dict(specs)
    while pending:
        for name, spec in list(pending.items()):
            if spec.parent is not None and spec.parent not in world.workspaces:
                continue
            base = world.workspaces[spec.parent] if spec.parent else world.workspace_root
            if spec.root:
                path = Path("/")
            elif spec.home:
                path = world.env.home
            elif spec.named_like_home:
                path = base / world.env.home.name
            else:
                path = base / str(spec.git if spec.git is not None else spec.dir)
            path.mkdir(parents=True, exist_ok=True)
            if spec.git is not None:
                env = world.env.env()
                subprocess.run(["git", "init", "-q", str(path)], check=True, env=env, capture_output=True)
                if spec.remote:
                    subprocess.run(
                        ["git", "-C", str(path), "remote", "add", "origin", spec.remote],
                        check=True,
                        env=env,
                        capture_output=True,
                    )
            if spec.subdir:
                path = path / spec.subdir
                path.mkdir(parents=True, exist_ok=True)
            world.workspaces[name] = path
            del pending[name]


def copy_database(source: Path, target: Path) -> None:
    """Copy an engram database for a beta-validation run; the original is never written.

    With no -wal beside it the file is closed and complete: copy its bytes, so not even SQLite's -shm/-wal
    appear next to the original. A live database (a -wal exists) is read through the backup API on a
    read-only connection, which sees a consistent snapshot.
    """
    if not source.is_file():
        raise HarnessError(f"{source}: no such database file")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not source.with_name(source.name + "-wal").exists():
            shutil.copyfile(source, target)
        else:
            with (
                closing(connect_read_only(source, timeout=15)) as original,
                closing(sqlite3.connect(target)) as copy,
            ):
                original.backup(copy)
        with closing(sqlite3.connect(target)) as check:
            verdict = check.execute("PRAGMA quick_check").fetchone()[0]
    except (OSError, sqlite3.Error) as error:
        raise HarnessError(f"{source}: cannot copy ({error})") from None
    if verdict != "ok":
        raise HarnessError(
            f"{source}: the copy fails SQLite's quick_check ({verdict}); copy again while engram is idle"
        )


#: What a played scenario can raise that is its result (an error line), not a bug of the harness.
SCENARIO_ERRORS = (
    HarnessError,
    FakeCloudError,
    httpx.HTTPError,
    sqlite3.Error,
    OSError,
    subprocess.SubprocessError,
    children.ChildRefused,  # a process the scenario started after a stop signal
)


def error_detail(error: BaseException) -> str:
    """The one line a scenario's error is reported as: the harness's own words, else the type and text."""
    return str(error) if isinstance(error, HarnessError) else f"{type(error).__name__}: {error}"


def run_scenario(
    scenario: Scenario,
    binary: Path,
    *,
    cloud_mode: CloudMode = "process",
    cloud_target: CloudTarget | None = None,
    db_copy_source: Path | None = None,
    root: Path | None = None,
    keep: bool = False,
    keep_dir: Path | None = None,
    expect: ExpectMode = "all",
    progress: Callable[[Scenario, StepRecord], None] | None = None,
    version_as: str | None = None,
) -> ScenarioResult:
    """Play one scenario. Its directory is `root`, else a new one in `keep_dir` (kept, passed or not),
    else a temporary one, removed when the scenario passes unless `keep`. `version_as` is the version
    the expectations' ranges are judged against, for a build whose own version says nothing (an
    untagged `go build` reports 0.0.0-<date>-<hash>)."""
    started = time.monotonic()
    binary = binary.absolute()  # engram runs in other directories (workspaces, HOME)
    own_root = root is None
    keep = keep or keep_dir is not None
    if root is not None:
        base = root
    elif keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix=f"{scenario.id}-", dir=keep_dir)).absolute()
    else:
        base = Path(tempfile.mkdtemp(prefix="engram-harness-"))
    result = ScenarioResult(scenario=scenario, version="?", root=str(base), binary=str(binary))
    world: World | None = None
    try:
        if version_as is None:
            result.version = engram_version(binary)
        else:
            result.version, result.reported_version = version_as, reported_engram_version(binary)
        env = EngramEnvironment(binary=binary, root=base).prepare()
        if db_copy_source is not None:
            copy_database(db_copy_source, env.db_path)
        logs = base / "logs"
        logs.mkdir(exist_ok=True)
        spec = scenario.header.cloud
        mark = time.monotonic()
        cloud = CloudHandle(
            cloud_mode,
            spec.token,
            list(spec.allowed_projects),
            logs / "fake-cloud.log",
            cloud_target,
            tls=spec.tls,
        )
        result.cloud_url = cloud.base_url
        result.timings["cloud_start"] = time.monotonic() - mark
        engram_env = {"ENGRAM_CLOUD_SERVER": cloud.base_url}
        token = spec.engram_token if spec.engram_token is not None else cloud.token
        if token:
            engram_env["ENGRAM_CLOUD_TOKEN"] = token
        if cloud.ca_file is not None:
            engram_env["SSL_CERT_FILE"] = str(cloud.ca_file)
        world = World(
            env=env,
            cloud=cloud,
            engram_env=engram_env,
            version=result.version,
            workspace_root=base / "workspaces",
        )
        for at in scenario.expectations:
            if isinstance(at.expectation, LocalExpectation) and at.expectation.local.at is not None:
                world.local_probes.setdefault(at.expectation.local.at, []).append(at.expectation.local)
        mark = time.monotonic()
        _make_workspaces(world, scenario.header.workspaces)
        result.timings["workspaces"] = time.monotonic() - mark
        mark = time.monotonic()
        world.run(["stats"])  # creates the database through engram itself
        acked_before = read_acked_seqs(env.db_path) if db_copy_source is not None else frozenset()
        result.timings["db_init"] = time.monotonic() - mark
        mark = time.monotonic()
        if spec.autosync:
            # The worker's 30 s ticker starts now, so the setup steps overlap its first period.
            world.ensure_daemon(autosync=True)
        result.timings["daemon_start"] = time.monotonic() - mark
        mark = time.monotonic()
        runner = StepRunner(
            world,
            (lambda record: progress(scenario, record)) if progress else None,
            deadline=started + scenario.header.timeout,
        )
        world.results.declared = declared_labels(scenario.steps)
        runner.run(scenario.steps)
        result.steps = runner.records
        result.timings["steps"] = time.monotonic() - mark
        mark = time.monotonic()
        _observe(result, world, acked_before, runner.marks)
        result.timings["evaluate"] = time.monotonic() - mark
    except SCENARIO_ERRORS as error:
        result.status, result.error = "error", error_detail(error)
    finally:
        mark = time.monotonic()
        if world is not None:
            if "journal" not in result.evidence:
                _cloud_evidence(result, world)
            try:
                world.close()
            except FakeCloudError as error:  # FakeCloudInternalError: the fake's own bug
                result.status, result.error = "error", str(error)
            result.stderr = world.output.text()
            _world_evidence(result, world, base)
        result.timings["teardown"] = time.monotonic() - mark
        result.timings["total"] = time.monotonic() - started
    if result.status != "error" and result.failed_step is not None:
        result.status = "failed"
    result.record_verdicts()
    write_evidence(result, base)
    # a failed scenario's directory is its evidence; one cut short by a stop signal is only a copy
    if own_root and not keep and (result.verdict(expect) == "passed" or children.stopping.is_set()):
        shutil.rmtree(base, ignore_errors=True)
    else:
        result.kept = True
    return result


def declared_labels(steps: tuple[Step, ...]) -> dict[str, int]:
    """Every `as:` label the steps (nested ones too) keep a result under, with its step's line."""
    labels: dict[str, int] = {}
    for step in steps:
        label = getattr(step.body, "as_", None)
        if isinstance(label, str):
            labels.setdefault(label, step.line)
        labels.update({k: v for k, v in declared_labels(step.children).items() if k not in labels})
    return labels


LOG_LIMIT = 200_000  # characters of each log in the JSON report; the kept directory has them whole


def _cloud_evidence(result: ScenarioResult, world: World) -> None:
    """The cloud's side, read while it still runs (best effort: a dead cloud leaves a note instead)."""
    try:
        result.evidence["journal"] = [entry_json(e) for e in world.cloud.client.journal().entries]
        result.evidence["received"] = [_received_json(m) for m in world.cloud.client.received()]
    except (FakeCloudError, httpx.HTTPError) as error:
        result.evidence.setdefault("journal", [])
        result.evidence["cloud_error"] = f"the cloud could not be read: {error}"


def _world_evidence(result: ScenarioResult, world: World, base: Path) -> None:
    evidence = result.evidence
    evidence["results"] = world.results.as_json()
    evidence["commands"] = [record.as_json() for record in world.evidence.commands]
    evidence["requests"] = world.evidence.requests
    evidence["observe"] = world.evidence.snapshots
    evidence["sync_state"] = result.sync_state
    evidence["devices"] = {
        name: {"root": str(device.env.root), "sync_state": read_sync_state_rows(device.db_path)}
        for name, device in world.devices.items()
    }
    logs: dict[str, str] = {}
    for path in sorted([*base.glob("logs/*"), *base.glob("devices/*/logs/*")]):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        shown = (
            text
            if len(text) <= LOG_LIMIT
            else f"... ({len(text) - LOG_LIMIT} characters cut)\n" + text[-LOG_LIMIT:]
        )
        logs[str(path.relative_to(base))] = shown
    evidence["logs"] = logs


EVIDENCE_DIR = "evidence"


def write_evidence(result: ScenarioResult, base: Path) -> None:
    """The evidence as files in the scenario's directory (kept when it fails, or with --keep)."""
    if not base.is_dir():
        return
    folder = base / EVIDENCE_DIR
    try:
        folder.mkdir(exist_ok=True)
        for name in (
            "journal",
            "received",
            "results",
            "commands",
            "requests",
            "observe",
            "sync_state",
            "devices",
        ):
            if name in result.evidence:
                (folder / f"{name}.json").write_text(
                    json.dumps(result.evidence[name], indent=2, default=str) + "\n", encoding="utf-8"
                )
        steps = [
            {
                "index": r.index,
                "device": r.device,
                "step": r.text,
                "line": r.line,
                "status": r.status,
                "seconds": round(r.seconds, 3),
                "error": r.error,
            }
            for r in result.steps
        ]
        (folder / "steps.json").write_text(json.dumps(steps, indent=2) + "\n", encoding="utf-8")
        (folder / "stderr.txt").write_text(result.stderr + "\n", encoding="utf-8")
    except OSError as error:
        result.evidence["write_error"] = f"{folder}: {error.strerror}"


def _observe(
    result: ScenarioResult, world: World, acked_before: frozenset[int], marks: dict[str, StepMarks]
) -> None:
    received = world.cloud.client.received()
    result.lanes = compute_lanes(
        read_local_mutations(world.db_path), received, acked_before, triaged_seqs(world.db_path)
    )
    result.sync_state_targets = read_sync_state_targets(world.db_path)
    result.sync_state = read_sync_state_rows(world.db_path)
    journal = world.cloud.client.journal()
    result.journal_excerpt = [_entry(entry) for entry in journal.entries[-40:]]
    result.evidence["journal"] = [entry_json(e) for e in journal.entries]
    result.evidence["received"] = [_received_json(m) for m in received]
    world.collect_logs()
    db_path = world.db_path
    observed = Observed(
        version=result.version,
        lanes=result.lanes,
        sync_state_targets=result.sync_state_targets,
        results=world.results,
        stderr=world.output.text(),
        received=received,
        journal=journal.entries,
        output=list(world.output.entries),
        marks=marks,
        sync_state=result.sync_state,
        snapshots=world.evidence.snapshots,
        count_local=lambda check: count_local_rows(db_path, check),
        db_path=db_path,
    )
    for at in result.scenario.expectations:
        expectation = at.expectation
        status, detail = evaluate(expectation, observed)
        rows = (
            [row.model_dump(exclude_none=True) for row in expectation.lanes.rows]
            if isinstance(expectation, LanesExpectation)
            else []
        )
        result.expectations.append(
            ExpectationResult(
                at.index,
                at.line,
                expectation.tag,
                expectation.kind,
                status,
                detail,
                expectation.why,
                rows,
                engram_range=expectation.engram or "",
            )
        )
    result.expectations.append(_nothing_else_lost(result))


def _nothing_else_lost(result: ScenarioResult) -> ExpectationResult:
    """The invariant: no lane/project loses a row, except what an in-range baseline `lost:` states."""
    stated: dict[tuple[str, str], int] = {}
    reasons: list[str] = []
    judged = {e.index: e.status for e in result.expectations}
    for at in result.scenario.expectations:
        if isinstance(at.expectation, LostExpectation) and judged.get(at.index) != "n/a":
            reasons.append(f"line {at.line}: {at.expectation.lost.reason}")
            for row in at.expectation.lost.rows:
                stated[(row.lane, row.project)] = max(stated.get((row.lane, row.project), 0), row.count)
    unstated = [
        f"{row.lane}/{row.project or EMPTY_PROJECT}: {row.lost - stated.get((row.lane, row.project), 0)}"
        for row in result.lanes.rows
        if row.lost > stated.get((row.lane, row.project), 0)
    ]
    lost = result.lanes.lost
    if unstated:
        detail = f"{lost} row(s) acked but never received by the cloud; not stated by a baseline: {', '.join(unstated)}"
    elif lost:
        detail = f"{lost} lost row(s), all stated as the baseline ({'; '.join(reasons)})"
    else:
        detail = ""
    return ExpectationResult(
        -1,
        result.scenario.line,
        "invariant",
        "lanes",
        "fail" if unstated else "pass",
        detail,
        "lost is a failure unless a baseline `lost:` states it",
    )


def _entry(entry: Any) -> dict[str, Any]:
    fields = ("id", "transport", "method", "path", "status", "project", "entity", "entity_key", "op")
    shown = {name: getattr(entry, name, None) for name in fields}
    shown["project"] = plain(shown["project"])  # "" is the one spelling of the empty project
    return shown


def entry_json(entry: Any) -> dict[str, Any]:
    """A journal entry for the evidence: every field, the empty project spelled ""."""
    fields = (
        "id",
        "time",
        "request_id",
        "transport",
        "method",
        "path",
        "status",
        "project",
        "entity",
        "entity_key",
        "op",
        "payload_digest",
    )
    shown = {name: getattr(entry, name, None) for name in fields}
    shown["transport"] = plain(shown["transport"])
    shown["project"] = plain(shown["project"])
    return shown


def _received_json(mutation: Any) -> dict[str, Any]:
    fields = ("seq", "transport", "project", "entity", "entity_key", "op", "payload_digest", "payload")
    shown = {name: getattr(mutation, name, None) for name in fields}
    shown["transport"] = plain(shown["transport"])
    return shown


def run_many(
    scenarios: list[Scenario],
    binary: Path,
    *,
    cloud_mode: CloudMode,
    jobs: int,
    cloud_target: CloudTarget | None = None,
    db_copy_source: Path | None = None,
    expect: ExpectMode = "all",
    progress: Callable[[Scenario, StepRecord], None] | None = None,
    done: Callable[[ScenarioResult], None] | None = None,
    keep: bool = False,
    keep_dir: Path | None = None,
    version_as: str | None = None,
) -> list[ScenarioResult]:
    """Scenarios side by side: they mostly wait on engram's worker, so threads overlap those waits."""

    def one(scenario: Scenario) -> ScenarioResult:
        outcome = run_scenario(
            scenario,
            binary,
            cloud_mode=cloud_mode,
            cloud_target=cloud_target,
            db_copy_source=db_copy_source,
            expect=expect,
            progress=progress,
            keep=keep,
            keep_dir=keep_dir,
            version_as=version_as,
        )
        if done is not None:
            done(outcome)
        return outcome

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        return list(pool.map(one, scenarios))
    finally:
        # on a stop signal the scenarios still queued never start; the running ones end with their children
        pool.shutdown(wait=True, cancel_futures=True)
