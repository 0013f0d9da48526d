"""The invariant, as a property: no triage command shrinks what engram's worker can deliver.

The schema comes from the real engram v1.20 (it creates the template database); each example then fills a
copy with a generated mix of journal rows. That fill is a SIMULATION OF LEGACY DATA, written straight into
engram's tables: rows with and without a project, sessions with and without a directory and designation,
memories with and without their required fields, projects enrolled or not. A random sequence of triage
commands runs through the library, exactly as the CLI runs it (refusals allowed), and after each one:

- the deliverable set (the content of the pending listed rows the worker pushes before the first row the
  cloud refuses, judged by the shared validator engram_contract.refusal_for_entry) never shrinks;
- no row that would eventually deliver (listed and accepted) loses its content;
- triage never adds a listed row that the cloud refuses.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inbox_support import engram_ok

from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.triage.plan import (
    CleanupPlanner,
    InboxPlanner,
    LaneRowsPlanner,
    Planner,
    RowSelection,
    Selection,
    apply,
    plan_claim,
    plan_drop,
)
from engram_sync_kit.canary.triage.repair import RepairPlanner
from engram_sync_kit.engram_contract import payload_digest, refusal_for_entry
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

ENROLLED = ("alpha", "beta")
PROJECTS = ("", "alpha", "beta", "side", "gamma")
SAME = "(the session's project)"
Content = tuple[str, str, str, str, str]  # project, entity, entity_key, op, payload digest


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, engram_bin: Path) -> Path:
    """An empty engram v1.20 database, created by the real binary, with two enrolled projects."""
    world = EngramEnvironment(binary=engram_bin, root=tmp_path_factory.mktemp("template")).prepare()
    for project in ENROLLED:
        engram_ok(world, "cloud", "enroll", project)
    return world.db_path


@dataclass(frozen=True)
class Session:
    id: str
    project: str
    directory: str  # '' for a session created without one
    journal_directory: bool  # whether its journaled upsert carries the directory


@dataclass(frozen=True)
class Memory:
    entity: str  # observation | prompt
    session: int
    project: str
    complete: bool  # every required payload field present
    known: bool  # engram's own table has the full row (so repair can derive it)


sessions_strategy = st.lists(
    st.builds(
        Session,
        id=st.sampled_from(["s1", "s2", "s3", "manual-save", "s é 5"]),
        project=st.sampled_from(PROJECTS),
        directory=st.sampled_from(["", "/home/ana", "/home/ana/side", "/work/alpha", "/tmp/x y"]),
        journal_directory=st.booleans(),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda session: session.id,
)
memories_strategy = st.lists(
    st.builds(
        Memory,
        entity=st.sampled_from(["observation", "observation", "prompt"]),
        session=st.integers(min_value=0, max_value=3),
        project=st.sampled_from([*PROJECTS, SAME, SAME, SAME]),
        complete=st.booleans(),
        known=st.booleans(),
    ),
    max_size=8,
)
operations_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.just("claim"),
            st.sampled_from(["side", "gamma", "unsorted", "alpha", "s1"]),
            st.sampled_from([None, "alpha", "beta", "side"]),
            st.booleans(),
            st.booleans(),
        ),
        st.tuples(st.just("drop"), st.sampled_from(["side", "gamma", "unsorted"]), st.booleans()),
        st.tuples(st.just("drop-unattributed")),
        st.tuples(st.just("drop-seq"), st.integers(min_value=1, max_value=6)),
        st.tuples(st.just("drop-seq"), st.integers(min_value=1, max_value=12)),
        st.tuples(st.just("repair")),
        st.tuples(st.just("cleanup")),
    ),
    min_size=1,
    max_size=4,
)


def simulate_legacy_rows(db: Path, sessions: list[Session], memories: list[Memory]) -> None:
    """SIMULATION OF LEGACY DATA: the generated mix, written straight into engram's tables."""
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        connection.execute("BEGIN")
        connection.execute("INSERT OR IGNORE INTO sync_state (target_key) VALUES ('cloud')")
        for session in sessions:
            connection.execute(
                "INSERT INTO sessions (id, project, directory) VALUES (?, ?, ?)",
                (session.id, session.project, session.directory),
            )
            payload: dict[str, object] = {
                "id": session.id,
                "project": session.project,
                "started_at": "2026-11-30",
            }
            if session.journal_directory and session.directory:
                payload["directory"] = session.directory
            journal(connection, session.project, "session", session.id, payload)
        for number, memory in enumerate(memories):
            session = sessions[memory.session % len(sessions)]
            project = session.project if memory.project == SAME else memory.project
            sync_id = f"{memory.entity[:3]}-{number}"
            if memory.entity == "observation":
                payload = {
                    "sync_id": sync_id,
                    "session_id": session.id,
                    "type": "manual",
                    "title": f"t{number}",
                    "content": f"c{number}",
                    "scope": "project",
                    "project": project,
                }
                if memory.known:
                    connection.execute(
                        "INSERT INTO observations (sync_id, session_id, type, title, content, project) "
                        "VALUES (?, ?, 'manual', ?, ?, ?)",
                        (sync_id, session.id, f"t{number}", f"c{number}", project),
                    )
            else:
                payload = {
                    "sync_id": sync_id,
                    "session_id": session.id,
                    "content": f"p{number}",
                    "project": project,
                }
                if memory.known:
                    connection.execute(
                        "INSERT INTO user_prompts (sync_id, session_id, content, project) VALUES (?, ?, ?, ?)",
                        (sync_id, session.id, f"p{number}", project),
                    )
            if not memory.complete:
                payload.pop("content")
            journal(connection, project, memory.entity, sync_id, payload)
        connection.execute("COMMIT")


