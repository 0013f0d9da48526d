"""A tripwire for the assumption Stage A of the design's key derivation rests on (design §4).

Stage A takes a session's designation without a tiebreaker because, measured on one machine, no session
ever ran in more than one directory. If a long session crosses repos, every memory saved from the second
repo files under the first one's designation. This check finds such sessions.

Where the directories are: engram v1.20's `sessions` table keeps one directory per session (the first
one: a later `mem_session_start` or save from another cwd does not change it), so `GROUP BY id HAVING
count(DISTINCT directory) > 1` over that table can never fire. The journal can: every session upsert
in `sync_mutations` carries the directory of the process that wrote it (an MCP save re-upserts its
session with the MCP server's cwd). The check reads those payloads plus `sessions.directory`.

engram's own bucket sessions (`manual-save`, `manual-save-<project>`: every `engram save`, and MCP saves
without a session) collect unrelated calls from any cwd, each with its own project; they are counted in
the summary, not reported as findings.
"""

from __future__ import annotations

import json
import posixpath
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engram_sync_kit.canary.config import keep_state, state_file_for
from engram_sync_kit.canary.db import EngramDb, distinct_stored_values
from engram_sync_kit.canary.findings import Finding

SESSION_SPANS_DIRECTORIES = "session_spans_directories"
BUCKET_SESSION = "manual-save"
EVIDENCE_DIRECTORIES = 20  # directories listed per finding; the count is always whole

_SESSION_UPSERTS = """
SELECT json_extract(payload, '$.directory'), {project}, seq, occurred_at
  FROM sync_mutations
 WHERE target_key = CAST(? AS TEXT) AND entity = 'session' AND entity_key = ?
"""
# Candidates in one pass inside SQLite: sessions with more than one distinct raw directory (journal and
# sessions table). Raw spellings are at least as distinct as normalized ones, so no session is missed;
# the candidates are then read one by one and normalized.
_CANDIDATES = """
SELECT id FROM (
    SELECT entity_key AS id, json_extract(payload, '$.directory') AS dir
      FROM sync_mutations WHERE entity = 'session' {valid}
    UNION ALL
    SELECT id, directory FROM sessions
)
 WHERE dir IS NOT NULL AND trim(dir) != ''
 GROUP BY id
HAVING count(DISTINCT dir) > 1
"""
_NEW_SESSIONS = "SELECT DISTINCT entity_key FROM sync_mutations WHERE entity = 'session' AND seq > ?"
CURSOR_KIND = "stage-a-cursor"
CURSOR_SCHEMA = "engram-canary/stage-a-cursor/v1"
INCREMENTAL_LIMIT = 5000  # more new session ids than this: one pass in SQLite is cheaper


@dataclass
class DirectorySeen:
    directory: str
    first_seq: int | None = None
    last_seq: int | None = None
    first_at: str | None = None
    last_at: str | None = None
    upserts: int = 0
    projects: set[str] = field(default_factory=set)
    in_sessions_table: bool = False

    def add(self, seq: int, occurred_at: str | None, project: str) -> None:
        self.upserts += 1
        self.projects.add(project)
        if self.first_seq is None or seq < self.first_seq:
            self.first_seq, self.first_at = seq, occurred_at
        if self.last_seq is None or seq > self.last_seq:
            self.last_seq, self.last_at = seq, occurred_at

    def as_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "session_upserts": self.upserts,
            "projects": sorted(self.projects),
            "in_sessions_table": self.in_sessions_table,
        }


def normalize_directory(directory: Any) -> str:
    """One spelling per directory: `/a/b/`, `/a/./b` and `/a/b` are one (no filesystem access)."""
    text = directory.strip() if isinstance(directory, str) else ""
    if not text:
        return ""
    normalized = posixpath.normpath(text)
    return "/" + normalized.lstrip("/") if normalized.startswith("/") else normalized


def is_bucket_session(session_id: str) -> bool:
    return session_id == BUCKET_SESSION or session_id.startswith(BUCKET_SESSION + "-")


def _high_seq(connection: sqlite3.Connection) -> int:
    row = connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()
    return int(row[0] or 0)


def _candidates_in_sql(connection: sqlite3.Connection) -> set[str]:
    try:
        rows = connection.execute(_CANDIDATES.format(valid="")).fetchall()
    except sqlite3.OperationalError as error:  # a malformed payload somewhere: skip such rows instead
        if "JSON" not in str(error):
            raise
        rows = connection.execute(_CANDIDATES.format(valid="AND json_valid(payload)")).fetchall()
    return {str(row[0]) for row in rows}


