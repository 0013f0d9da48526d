"""sync_mutations rows whose payload is not valid UTF-8: named by seq, never a reason to stop reading.

engram v1.20 writes payloads with Go's json.Marshal, which replaces invalid bytes, so such a row comes
from another writer or a damaged file. The canary's reads decode leniently (canary.db.LENIENT_TEXT); this
check finds the rows from their bytes, once per row: a cursor in the state dir keeps the seq it reached.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from engram_sync_kit.canary.config import keep_state, state_file_for
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.findings import Finding

UNDECODABLE_PAYLOAD = "undecodable_payload"
CURSOR_KIND = "undecodable-cursor"
CURSOR_SCHEMA = "engram-canary/undecodable-cursor/v1"
EVIDENCE_SEQS = 100
MESSAGE_SEQS = 10


class UndecodableCursor(BaseModel):
    format: str = CURSOR_SCHEMA
    file: list[int]  # st_dev, st_ino: a file put in place by a restore is scanned from the start
    high_seq: int
    seqs: list[int]


def _file_identity(db_path: Path) -> list[int]:
    try:
        found = db_path.stat()
    except OSError:
        return []
    return [found.st_dev, found.st_ino]


def _not_utf8(value: object) -> int:
    if not isinstance(value, bytes):
        return 0
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return 1
    return 0


def _scan(connection: sqlite3.Connection, after_seq: int, seqs: list[int] | None = None) -> list[int]:
    """Seqs after AFTER_SEQ (or among SEQS) whose payload bytes are not valid UTF-8."""
    connection.create_function("canary_not_utf8", 1, _not_utf8, deterministic=True)
    where = "seq > ?" if seqs is None else f"seq IN ({', '.join('?' for _ in seqs)})"
    arguments = (after_seq,) if seqs is None else tuple(seqs)
    return [
        int(row[0])
        for row in connection.execute(
            f"SELECT seq FROM sync_mutations WHERE {where} AND canary_not_utf8(CAST(payload AS BLOB)) "
            "ORDER BY seq",
            arguments,
        )
    ]


def undecodable_seqs(db: EngramDb, *, use_cursor: bool) -> list[int]:
    """Every seq whose payload is not valid UTF-8: the rows past the cursor are scanned, the ones the
    cursor holds are checked again (still there, still bad); a cursor past the journal's end (another
    file) means a full scan."""
    connection = db.connection
    if not db.schema.has_column("sync_mutations", "payload"):
        return []
    high = int(connection.execute("SELECT ifnull(max(seq), 0) FROM sync_mutations").fetchone()[0])
    path = state_file_for(db.path, CURSOR_KIND) if use_cursor else None
    cursor = _load(path) if path is not None else None
    identity = _file_identity(db.path)
    if cursor is not None and cursor.file == identity and cursor.high_seq <= high:
        kept = _scan(connection, 0, cursor.seqs) if cursor.seqs else []
        seqs = kept + _scan(connection, cursor.high_seq)
    else:
        seqs = _scan(connection, 0)
    if path is not None and (
        cursor is None or (cursor.file, cursor.high_seq, cursor.seqs) != (identity, high, seqs)
    ):
        keep_state(path, UndecodableCursor(file=identity, high_seq=high, seqs=seqs).model_dump_json())
    return seqs


def _load(path: Path) -> UndecodableCursor | None:
    try:
        cursor = UndecodableCursor.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None
    return cursor if cursor.format == CURSOR_SCHEMA else None


def undecodable_findings(db: EngramDb, *, use_cursor: bool = True) -> tuple[list[Finding], dict[str, Any]]:
    """One finding naming the rows, in its own short read transaction, and the count for the summary."""
    with db.read_transaction():
        seqs = undecodable_seqs(db, use_cursor=use_cursor)
    if not seqs:
        return [], {"undecodable_payloads": 0}
    listed = ", ".join(str(seq) for seq in seqs[:MESSAGE_SEQS]) + (
        ", ..." if len(seqs) > MESSAGE_SEQS else ""
    )
    if len(seqs) == 1:
        rows = "1 sync_mutations row has a payload that is"
    else:
        rows = f"{len(seqs)} sync_mutations rows have payloads that are"
    finding = Finding(
        check=UNDECODABLE_PAYLOAD,
        severity="warning",
        message=f"{rows} not valid UTF-8 (seq {listed}); left out of the inbox and its triage",
        size=len(seqs),
        evidence={
            "count": len(seqs),
            "seqs": seqs[:EVIDENCE_SEQS],
            "first_seq": seqs[0],
            "last_seq": seqs[-1],
        },
    )
    return [finding], {"undecodable_payloads": len(seqs)}
