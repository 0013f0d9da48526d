"""Into SQLite: the real engram creates and enrolls the file, then the simulated legacy rows go in
with explicit column lists (never by a version's column order), in one transaction."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from engram_sync_kit.harness.deployment.history import History
from engram_sync_kit.harness.deployment.records import stamp
from engram_sync_kit.harness.deployment.sequencing import MUTATION_COLUMNS, SequencedRows, SyncStateRow
from engram_sync_kit.harness.deployment.spec import DeploymentError
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr

SESSION_COLUMNS = ("id", "project", "directory", "started_at")
OBSERVATION_COLUMNS = (
    "id",
    "sync_id",
    "session_id",
    "type",
    "title",
    "content",
    "tool_name",
    "project",
    "scope",
    "topic_key",
    "normalized_hash",
    "revision_count",
    "duplicate_count",
    "created_at",
    "updated_at",
)
PROMPT_COLUMNS = ("id", "sync_id", "session_id", "content", "project", "created_at")
RELATION_COLUMNS = (
    "id",
    "sync_id",
    "source_id",
    "target_id",
    "relation",
    "reason",
    "confidence",
    "judgment_status",
    "marked_by_actor",
    "marked_by_kind",
    "session_id",
    "created_at",
    "updated_at",
)


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})"


def enroll(engram_binary: Path, workdir: Path, projects: Sequence[str]) -> Path:
    """The file as engram makes it: its own migrations, then `engram cloud enroll` per project."""
    world = EngramEnvironment(binary=engram_binary, root=workdir).prepare()
    for project in projects:
        result = world.run(["cloud", "enroll", project])
        if result.returncode != 0:
            detail = meaningful_stderr(result.stderr) or result.stdout.strip()
            raise DeploymentError(f"engram cloud enroll {project} failed ({result.returncode}): {detail}")
    if not world.db_path.is_file():
        raise DeploymentError(f"{engram_binary} did not create {world.db_path}")
    return world.db_path


def fill(db_path: Path, history: History, rows: SequencedRows) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        # Tuning for this private file only: nobody else has it open until it is moved into place.
        for pragma in (
            "journal_mode = OFF",
            "synchronous = OFF",
            "locking_mode = EXCLUSIVE",
            "temp_store = MEMORY",
            "cache_size = -262144",
        ):
            connection.execute(f"PRAGMA {pragma}")
        connection.execute("BEGIN")
        # engram's FTS triggers, set aside for the bulk insert: one FTS5 'rebuild' indexes the same rows
        # several times faster. They are recreated from engram's own SQL text, in engram's order.
        triggers = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
            " AND tbl_name IN ('observations', 'user_prompts') ORDER BY rowid"
        ).fetchall()
        for name, _sql in triggers:
            connection.execute(f'DROP TRIGGER "{name}"')
        _insert_all(connection, history, rows)
        for fts in ("observations_fts", "prompts_fts"):
            connection.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
        for _name, sql in triggers:
            connection.execute(sql)
        connection.execute("COMMIT")
        connection.execute("PRAGMA locking_mode = NORMAL")
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()


def _insert_all(connection: sqlite3.Connection, history: History, rows: SequencedRows) -> None:
    window_start = history.start
    connection.executemany(
        "UPDATE sync_enrolled_projects SET enrolled_at = ? WHERE project = ?",
        [
            (stamp(window_start - (len(history.enrolled) - i) * 3600), p)
            for i, p in enumerate(history.enrolled)
        ],
    )
    connection.execute("DELETE FROM sync_state")
    connection.executemany(insert_sql("sync_state", SyncStateRow._fields), rows.states)
    connection.executemany(
        insert_sql("sessions", SESSION_COLUMNS),
        sorted((s.id, s.project, s.directory, stamp(s.started)) for s in history.sessions),
    )
    observations = sorted(history.observations, key=lambda item: (item[0].created, item[0].sync_id))
    connection.executemany(
        insert_sql("observations", OBSERVATION_COLUMNS),
        (
            (
                number,
                o.sync_id,
                o.session.id,
                o.type,
                o.title,
                o.content,
                o.tool_name,
                o.session.project,
                "project",
                o.topic_key,
                hashlib.sha256(" ".join(o.content.lower().split()).encode()).hexdigest(),
                o.revisions,
                1,
                stamp(o.created),
                stamp(o.updated),
            )
            for number, (o, _acked) in enumerate(observations, start=1)
        ),
    )
    prompts = sorted(history.prompts, key=lambda prompt: (prompt.created, prompt.sync_id))
    connection.executemany(
        insert_sql("user_prompts", PROMPT_COLUMNS),
        (
            (number, p.sync_id, p.session.id, p.content, p.session.project, stamp(p.created))
            for number, p in enumerate(prompts, start=1)
        ),
    )
    relations = sorted(history.relations, key=lambda relation: (relation.created, relation.sync_id))
    connection.executemany(
        insert_sql("memory_relations", RELATION_COLUMNS),
        (
            (
                number,
                r.sync_id,
                r.source_id,
                r.target_id,
                r.verb,
                r.reason,
                r.confidence,
                "judged",
                "engram",
                "system",
                r.session_id,
                stamp(r.created),
                stamp(r.created),
            )
            for number, r in enumerate(relations, start=1)
        ),
    )
    connection.executemany(insert_sql("sync_mutations", MUTATION_COLUMNS), rows.mutations)
