"""What the kit's own triage --apply appended, judged on the database (explore's I4, and the scenario
check `triage_copies`): every copy its log names is in the database, acceptable to the cloud's push rules
and, for a memory, has its session in the copy's project.

The triage log (canary/triage_log.py, next to the database) names each --apply's acked seqs, whether they
were discarded (a drop) or replaced (a claim or repair: `copies` pairs the original's seq with its copy's).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.targets import normalize_project
from engram_sync_kit.canary.triage_log import TRIAGE_LOG_NAME, default_backup_dir
from engram_sync_kit.engram_contract import SESSION_REFERENCING_ENTITIES, PushRefusal, refusal_for_entry
from engram_sync_kit.harness.lanes import LocalMutation


def read_triage_entries(db_path: Path) -> list[dict[str, Any]]:
    """The triage log next to DB_PATH, one entry per --apply, oldest first (a missing log: none)."""
    path = default_backup_dir(db_path) / TRIAGE_LOG_NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    entries = []
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError, RecursionError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def push_refusal(row: LocalMutation) -> PushRefusal | None:
    """The cloud's refusal of this row (engram_contract's push rules, which the fake cloud enforces)."""
    return refusal_for_entry(
        project=row.project, entity=row.entity, entity_key=row.entity_key, op=row.op, payload=row.payload
    )


def refusal_of(row: LocalMutation) -> str | None:
    """The cloud's answer to this row as one line ("500 session payload directory is required ...")."""
    refusal = push_refusal(row)
    return None if refusal is None else f"{refusal.status} {refusal.reason}"


def _copy_pairs(entries: Iterable[dict[str, Any]]) -> dict[int, int]:
    """original seq -> its copy's seq, over every replacing (not discarding) entry."""
    return {
        int(pair[0]): int(pair[1])
        for entry in entries
        if not entry.get("discarded")
        for pair in entry.get("copies") or []
    }


@dataclass
class CopyProblems:
    #: (copy seq, the cloud's answer) for each waiting copy the cloud refuses
    refused: list[tuple[int, str]] = field(default_factory=list)
    #: (original, the project of its copy) for each row acked as replaced whose copy is not in the database
    missing: list[tuple[LocalMutation, str]] = field(default_factory=list)
    #: (copy seq, session id, project) for each copied memory whose session has no row in its project
    without_session: list[tuple[int, str, str]] = field(default_factory=list)


def copy_problems(
    local: Sequence[LocalMutation], entries: Sequence[dict[str, Any]], triaged: Iterable[int]
) -> CopyProblems:
    """LOCAL: the database's rows now; ENTRIES: the triage log entries to judge; TRIAGED: every seq the
    whole log says was acked on purpose (a session row dropped that way never reaches the cloud)."""
    problems = CopyProblems()
    by_seq = {row.seq: row for row in local}
    copy_of = _copy_pairs(entries)
    copies = {seq for seq in copy_of.values() if seq in by_seq}
    for seq in sorted(copies):
        row = by_seq[seq]
        reason = None if row.acked else refusal_of(row)
        if reason is not None:
            problems.refused.append((seq, reason))
    for entry in entries:
        if entry.get("discarded"):
            continue
        for seq in entry.get("acked_seqs") or []:
            original = by_seq.get(int(seq))
            if original is not None and copy_of.get(original.seq) not in by_seq:
                problems.missing.append(
                    (original, normalize_project(str(entry.get("project") or original.project)))
                )
    skipped = set(triaged)
    sessions = {
        (normalize_project(row.project), row.entity_key)
        for row in local
        if row.entity == "session" and row.seq not in skipped
    }
    for seq in sorted(copies):
        row = by_seq[seq]
        if row.entity not in SESSION_REFERENCING_ENTITIES or not isinstance(row.payload, dict):
            continue
        session = str(row.payload.get("session_id") or "")
        if session and (normalize_project(row.project), session) not in sessions:
            problems.without_session.append((seq, session, row.project))
    return problems