def read_session_directories(db: EngramDb, session_ids: Iterable[str]) -> dict[str, dict[str, DirectorySeen]]:
    """session id -> normalized directory -> where it was seen (its journal upserts and sessions row)."""
    connection, schema = db.connection, db.schema
    sessions: dict[str, dict[str, DirectorySeen]] = {}
    wanted = sorted(set(session_ids))
    project = "project" if schema.has_column("sync_mutations", "project") else "''"
    query = _SESSION_UPSERTS.format(project=project)
    # Each lane by its stored bytes, so a key that is not valid UTF-8 still finds its rows.
    targets = list(distinct_stored_values(connection, "target_key").values())
    for session_id in wanted:
        per_session: dict[str, DirectorySeen] = {}
        for target in targets:
            for directory, row_project, seq, occurred_at in connection.execute(query, (target, session_id)):
                normalized = normalize_directory(directory)
                if normalized:
                    seen = per_session.setdefault(normalized, DirectorySeen(normalized))
                    seen.add(int(seq), occurred_at, str(row_project or ""))
        if schema.has_column("sessions", "directory"):
            row = connection.execute("SELECT directory FROM sessions WHERE id = ?", (session_id,)).fetchone()
            normalized = normalize_directory(row[0]) if row else ""
            if normalized:
                per_session.setdefault(normalized, DirectorySeen(normalized)).in_sessions_table = True
        sessions[session_id] = per_session
    return sessions


class StageACursor(BaseModel):
    """What the last check saw: the journal's high-water seq and the sessions that spanned directories."""

    format: str = CURSOR_SCHEMA
    high_seq: int
    spanning: list[str]


def _load_cursor(path: Path) -> StageACursor | None:
    try:
        cursor = StageACursor.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None
    return cursor if cursor.format == CURSOR_SCHEMA else None


def _save_cursor(path: Path, cursor: StageACursor) -> None:
    keep_state(path, cursor.model_dump_json())


def spanning_sessions(db: EngramDb, *, use_cursor: bool) -> tuple[dict[str, dict[str, DirectorySeen]], str]:
    """Sessions with more than one directory, and how they were found (full | incremental | cached).

    A session can only start to span when one of its upserts is journaled, so after a full pass only
    the sessions of rows past the cursor's high-water seq are read again (with the ones already found).
    """
    connection, schema = db.connection, db.schema
    if not (schema.has_table("sync_mutations") and schema.has_column("sync_mutations", "payload")):
        return {}, "none"
    high = _high_seq(connection)
    path = state_file_for(db.path, CURSOR_KIND) if use_cursor else None
    cursor = _load_cursor(path) if path is not None else None
    mode = "full"
    if cursor is not None and cursor.high_seq <= high:
        new = {str(row[0]) for row in connection.execute(_NEW_SESSIONS, (cursor.high_seq,))}
        if len(new) <= INCREMENTAL_LIMIT:
            candidates, mode = new | set(cursor.spanning), ("cached" if not new else "incremental")
    if mode == "full":
        candidates = _candidates_in_sql(connection)
    directories = read_session_directories(db, candidates)
    spanning = {sid: dirs for sid, dirs in directories.items() if len(dirs) > 1}
    if path is not None:
        _save_cursor(path, StageACursor(high_seq=high, spanning=sorted(spanning)))
    return spanning, mode


def _observations_of(db: EngramDb, session_id: str) -> int | None:
    if not db.schema.has_column("observations", "session_id"):
        return None
    row = db.connection.execute(
        "SELECT count(*) FROM observations WHERE session_id = ?", (session_id,)
    ).fetchone()
    return int(row[0])


def stage_a_findings(db: EngramDb, *, use_cursor: bool = True) -> tuple[list[Finding], dict[str, Any]]:
    """Sessions whose lifetime spans more than one directory, and a summary for the check's JSON."""
    with db.read_transaction():
        spanning, mode = spanning_sessions(db, use_cursor=use_cursor)
        buckets = sorted(sid for sid in spanning if is_bucket_session(sid))
        findings: list[Finding] = []
        for session_id in sorted(set(spanning) - set(buckets)):
            directories = sorted(spanning[session_id].values(), key=lambda d: (d.first_seq or 0, d.directory))
            projects = sorted({project for d in directories for project in d.projects if project})
            shown = ", ".join(d.directory for d in directories[:3]) + (
                ", ..." if len(directories) > 3 else ""
            )
            findings.append(
                Finding(
                    check=SESSION_SPANS_DIRECTORIES,
                    severity="warning",
                    message=(
                        f"session {session_id} ran in {len(directories)} directories ({shown}); Stage A "
                        "files its memories under one designation without a tiebreaker (design §4)"
                    ),
                    key=session_id,
                    size=len(directories),
                    evidence={
                        "session_id": session_id,
                        "directory_count": len(directories),
                        "directories": [d.as_json() for d in directories[:EVIDENCE_DIRECTORIES]],
                        "projects": projects,
                        "observations": _observations_of(db, session_id),
                        "source": "sync_mutations session upserts (payload directory) and sessions.directory",
                    },
                )
            )
    summary = {
        "sessions_spanning_directories": len(spanning) - len(buckets),
        "bucket_sessions_spanning_directories": buckets,
        "read": mode,
    }
    return findings, summary
