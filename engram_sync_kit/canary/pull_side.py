"""The pull side: rows this machine pulled from the cloud and never applied (`pulled_rows_not_applied`).

A dead row (engram_contract.pull_apply) is a relation another machine synced that this one will never
hold; a deferred row waits for its memories and is retried on every pull, so one older than
`thresholds.stall_after_seconds` is reported too (its memories are not coming, or nothing pulls). Read
on every check: two indexed reads (idx_sad_status_seen) in one short read transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.selection import parse_engram_time
from engram_sync_kit.canary.liveness import duration_text
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.pull_apply import DEAD, DEAD_AFTER_TRIES, DEFERRED

PULLED_ROWS_NOT_APPLIED = "pulled_rows_not_applied"
_TABLE = "sync_apply_deferred"
_SHOWN = 5


def pull_side_findings(
    db: EngramDb, stall_after_seconds: float, now: datetime | None = None
) -> tuple[list[Finding], dict[str, Any]]:
    """The finding (at most one) and the counts the textfile plots."""
    schema = db.schema
    if not schema.has_table(_TABLE) or not schema.has_column(_TABLE, "apply_status"):
        return [], {}
    moment = now or datetime.now(UTC)
    with db.read_transaction():
        connection = db.connection
        counts = {
            str(status): (int(count), oldest)
            for status, count, oldest in connection.execute(
                f"SELECT apply_status, count(*), min(first_seen_at) FROM {_TABLE} "
                "WHERE apply_status IN (?, ?) GROUP BY apply_status",
                (DEFERRED, DEAD),
            )
        }
        dead_rows = [
            {"sync_id": str(sync_id), "entity": str(entity), "tries": int(tries or 0), "last_error": error}
            for sync_id, entity, tries, error in connection.execute(
                f"SELECT sync_id, entity, retry_count, last_error FROM {_TABLE} WHERE apply_status = ? "
                "ORDER BY first_seen_at LIMIT ?",
                (DEAD, _SHOWN),
            )
        ]
        cursor = None
        if schema.has_column("sync_state", "last_pulled_seq"):
            row = connection.execute(
                "SELECT last_pulled_seq FROM sync_state WHERE target_key = ?", (LEGACY_TARGET,)
            ).fetchone()
            cursor = int(row[0]) if row is not None and row[0] is not None else None
    dead, _ = counts.get(DEAD, (0, None))
    deferred, oldest_text = counts.get(DEFERRED, (0, None))
    oldest = parse_engram_time(str(oldest_text)) if oldest_text else None
    oldest_seconds = None if oldest is None else int((moment - oldest).total_seconds())
    facts: dict[str, Any] = {
        "dead_rows": dead,
        "deferred_rows": deferred,
        "oldest_deferred_seconds": oldest_seconds,
        "last_pulled_seq": cursor,
    }
    stale = deferred if oldest_seconds is not None and oldest_seconds > stall_after_seconds else 0
    if not dead and not stale:
        return [], facts
    parts = []
    if dead:
        parts.append(
            f"{dead} pulled rows were discarded on apply (sync_apply_deferred '{DEAD}': a payload engram cannot "
            f"decode, or a relation whose memories did not arrive in {DEAD_AFTER_TRIES} tries); engram never "
            "retries them, so they are in the cloud and not on this machine"
        )
    if stale:
        parts.append(
            f"{deferred} pulled rows wait '{DEFERRED}', the oldest for {duration_text(oldest_seconds or 0)} (retried on every pull, "
            f"'{DEAD}' after {DEAD_AFTER_TRIES} tries): their memories have not arrived, or nothing pulls"
        )
    finding = Finding(
        check=PULLED_ROWS_NOT_APPLIED,
        severity="warning",
        message="; ".join(parts),
        target_key=LEGACY_TARGET,
        size=dead + stale,
        evidence={
            "target_key": LEGACY_TARGET,
            **facts,
            "dead": dead_rows,
            "stall_after_seconds": stall_after_seconds,
        },
    )
    return [finding], facts
