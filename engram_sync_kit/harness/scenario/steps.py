"""Steps in the domain's words, each played through one of engram's real interfaces.

What each step really does (v1.20.0, read in cmd/engram, internal/mcp, internal/server, internal/project):

- save via mcp: `engram mcp` started in the workspace, tool mem_save. Without `project` engram derives the
  project from the cwd (DetectProjectFull: .engram/config.json, git remote, git root, one child repo, else
  the directory's basename). This is the only real path that derives cwd keys; `engram save` does not.
- save via cli: `engram save T C [--project P]` in the workspace. Without --project v1.20 journals project ''
  under session 'manual-save' (no cwd detection); with it, session 'manual-save-P'.
- save via http: POST /observations to `engram serve` (session required). Without `project` v1.20 stores
  the observation with no project, though its session has one (docs/findings/http-save-converges-under-two-projects.md).
- session: POST /sessions {id, project, directory} (http, project required) or mcp mem_session_start
  (project derived from the cwd); directory is the workspace's path unless the step says otherwise
  (`omit` leaves the key out). prompt: POST /prompts or mcp mem_save_prompt.
- http: any request to `engram serve`, as written. observe: a snapshot of sync_state (read-only).
- cloud seed: another device's mutations, POSTed to the cloud's own /sync/mutations/push with its token.
- device: steps played on a second engram device (its own data dir and HOME, the same cloud).
- enroll: `engram cloud enroll P`. unenroll / alias: only when `engram cloud` lists the subcommand;
  otherwise the step fails as unsupported (v1.20 has neither).
- relate: POST /conflicts/compare (a judged relation between two saved observations).
- reenqueue how=update: PATCH /observations/{id}?expected_project=P with identical fields (v3 requires the
  owner in the query, predicted from server.go@d4397781; v1.20 ignores it); revise the same; how=copy_row SIMULATES LEGACY
  DATA: a byte-identical copy of the observation's latest sync_mutations row (the seed's item-7 control).
- time_travel and legacy_rows SIMULATE LEGACY DATA by writing engram's tables; no other step does.
- daemon: restart and stop end `engram serve` with SIGTERM; kill with SIGKILL (no shutdown: its worker's
  sync lease stays until it runs out), then starts it again at once.
- sync via autosync waits for cycles of the `engram serve` worker (read from GET /sync/status and the
  sync lease in sync_state); via manual runs `engram sync --cloud --project P` (the chunk path).
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import yaml
from pydantic import BaseModel

from engram_sync_kit.engram_contract.enqueue import JOURNAL_COLUMNS, mark_enqueued
from engram_sync_kit.engram_contract.journal_match import field_text
from engram_sync_kit.engram_contract.local_api import observation_path
from engram_sync_kit.engram_contract.worker_liveness import NON_ENROLLED_PENDING_REASON
from engram_sync_kit.fake_cloud.client import FakeCloudClient, FakeCloudWaitTimeout
from engram_sync_kit.fake_cloud.control import MAX_WAIT_SECONDS
from engram_sync_kit.harness.design import schema as ds
from engram_sync_kit.harness.design.checks import parse_status_inbox_line
from engram_sync_kit.harness.engram.env import meaningful_stderr
from engram_sync_kit.harness.engram.read import EngramReadError, read_engram
from engram_sync_kit.harness.errors import StepFailed, StepUnsupported
from engram_sync_kit.harness.polling import eventually
from engram_sync_kit.harness.scenario import schema as s
from engram_sync_kit.harness.scenario.loader import Step
from engram_sync_kit.harness.scenario.localdata import count_local_rows, local_key, read_sync_state_rows
from engram_sync_kit.harness.scenario.results import StepMarks, StepRecord
from engram_sync_kit.harness.scenario.step_results import (
    CanaryResult,
    CloudStatusResult,
    CommandOutput,
    DoctorResult,
    EngramInboxResult,
    EnrollResult,
    HttpResult,
    InboxListResult,
    RunResult,
    SaveResult,
    UnsupportedResult,
    save_result_name,
)
from engram_sync_kit.harness.world import SavedObservation, World

CYCLE_SECONDS = 45.0
WAIT_SLICE_SECONDS = MAX_WAIT_SECONDS  # one /_fake/wait call parks at most this long
UNSUPPORTED_HINT = "mark the step `if_unsupported: skip` to run the rest of the scenario on this version"


# ─── helpers ─────────────────────────────────────────────────────────────────


def _cwd(world: World, name: str | None) -> Path:
    return world.workspaces[name] if name else world.env.home


def _check(result: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        detail = meaningful_stderr(result.stderr if result.stderr.strip() else result.stdout).splitlines()
        raise StepFailed(f"{what} exited {result.returncode}: {' | '.join(detail[-3:])}")
    return result


@contextmanager
def _write(world: World) -> Iterator[sqlite3.Connection]:
    """A short write transaction, only for the steps that simulate legacy data: committed on success."""
    if not world.db_path.exists():
        raise StepFailed(f"{world.db_path} does not exist yet")
    with closing(sqlite3.connect(world.db_path, timeout=15, isolation_level=None)) as connection:
        connection.execute("PRAGMA busy_timeout = 15000")
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise


def _read_one(world: World, sql: str, parameters: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    def first_row(connection: sqlite3.Connection) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = connection.execute(sql, parameters).fetchone()
        return row

    return read_engram(world.db_path, first_row)


def _observation_row(world: World, observation_id: int) -> SavedObservation:
    row = _read_one(
        world,
        "SELECT id, COALESCE(sync_id, ''), title, content, type, COALESCE(project, '') FROM observations WHERE id = ?",
        (observation_id,),
    )
    if row is None:
        raise StepFailed(f"observation #{observation_id} is not in the database")
    return SavedObservation(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]))


def _saved(world: World, label: str) -> SavedObservation:
    if label not in world.observations:
        known = ", ".join(sorted(world.observations)) or "none yet (use save ... as: LABEL)"
        raise StepFailed(f"no saved observation labelled {label!r}; labelled so far: {known}")
    return world.observations[label]


def _http(world: World, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    daemon = world.ensure_daemon()
    status, data = daemon.request(method, path, body)
    if status >= 300:
        error = data.get("error", data) if isinstance(data, dict) else data
        raise StepFailed(f"engram serve {method} {path} answered {status}: {error}")
    return data


# ─── step implementations ────────────────────────────────────────────────────


def _directory(world: World, step: s.SessionStep, cwd: Path) -> dict[str, Any]:
    if step.directory is None:
        return {"directory": str(cwd)}
    if step.directory == s.OMIT:
        return {}
    return {"directory": with_workspace_paths(step.directory, world.workspaces)}


def do_session(world: World, step: s.SessionStep) -> None:
    cwd = _cwd(world, step.in_)
    directory = _directory(world, step, cwd)
    if step.via == "mcp":
        if step.project is not None:
            raise StepFailed(
                "session via mcp derives the project from the cwd; drop project or use via: http"
            )
        world.mcp(cwd).call_tool("mem_session_start", {"id": step.id, **directory})
        return
    _http(world, "POST", "/sessions", {"id": step.id, "project": step.project or "", **directory})


def do_end_session(world: World, step: s.EndSessionStep) -> None:
    _http(world, "POST", f"/sessions/{step.id}/end", {"summary": step.summary})


def do_save(world: World, step: s.SaveStep) -> None:
    cwd = _cwd(world, step.in_)
    answer: dict[str, Any] | None = None  # the answer, for `save_answer` checks
    printed: CommandOutput | None = None
    if step.via == "mcp":
        arguments: dict[str, Any] = {"title": step.title, "content": step.content, "type": step.type}
        for key, value in (
            ("project", step.project),
            ("session_id", step.session),
            ("topic_key", step.topic_key),
        ):
            if value is not None:
                arguments[key] = value
        answer = world.mcp(cwd).call_tool("mem_save", arguments)
        if "id" not in answer:
            raise StepFailed(f"mem_save answered without an id: {answer}")
        observation_id = int(answer["id"])
    elif step.via == "cli":
        args = ["save", step.title, step.content, "--type", step.type]
        if step.project is not None:
            args += ["--project", step.project]
        if step.topic_key is not None:
            args += ["--topic", step.topic_key]
        result = _check(world.run(args, cwd=cwd), "engram save")
        printed = CommandOutput(result.returncode, result.stdout, meaningful_stderr(result.stderr))
        match = re.search(r"#(\d+)", result.stdout)
        if match is None:
            raise StepFailed(f"engram save printed no observation id: {result.stdout.strip()!r}")
        observation_id = int(match.group(1))
    else:
        if step.session is None:
            raise StepFailed("save via http needs session (POST /observations requires session_id)")
        body: dict[str, Any] = {
            "session_id": step.session,
            "type": step.type,
            "title": step.title,
            "content": step.content,
        }
        if step.project is not None:
            body["project"] = step.project
        if step.topic_key is not None:
            body["topic_key"] = step.topic_key
        posted = _http(world, "POST", "/observations", body)
        answer, observation_id = posted, int(posted["id"])
    if step.as_:
        world.observations[step.as_] = _observation_row(world, observation_id)
        saved = SaveResult(step.via, str(cwd), answer, printed, world.observations[step.as_].sync_id)
        world.results.record(save_result_name(step.as_), saved)


def do_prompt(world: World, step: s.PromptStep) -> None:
    if step.via == "mcp":
        world.mcp(_cwd(world, step.in_)).call_tool(
            "mem_save_prompt", {"content": step.content, "session_id": step.session}
        )
        return
    body: dict[str, Any] = {"session_id": step.session, "content": step.content}
    if step.project is not None:
        body["project"] = step.project
    _http(world, "POST", "/prompts", body)


def do_enroll(world: World, step: s.EnrollStep) -> None:
    result = world.run(["cloud", "enroll", step.project])
    if step.as_:
        world.results.record(step.as_, EnrollResult(*_printed(result)))
    _check(result, f"engram cloud enroll {step.project}")


def _printed(result: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    return result.returncode, result.stdout, meaningful_stderr(result.stderr)


def do_cloud_status(world: World, step: ds.CloudStatusStep) -> None:
    result = world.run(["cloud", "status"], cwd=_cwd(world, step.in_))
    line = parse_status_inbox_line(result.stdout)
    world.results.record(step.as_, CloudStatusResult(*_printed(result), inbox=line))
    _check(result, "engram cloud status")


def do_engram_inbox(world: World, step: ds.EngramInboxStep) -> None:
    try:
        _require_cloud_subcommand(world, "inbox", "`engram cloud inbox` (design §3)")
    except StepUnsupported as unsupported:  # a `command` check on it then says why it has no output
        world.results.record(step.as_, UnsupportedResult(str(unsupported)))
        raise
    args = ["cloud", "inbox", step.action]
    if step.project is not None:
        args += ["--project", step.project]
    if step.claim_as is not None:
        args += ["--as", step.claim_as]
    if step.cwd is not None:
        args += ["--cwd", str(_cwd(world, step.cwd))]
    if step.noise:
        args.append("--noise")
    result = world.run(args)
    world.results.record(step.as_, EngramInboxResult(*_printed(result)))
    if step.exit is not None and result.returncode != step.exit:
        detail = " | ".join(meaningful_stderr(result.stderr).splitlines())[-300:]
        raise StepFailed(
            f"engram {' '.join(args)} exited {result.returncode}, expected {step.exit}: {detail}"
        )


def _require_cloud_subcommand(world: World, name: str, what: str) -> None:
    available = world.cloud_subcommands()
    if name not in available:
        listed = ", ".join(sorted(available)) or "nothing"
        raise StepUnsupported(
            f"engram {world.version} has no {what}: `engram cloud` lists {listed}; {UNSUPPORTED_HINT}"
        )


def do_unenroll(world: World, step: s.UnenrollStep) -> None:
    _require_cloud_subcommand(world, "unenroll", "`engram cloud unenroll`")
    _check(world.run(["cloud", "unenroll", step.project]), f"engram cloud unenroll {step.project}")


def do_alias(world: World, step: s.AliasStep) -> None:
    _require_cloud_subcommand(world, "alias", "alias map (`engram cloud alias`, design §4)")
    source = step.key if step.key is not None else str(_cwd(world, step.cwd))
    flag = "--key" if step.key is not None else "--cwd"
    _check(world.run(["cloud", "alias", flag, source, step.project]), "engram cloud alias")


def do_relate(world: World, step: s.RelateStep) -> None:
    a, b = _saved(world, step.a), _saved(world, step.b)
    _http(
        world,
        "POST",
        "/conflicts/compare",
        {
            "memory_id_a": a.id,
            "memory_id_b": b.id,
            "relation": step.relation,
            "confidence": step.confidence,
            "reasoning": step.reasoning,
        },
    )


def do_reenqueue(world: World, step: s.ReenqueueStep) -> None:
    saved = _saved(world, step.of)
    if step.how == "update":
        body = {"title": saved.title, "content": saved.content}
        _http(world, "PATCH", observation_path(saved.id, saved.project), body)
        return
    with _write(world) as connection:
        row = connection.execute(
            "SELECT seq, target_key FROM sync_mutations WHERE entity = 'observation' AND entity_key = ? "
            "AND source = 'local' ORDER BY seq DESC LIMIT 1",
            (saved.sync_id,),
        ).fetchone()
        if row is None:
            raise StepFailed(f"observation {step.of!r} ({saved.sync_id}) has no sync_mutations row to copy")
        cursor = connection.execute(
            f"INSERT INTO sync_mutations ({JOURNAL_COLUMNS}) SELECT {JOURNAL_COLUMNS} FROM sync_mutations WHERE seq = ?",
            (row[0],),
        )
        mark_enqueued(connection, row[1], int(cursor.lastrowid or 0))


def do_revise(world: World, step: s.ReviseStep) -> None:
    saved = _saved(world, step.of)
    body = {"title": step.title or saved.title, "content": step.content or saved.content}
    _http(world, "PATCH", observation_path(saved.id, saved.project), body)
    world.observations[step.of] = _observation_row(world, saved.id)


def do_delete(world: World, step: s.DeleteStep) -> None:
    row = _read_one(
        world,
        "SELECT id FROM observations WHERE title = ? AND deleted_at IS NULL ORDER BY id LIMIT 1",
        (step.title,),
    )
    if row is None:
        raise StepFailed(f"no live observation titled {step.title!r} to delete")
    result = world.run(["delete", str(row[0]), *(["--hard"] if step.hard else [])])
    _check(result, f"engram delete {row[0]}")


def do_cloud(world: World, step: s.CloudStep) -> None:
    client = world.cloud.client
    if step.allowlist is not None:
        client.set_allowlist(list(step.allowlist))
    if step.pause:
        client.pause(step.pause, paused=True)
    if step.resume:
        client.pause(step.resume, paused=False)
    if step.clear_faults:
        client.clear_faults()
    if step.faults is not None:
        client.add_faults([_fault(fault) for fault in step.faults])
    if step.seed:
        _seed(world, step.seed)


def _seed(world: World, mutations: list[s.SeedMutation]) -> None:
    """Push another device's mutations through the cloud's own sync route, as that device would."""
    entries = [mutation.model_dump() for mutation in mutations]
    headers = {"Authorization": f"Bearer {world.cloud.token}"} if world.cloud.token else {}
    try:
        response = httpx.post(
            f"{world.cloud.base_url}/sync/mutations/push",
            json={"entries": entries},
            headers=headers,
            timeout=30,
            verify=str(world.cloud.ca_file) if world.cloud.ca_file is not None else True,
            trust_env=False,
        )
    except httpx.HTTPError as error:
        raise StepFailed(f"seeding the cloud: POST /sync/mutations/push failed: {error}") from None
    world.evidence.request(
        {
            "via": "cloud seed",
            "method": "POST",
            "path": f"{world.cloud.base_url}/sync/mutations/push",
            "body": {"entries": entries},
            "status": response.status_code,
            "answer": response.text,
        }
    )
    if response.status_code != 200:
        raise StepFailed(
            f"seeding the cloud: POST /sync/mutations/push answered {response.status_code}: "
            f"{response.text.strip()[:300]}"
        )


def _fault(fault: s.Fault) -> dict[str, Any]:
    data: dict[str, Any] = fault.model_dump(mode="json", exclude_none=True)
    return data


@dataclass(frozen=True)
class WorkerSnapshot:
    """What tells one autosync cycle from the next: the worker's status, its lease, the fake's journal."""

    last_sync_at: Any
    failures: Any
    phase: Any
    reason_code: Any
    lease: str | None
    journal_id: int


BLOCKED_REASON = NON_ENROLLED_PENDING_REASON
BLOCKED_PHASE = "degraded"  # /sync/status while a cycle runs says "running" (cmd/engram/autosync_status.go)


def _status_snapshot(world: World) -> WorkerSnapshot:
    """The lease first, then the worker's status: v1.20 takes a cycle's lease and then, with no I/O
    between, sets the phase to running (manager.go cycle() and push()). Read the other way round, a
    cycle starting between the two reads showed its new lease beside the last cycle's blocked status and
    passed for a blocked cycle that had ended, before its push reached the fake."""
    assert world.daemon is not None
    lease = _lease(world)
    status = world.daemon.sync_status()
    return WorkerSnapshot(
        status.get("last_sync_at"),
        status.get("consecutive_failures"),
        status.get("phase"),
        status.get("reason_code"),
        lease,
        _own_journal_mark(world),
    )


def _own_journal_mark(world: World) -> int:
    """The latest journal entry of WORLD's own requests: another machine's worker, in the same cloud,
    journals its cycles too, and a blocked cycle of this one sends nothing."""
    _journal_mark(world)
    return world.own_journal_seen


def _lease(world: World) -> str | None:
    try:
        row = _read_one(world, "SELECT lease_until FROM sync_state WHERE target_key = 'cloud'")
    except EngramReadError:
        return None
    return None if row is None or row[0] is None else str(row[0])


def _cycle_done(before: WorkerSnapshot, now: WorkerSnapshot) -> bool:
    """Has one worker cycle ended since BEFORE? v1.20 sets last_sync_at (success) or the failure count
    (a refused push or pull) only at a cycle's end, after the fake answered its requests. A cycle that
    only finds unenrolled rows ("blocked") sends nothing and changes neither: it shows as a renewed lease,
    the blocked reason, and a journal with nothing new. A renewed lease alone is no end: every cycle
    takes the lease at its start, before its push (counting it ended `cycles: N` after N-1 refusals), and
    a cycle still running under its new lease has not ended whatever reason the last one left."""
    if now.last_sync_at != before.last_sync_at or now.failures != before.failures:
        return True
    return (
        now.lease != before.lease
        and now.phase == BLOCKED_PHASE
        and now.reason_code == BLOCKED_REASON
        and now.journal_id == before.journal_id
    )


def do_sync(world: World, step: s.SyncStep) -> None:
    if step.via == "manual":
        mark = _journal_mark(world)
        result = world.run(["sync", "--cloud", "--project", step.project or ""], cwd=_cwd(world, step.in_))
        _check(result, f"engram sync --cloud --project {step.project}")
        await_journal(
            world.cloud.client, mark, timeout=10, what="the fake cloud to journal the manual sync's requests"
        )
        return
    daemon = world.daemon
    if daemon is None or not daemon.running or not daemon.autosync:
        raise StepFailed("sync via autosync needs the engram serve worker: set cloud.autosync: true")
    timeout = step.timeout or CYCLE_SECONDS * (step.cycles if step.until is None else 2)
    if step.until is not None:
        before = _status_snapshot(world)
        await_received(world.cloud.client, step.until, timeout=timeout)
        # The worker acks after the cloud answered: let that cycle finish before anyone reads the lanes.
        eventually(
            lambda: True if _cycle_done(before, _status_snapshot(world)) else None,
            timeout=CYCLE_SECONDS,
            interval=0.1,
            what="the autosync cycle that delivered them to finish",
        )
        return
    deadline = time.monotonic() + timeout
    before = _status_snapshot(world)
    for cycle in range(step.cycles):
        remaining = max(1.0, deadline - time.monotonic())

        def finished(previous: WorkerSnapshot = before) -> WorkerSnapshot | None:
            now = _status_snapshot(world)
            return now if _cycle_done(previous, now) else None

        try:
            before = eventually(finished, timeout=remaining, interval=0.2, what=f"autosync cycle {cycle + 1}")
        except StepFailed as error:
            status = world.daemon.sync_status() if world.daemon else {}
            raise StepFailed(f"{error} (worker status: {json.dumps(status, default=str)})") from None


plain = field_text  # a field as text for matching (engram_contract.journal_match)


def await_journal(client: FakeCloudClient, since_id: int, *, timeout: float, what: str) -> None:
    """Until the fake journals an entry newer than SINCE_ID: one /_fake/wait call, not a polling loop."""
    try:
        client.wait(1, timeout=timeout, since_id=since_id)
    except FakeCloudWaitTimeout as error:
        closest = f"; closest: {json.dumps(error.closest[0], default=str)}" if error.closest else ""
        raise StepFailed(f"timed out after {timeout:.0f}s waiting for {what} ({error}{closest})") from None


def await_received(client: FakeCloudClient, until: s.UntilReceived, *, timeout: float) -> None:
    """Until the cloud has stored UNTIL.received mutations matching UNTIL.match (every one it stored, not only
    the newer ones): parked on /_fake/wait, in calls of at most WAIT_SLICE_SECONDS (the fake's limit)."""
    if until.received == 0:
        return
    deadline = time.monotonic() + timeout
    while True:
        remaining = max(0.0, round(deadline - time.monotonic(), 2))
        try:
            client.wait_received(
                until.received, timeout=min(remaining, WAIT_SLICE_SECONDS), match=until.match
            )
            return
        except FakeCloudWaitTimeout as error:
            if time.monotonic() < deadline:
                continue
            closest = f"; closest: {json.dumps(error.closest[0], default=str)}" if error.closest else ""
            raise StepFailed(
                f"timed out after {timeout:.0f}s waiting for the cloud to store {until.received} mutation(s) "
                f"matching {dict(until.match)} ({error}{closest})"
            ) from None


def _journal_mark(world: World) -> int:
    """The id of the cloud's latest journal entry (reads only entries newer than the last mark); also
    moves `world.own_journal_seen` to the latest entry of this home's own requests."""
    entries = world.cloud.client.journal(since_id=world.journal_seen).entries
    world.journal_seen = max((entry.id for entry in entries), default=world.journal_seen)
    world.own_journal_seen = max(
        (entry.id for entry in entries if sent_by(world, entry.host)), default=world.own_journal_seen
    )
    return world.journal_seen


def sent_by(world: World, host: str | None) -> bool:
    """Could WORLD have sent a request the journal names by HOST? Unknown (no host): yes; where every
    machine addresses the cloud by one name, every request matches, as before hosts were journaled."""
    return host is None or not world.cloud_host or host == world.cloud_host


def do_daemon(world: World, step: s.DaemonStep) -> None:
    if step.action == "stop":
        if world.daemon is not None:
            world.daemon.stop()
        return
    if step.action == "restart" and world.daemon is not None:
        world.daemon.stop()
    if step.action == "kill" and world.daemon is not None:
        world.daemon.kill()
    world.ensure_daemon(autosync=step.autosync)


def _kit_command(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def _json_command(world: World, command: list[str], what: str) -> tuple[int, Any]:
    started = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StepFailed(f"{what} could not run: {error}") from None
    world.record_command(
        [Path(command[0]).name, *command[1:]], Path.cwd(), result, time.monotonic() - started
    )
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise StepFailed(
            f"{what} exited {result.returncode} without JSON: {(result.stderr or result.stdout).strip()[:300]}"
        ) from None


_WORKSPACE_REF = re.compile(r"\{workspace:([A-Za-z0-9][A-Za-z0-9_.-]*)\}")


def with_workspace_paths(value: Any, workspaces: Mapping[str, Path]) -> Any:
    """`{workspace:NAME}` in a side file becomes that workspace's absolute path (cwd aliases need it)."""
    if isinstance(value, str):

        def path_of(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in workspaces:
                known = ", ".join(sorted(workspaces)) or "none"
                raise StepFailed(f"{match.group(0)} names no workspace; workspaces: {known}")
            return str(workspaces[name])

        return _WORKSPACE_REF.sub(path_of, value)
    if isinstance(value, list):
        return [with_workspace_paths(item, workspaces) for item in value]
    if isinstance(value, dict):
        return {
            with_workspace_paths(key, workspaces): with_workspace_paths(item, workspaces)
            for key, item in value.items()
        }
    return value


def _side_file(world: World, name: str, content: dict[str, Any]) -> Path:
    path = world.env.root / name
    resolved = with_workspace_paths(content, world.workspaces)
    path.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    return path


def do_canary(world: World, step: s.CanaryStep) -> None:
    command = [_kit_command("engram-canary")]
    if step.config is not None:
        command += ["--config", str(_side_file(world, f"canary-{step.as_}.yaml", step.config))]
    command += ["check", "--db", str(world.db_path), "--format", "json"]
    if step.no_baseline:
        command.append("--no-baseline")
    code, report = _json_command(world, command, "engram-canary check")
    world.results.record(step.as_, CanaryResult(code, _json_object(report, "engram-canary check")))


def do_inbox(world: World, step: s.InboxStep) -> None:
    command = [_kit_command("engram-canary")]
    if step.aliases is not None:
        aliases = _side_file(world, f"aliases-{step.as_}.yaml", step.aliases)
        command += [
            "--config",
            str(_side_file(world, f"canary-{step.as_}.yaml", {"inbox": {"aliases": str(aliases)}})),
        ]
    command += ["inbox", "list", "--db", str(world.db_path), "--format", "json"]
    code, listing = _json_command(world, command, "engram-canary inbox list")
    if not isinstance(listing, list) or not all(isinstance(entry, dict) for entry in listing):
        raise StepFailed(f"engram-canary inbox list exited {code} with JSON that is not a list of keys")
    world.results.record(step.as_, InboxListResult(code, tuple(listing)))


def do_doctor(world: World, step: s.DoctorStep) -> None:
    result = world.run(["doctor", "--json"])
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise StepFailed(f"engram doctor --json exited {result.returncode} without JSON") from None
    world.results.record(step.as_, DoctorResult(_json_object(report, "engram doctor --json")))


def _json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StepFailed(f"{what} printed JSON that is not an object: {json.dumps(value)[:200]}")
    return value


def do_http(world: World, step: s.HttpStep) -> None:
    daemon = world.ensure_daemon()
    body = with_workspace_paths(step.body, world.workspaces)
    status, answer = daemon.request(step.method, step.path, body)
    if step.as_:
        world.results.record(step.as_, HttpResult(status, answer))
    wanted = f"{step.status}" if step.status is not None else "a 2xx"
    if (step.status is None and not 200 <= status < 300) or (
        step.status is not None and status != step.status
    ):
        shown = json.dumps(answer, default=str)[:300]
        raise StepFailed(
            f"engram serve {step.method} {step.path} answered {status}, expected {wanted}: {shown}"
        )


def do_observe(world: World, step: s.ObserveStep) -> None:
    status = world.daemon.sync_status() if world.daemon is not None and world.daemon.running else {}
    world.evidence.snapshots[step.as_] = {
        "device": world.device,
        "sync_state": read_sync_state_rows(world.db_path),
        "sync_status": status,
        "local": {
            local_key(check): count_local_rows(world.db_path, check)
            for check in world.local_probes.get(step.as_, [])
        },
        "journal_id": _journal_mark(world),
    }


def do_run(world: World, step: s.RunStep) -> None:
    result = world.run(list(step.args), cwd=_cwd(world, step.in_))
    if step.as_:
        world.results.record(step.as_, RunResult(result.returncode, result.stdout, result.stderr))
    if step.exit is not None and result.returncode != step.exit:
        detail = " | ".join(meaningful_stderr(result.stderr).splitlines())[-300:]
        raise StepFailed(
            f"engram {' '.join(step.args)} exited {result.returncode}, expected {step.exit}: {detail}"
        )


def do_reconcile(world: World, step: s.ReconcileStep) -> None:
    # engram's own environment: reconcile finds the cloud, its token and CA the way engram does.
    command = [_kit_command("engram-canary"), "reconcile", "--db", str(world.db_path), "--format", "json"]
    if step.since is not None:
        command += ["--since", step.since]
    result = _canary_command(world, command, "engram-canary reconcile")
    world.results.record(step.as_, RunResult(result.returncode, result.stdout, result.stderr))


def do_triage(world: World, step: s.TriageStep) -> None:
    args = [str(arg) for arg in with_workspace_paths(list(step.args), world.workspaces)]
    command = [_kit_command("engram-canary"), *args, "--db", str(world.db_path)]
    result = _canary_command(world, command, f"engram-canary {' '.join(step.args[:2])}")
    world.results.record(step.as_, RunResult(result.returncode, result.stdout, result.stderr))
    if step.exit is not None and result.returncode != step.exit:
        detail = " | ".join((result.stderr or result.stdout).strip().splitlines())[-300:]
        raise StepFailed(
            f"engram-canary {' '.join(step.args)} exited {result.returncode}, expected {step.exit}: {detail}"
        )


def _canary_command(world: World, command: list[str], what: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=world.env.env(world.command_env()),
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise StepFailed(f"{what} could not run: {error}") from None
    world.record_command(
        [Path(command[0]).name, *command[1:]], Path.cwd(), result, time.monotonic() - started
    )
    return result


def do_rename(world: World, step: s.RenameStep) -> None:
    old = world.workspaces[step.workspace]
    if old in (world.env.home, Path("/")):
        raise StepFailed(f"rename: workspace {step.workspace!r} is {old}, which a scenario never renames")
    new = old.parent / step.to
    if new.exists():
        raise StepFailed(f"rename: {new} already exists")
    old.rename(new)
    # a workspace created inside the renamed one moves with it
    for name, path in list(world.workspaces.items()):
        if path == old or old in path.parents:
            world.workspaces[name] = new / path.relative_to(old)


def do_time_travel(world: World, step: s.TimeTravelStep) -> None:
    columns = {
        "sync_mutations": ("occurred_at", "acked_at"),
        "sessions": ("started_at", "ended_at"),
        "observations": ("created_at", "updated_at", "last_seen_at"),
        "user_prompts": ("created_at",),
    }
    shift = f"-{int(step.days * 86400)} seconds"
    with _write(world) as connection:
        for table in step.tables:
            sets = ", ".join(f"{column} = datetime({column}, ?)" for column in columns[table])
            where = " WHERE COALESCE(project, '') = ?" if step.project is not None else ""
            parameters: list[Any] = [shift] * len(columns[table])
            if step.project is not None:
                parameters.append(step.project)
            connection.execute(f"UPDATE {table} SET {sets}{where}", parameters)


def do_legacy_rows(world: World, step: s.LegacyRowsStep) -> None:
    with _write(world) as connection:
        for row in step.rows:
            payload = dict(row.payload)
            if row.project and "project" not in payload:
                payload["project"] = row.project
            connection.execute(
                "INSERT OR IGNORE INTO sync_state (target_key, lifecycle, updated_at) VALUES (?, 'pending', datetime('now'))",
                (row.target_key,),
            )
            age = f"-{int(row.age_days * 86400)} seconds"
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, occurred_at, "
                "acked_at) VALUES (?, ?, ?, ?, ?, 'local', ?, datetime('now', ?), "
                "CASE WHEN ? THEN datetime('now', ?) END)",
                (
                    row.target_key,
                    row.entity,
                    row.entity_key,
                    row.op,
                    json.dumps(payload),
                    row.project,
                    age,
                    row.acked,
                    age,
                ),
            )


StepT = TypeVar("StepT", bound=BaseModel, contravariant=True)
ModelT = TypeVar("ModelT", bound=BaseModel)


class StepHandler(Protocol[StepT]):
    """Runs one parsed step of its kind against the world."""

    def __call__(self, world: World, step: StepT, /) -> None: ...


@dataclass(frozen=True)
class StepKind:
    model: type[BaseModel]
    run: StepHandler[Any]


def step_kind(model: type[ModelT], run: StepHandler[ModelT]) -> StepKind:
    """One entry of HANDLERS: mypy checks that `run` takes the model the step's YAML parses into."""
    return StepKind(model, run)


#: step name -> its kind; with the nesting steps, one entry per schema.STEP_MODELS (tests/harness/test_dispatch_tables.py)
HANDLERS: dict[str, StepKind] = {
    "session": step_kind(s.SessionStep, do_session),
    "end_session": step_kind(s.EndSessionStep, do_end_session),
    "save": step_kind(s.SaveStep, do_save),
    "prompt": step_kind(s.PromptStep, do_prompt),
    "enroll": step_kind(s.EnrollStep, do_enroll),
    "unenroll": step_kind(s.UnenrollStep, do_unenroll),
    "alias": step_kind(s.AliasStep, do_alias),
    "relate": step_kind(s.RelateStep, do_relate),
    "reenqueue": step_kind(s.ReenqueueStep, do_reenqueue),
    "revise": step_kind(s.ReviseStep, do_revise),
    "delete": step_kind(s.DeleteStep, do_delete),
    "cloud": step_kind(s.CloudStep, do_cloud),
    "sync": step_kind(s.SyncStep, do_sync),
    "daemon": step_kind(s.DaemonStep, do_daemon),
    "canary": step_kind(s.CanaryStep, do_canary),
    "inbox": step_kind(s.InboxStep, do_inbox),
    "doctor": step_kind(s.DoctorStep, do_doctor),
    "run": step_kind(s.RunStep, do_run),
    "reconcile": step_kind(s.ReconcileStep, do_reconcile),
    "triage": step_kind(s.TriageStep, do_triage),
    "rename": step_kind(s.RenameStep, do_rename),
    "time_travel": step_kind(s.TimeTravelStep, do_time_travel),
    "legacy_rows": step_kind(s.LegacyRowsStep, do_legacy_rows),
    "http": step_kind(s.HttpStep, do_http),
    "observe": step_kind(s.ObserveStep, do_observe),
    "cloud_status": step_kind(ds.CloudStatusStep, do_cloud_status),
    "engram_inbox": step_kind(ds.EngramInboxStep, do_engram_inbox),
}


# ─── running a list of steps ─────────────────────────────────────────────────


def _substitute(value: Any, index: int) -> Any:
    if isinstance(value, str):
        return value.replace("{i}", str(index))
    if isinstance(value, list):
        return [_substitute(item, index) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, index) for key, item in value.items()}
    return value


class StepRunner:
    """Plays steps in order, recording each; stops at the first failure."""

    def __init__(
        self,
        world: World,
        progress: Callable[[StepRecord], None] | None = None,
        *,
        deadline: float | None = None,
    ) -> None:
        self.world = world
        self.records: list[StepRecord] = []
        self.progress = progress
        self.deadline = deadline
        self.marks: dict[str, StepMarks] = {}

    def _begin(self, label: str | None) -> tuple[int, int] | None:
        if label is None:
            return None
        self.world.collect_logs()
        return _journal_mark(self.world), self.world.output.mark()

    def _end(self, label: str | None, begun: tuple[int, int] | None) -> None:
        if label is None or begun is None:
            return
        self.world.collect_logs()
        self.marks[label] = StepMarks(begun[0], _journal_mark(self.world), begun[1], self.world.output.mark())

    def run(self, steps: tuple[Step, ...], prefix: str = "") -> bool:
        for number, step in enumerate(steps, start=1):
            index = f"{prefix}{number}"
            if step.name == "device":
                assert isinstance(step.body, s.DeviceStep)
                started = time.monotonic()
                try:
                    device = self.world.other_device(step.body.name)
                except StepFailed as failure:
                    self._record(
                        StepRecord(index, step.name, step.line, step.describe(), "failed", 0.0, str(failure))
                    )
                    return False
                nested = StepRunner(device, self.progress, deadline=self.deadline)
                nested.marks = self.marks
                if not nested.run(step.children, prefix=f"{index}."):
                    self.records.extend(nested.records)
                    return False
                self.records.extend(nested.records)
                self._record(
                    StepRecord(
                        index, step.name, step.line, step.describe(), "ok", time.monotonic() - started
                    ),
                )
                continue
            if step.name == "repeat":
                assert isinstance(step.body, s.RepeatStep)
                started = time.monotonic()
                for repetition in range(step.body.times):
                    expanded = tuple(
                        Step(
                            child.name,
                            s.STEP_MODELS[child.name].model_validate(
                                _substitute({} if child.raw is None else child.raw, repetition)
                            ),
                            child.line,
                            _substitute(child.raw, repetition),
                        )
                        for child in step.children
                    )
                    quiet = StepRunner(self.world, deadline=self.deadline)
                    quiet.marks = self.marks
                    if not quiet.run(expanded, prefix=f"{index}.{repetition}."):
                        self.records.extend(quiet.records[-1:])
                        return False
                self._record(
                    StepRecord(index, step.name, step.line, step.describe(), "ok", time.monotonic() - started)
                )
                continue
            if not self._one(step, index):
                return False
        return True

    def _one(self, step: Step, index: str) -> bool:
        body: BaseModel = step.body
        if self.deadline is not None and time.monotonic() > self.deadline:
            error = "the scenario's timeout ran out before this step (raise `timeout:` in the scenario)"
            self._record(StepRecord(index, step.name, step.line, step.describe(), "failed", 0.0, error))
            return False
        expect_error = getattr(body, "expect_error", None)
        label = getattr(body, "label", None) or (body.as_ if isinstance(body, s.ObserveStep) else None)
        started = time.monotonic()
        status, error = "ok", ""
        begun: tuple[int, int] | None = None
        try:
            begun = self._begin(label)
            HANDLERS[step.name].run(self.world, body)
            if expect_error is not None:
                status, error = "failed", f"expected an error containing {expect_error!r}, the step succeeded"
        except StepUnsupported as failure:
            if getattr(body, "if_unsupported", "fail") == "skip":
                status, error = "skipped", str(failure)
            else:
                status, error = "failed", str(failure)
        except StepFailed as failure:
            if expect_error is not None and expect_error in str(failure):
                status, error = "ok", f"failed as expected: {failure}"
            else:
                status, error = "failed", str(failure)
        except Exception as failure:  # the cloud client, sqlite or http: reported in one line, never a trace
            status, error = "failed", f"{type(failure).__name__}: {failure}"
        try:
            self._end(label, begun)
        except Exception as failure:  # the same one-line report as the step
            if status != "failed":
                status, error = "failed", f"marking step {label!r}: {type(failure).__name__}: {failure}"
        self._record(
            StepRecord(
                index,
                step.name,
                step.line,
                step.describe(),
                status,
                time.monotonic() - started,
                error,
                self.world.device,
            )
        )
        return status != "failed"

    def _record(self, record: StepRecord) -> None:
        self.records.append(record)
        if self.progress is not None:
            self.progress(record)