def journal(connection: sqlite3.Connection, project: str, entity: str, key: str, payload: object) -> None:
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    connection.execute(
        "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
        "VALUES ('cloud', ?, ?, 'upsert', ?, ?)",
        (entity, key, text, project),
    )
    if project:
        connection.execute("INSERT OR IGNORE INTO sync_state (target_key) VALUES (?)", (f"cloud:{project}",))


@dataclass(frozen=True)
class Delivery:
    deliverable: frozenset[Content]  # pushed before the first refused row: what the worker delivers now
    eventual: frozenset[Content]  # listed and accepted: what delivers once the blockers are cleared
    refused_seqs: frozenset[int]


def delivery(db: Path) -> Delivery:
    """engram v1.20's worker as a model: it pushes the pending listed rows in seq order and stops at the
    first the cloud refuses (refusal judged by the shared validator)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = connection.execute(
            "SELECT seq, project, entity, entity_key, op, payload FROM sync_mutations WHERE target_key = 'cloud' "
            "AND acked_at IS NULL AND (project = '' OR project IN (SELECT project FROM sync_enrolled_projects)) "
            "ORDER BY seq"
        ).fetchall()
    deliverable: set[Content] = set()
    eventual: set[Content] = set()
    refused: set[int] = set()
    for seq, project, entity, key, op, payload in rows:
        content = (project, entity, key, op, payload_digest(payload))
        if refusal_for_entry(project=project, entity=entity, entity_key=key, op=op, payload=payload) is None:
            eventual.add(content)
            if not refused:
                deliverable.add(content)
        else:
            refused.add(int(seq))
    return Delivery(frozenset(deliverable), frozenset(eventual), frozenset(refused))


def planner_for(operation: tuple[object, ...]) -> Planner:
    name = operation[0]
    if name == "claim":
        _, key, as_project, with_telemetry, repair = operation
        selection = Selection(str(key), memories_only=not with_telemetry, all_cwds=True)
        target = None if as_project is None else str(as_project)
        return InboxPlanner(
            AliasMap(), lambda snapshot: plan_claim(snapshot, selection, target, repair=bool(repair))
        )
    if name == "drop":
        _, key, noise = operation
        dropped = Selection(str(key), telemetry_only=bool(noise), all_cwds=True)
        return InboxPlanner(AliasMap(), lambda snapshot: plan_drop(snapshot, dropped))
    if name == "drop-unattributed":
        return LaneRowsPlanner(RowSelection(unattributed=True))
    if name == "drop-seq":
        return LaneRowsPlanner(RowSelection(seqs=(int(str(operation[1])),)))
    if name == "repair":
        return RepairPlanner()
    return CleanupPlanner()


def run_operations(db: Path, backups: Path, operations: list[tuple[object, ...]]) -> Iterator[str]:
    for operation in operations:
        try:
            apply(db, planner_for(operation), backup_dir=backups, keep_backups=1)
        except CanaryError as error:  # a refusal: nothing was written
            yield f"{operation[0]}: refused ({error})"
        else:
            yield f"{operation[0]}: applied"


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sessions=sessions_strategy, memories=memories_strategy, operations=operations_strategy)
def test_no_triage_command_shrinks_what_the_worker_delivers(
    template: Path,
    tmp_path: Path,
    sessions: list[Session],
    memories: list[Memory],
    operations: list[tuple[object, ...]],
) -> None:
    for stale in tmp_path.glob("case*"):
        shutil.rmtree(stale)
    case = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
    case.mkdir()
    db = case / "engram.db"
    shutil.copyfile(template, db)
    simulate_legacy_rows(db, sessions, memories)
    before = delivery(db)
    for step in run_operations(db, case / "backups", operations):
        after = delivery(db)
        assert before.deliverable <= after.deliverable, step
        assert before.eventual <= after.eventual, step
        assert after.refused_seqs <= before.refused_seqs, step
        before = after


def test_the_model_sees_a_blocked_lane(template: Path, tmp_path: Path) -> None:
    """The property has teeth: a refused row in front holds the rest back, and clearing it frees them."""
    db = tmp_path / "engram.db"
    shutil.copyfile(template, db)
    simulate_legacy_rows(
        db,
        [Session("s1", "", "/home/ana", True), Session("s2", "alpha", "/work/alpha", True)],
        [Memory("observation", 1, "alpha", complete=True, known=True)],
    )
    blocked = delivery(db)
    assert (
        blocked.deliverable == frozenset() and len(blocked.eventual) == 2 and len(blocked.refused_seqs) == 1
    )
    assert list(run_operations(db, tmp_path / "backups", [("drop-unattributed",)])) == [
        "drop-unattributed: applied"
    ]
    assert delivery(db).deliverable == blocked.eventual
