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

import posixpath
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from canary.db import Schema, read_transaction
from canary.findings import Finding

SESSION_SPANS_DIRECTORIES = "session_spans_directories"
BUCKET_SESSION = "manual-save"
EVIDENCE_DIRECTORIES = 20  # directories listed per finding; the count is always whole

_SESSION_UPSERTS = """
SELECT entity_key, json_extract(payload, '$.directory'), project, seq, occurred_at
  FROM sync_mutations
 WHERE target_key = ? AND entity = 'session' AND json_valid(payload)
"""


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


def _targets(connection: sqlite3.Connection) -> Iterator[str]:
    """Distinct sync_mutations.target_key by skip-scan of the (target_key, ...) index."""
    row = connection.execute("SELECT min(target_key) FROM sync_mutations").fetchone()
    while row is not None and row[0] is not None:
        yield str(row[0])
        row = connection.execute(
            "SELECT min(target_key) FROM sync_mutations WHERE target_key > ?", (row[0],)
        ).fetchone()


def read_session_directories(
    connection: sqlite3.Connection, schema: Schema
) -> dict[str, dict[str, DirectorySeen]]:
    """session id -> normalized directory -> where it was seen (journal and sessions table)."""
    sessions: dict[str, dict[str, DirectorySeen]] = {}

    def seen(session_id: str, directory: str) -> DirectorySeen:
        per_session = sessions.setdefault(session_id, {})
        return per_session.setdefault(directory, DirectorySeen(directory))

    if schema.has_table("sync_mutations") and schema.has_column("sync_mutations", "payload"):
        has_project = schema.has_column("sync_mutations", "project")
        query = _SESSION_UPSERTS if has_project else _SESSION_UPSERTS.replace(", project,", ", '',")
        for target in list(_targets(connection)):
            for session_id, directory, project, seq, occurred_at in connection.execute(query, (target,)):
                normalized = normalize_directory(directory)
                if normalized:
                    seen(str(session_id), normalized).add(int(seq), occurred_at, str(project or ""))
    if schema.has_column("sessions", "directory"):
        for session_id, directory in connection.execute("SELECT id, directory FROM sessions"):
            normalized = normalize_directory(directory)
            if normalized:
                seen(str(session_id), normalized).in_sessions_table = True
    return sessions


def _observations_of(connection: sqlite3.Connection, schema: Schema, session_id: str) -> int | None:
    if not schema.has_column("observations", "session_id"):
        return None
    row = connection.execute(
        "SELECT count(*) FROM observations WHERE session_id = ?", (session_id,)
    ).fetchone()
    return int(row[0])


def stage_a_findings(connection: sqlite3.Connection, schema: Schema) -> tuple[list[Finding], dict[str, Any]]:
    """Sessions whose lifetime spans more than one directory, and a summary for the check's JSON."""
    with read_transaction(connection):
        sessions = read_session_directories(connection, schema)
        spanning = {sid: dirs for sid, dirs in sessions.items() if len(dirs) > 1}
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
                        "observations": _observations_of(connection, schema, session_id),
                        "source": "sync_mutations session upserts (payload directory) and sessions.directory",
                    },
                )
            )
    summary = {
        "sessions_with_directories": len(sessions),
        "sessions_spanning_directories": len(spanning) - len(buckets),
        "bucket_sessions_spanning_directories": buckets,
    }
    return findings, summary
