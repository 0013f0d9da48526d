"""Where triage keeps its backups and log, and what the log says was acked: read by reconcile, written by
triage (an --apply appends one JSON line per operation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

BACKUP_DIR_NAME = "engram-canary-backups"
TRIAGE_LOG_NAME = "triage-log.jsonl"


def default_backup_dir(db_path: Path) -> Path:
    return db_path.resolve().parent / BACKUP_DIR_NAME


def logged_acks(db_path: Path, log: Path | None = None) -> dict[int, datetime]:
    """The seqs this database's triage log says an --apply acked (discarded, replaced or claimed), with
    when. Best effort: a missing or unreadable log, or a line that is not an entry, is no entry."""
    path = log if log is not None else default_backup_dir(db_path) / TRIAGE_LOG_NAME
    acks: dict[int, datetime] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return acks
    resolved = str(db_path.resolve())
    for line in lines:
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or entry.get("db") != resolved:
                continue
            moment = datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
            seqs = [int(seq) for seq in entry.get("acked_seqs") or ()]
        except (ValueError, TypeError, KeyError, RecursionError):
            continue
        for seq in seqs:
            acks[seq] = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return acks
