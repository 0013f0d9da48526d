"""validate's lane table on a database of any size: rows are streamed, never held.

harness.lanes.compute_lanes matches every local row against what the cloud received, which needs each
row's decoded payload and digest; on a 1M-row deployment that held 2 GiB for a run in which the worker
pushed a few hundred rows. Only a row whose (entity, entity_key, op) the cloud received, or refused, can
match anything: those few candidates go through compute_lanes (same rules, same answer); every other row
is counted from its columns alone in one streamed pass, without its payload.
"""

from __future__ import annotations

import sqlite3
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engram_sync_kit.harness.lanes import (
    LaneTable,
    LocalMutation,
    MatchKey,
    MeasuredLaneRow,
    Received,
    compute_lanes,
    local_mutation,
    read_for_lanes,
)

_CHUNK = 500
_MERGED = ("delivered", "stranded", "lost", "duplicated", "delivered_as_current_state", "acked_before_run")


@dataclass(frozen=True)
class AckedSeqs:
    """The seqs acked when a run starts, sorted, 8 bytes each: memory follows the rows, never the seq
    values (a bitmap sized by the largest seq took 1.1 GB for seq 2^32, and failed for 2^63-1)."""

    seqs: array[int] = field(default_factory=lambda: array("q"))

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        at = bisect_left(self.seqs, seq)
        return at < len(self.seqs) and self.seqs[at] == seq

    @classmethod
    def read(cls, db: Path) -> AckedSeqs:
        def read(connection: sqlite3.Connection) -> AckedSeqs:
            seqs = array("q")
            rows = connection.execute(
                "SELECT seq FROM sync_mutations WHERE acked_at IS NOT NULL ORDER BY seq"
            )
            for (seq,) in rows:
                seqs.append(int(seq))
            return cls(seqs)

        result: AckedSeqs = read_for_lanes(db, read, cls())
        return result


def _key(item: Received) -> MatchKey:
    return (str(item.entity), str(item.entity_key), str(item.op), str(item.payload_digest))


def measure_lanes(
    db: Path, received: Sequence[Received], refused: Iterable[MatchKey], acked_before: AckedSeqs
) -> tuple[LaneTable, list[LocalMutation]]:
    """The lane table of DB after a run, and the candidate rows (those that can match a received or
    refused mutation, with their digests) for the refusal counts."""
    triples = {_key(item)[:3] for item in received} | {key[:3] for key in refused}

    def read(connection: sqlite3.Connection) -> tuple[dict[tuple[str, str], MeasuredLaneRow], list[int]]:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(sync_mutations)")}
        if not columns:
            return {}, []
        project = "COALESCE(project, '')" if "project" in columns else "''"
        source = "WHERE source = 'local'" if "source" in columns else ""
        rows: dict[tuple[str, str], MeasuredLaneRow] = {}
        candidates: list[int] = []
        cursor = connection.execute(
            f"SELECT seq, target_key, {project}, entity, entity_key, op, acked_at IS NOT NULL "
            f"FROM sync_mutations {source} ORDER BY seq"
        )
        for seq, lane, proj, entity, entity_key, op, acked in cursor:
            row = rows.get((lane, proj))
            if row is None:
                row = rows[(lane, proj)] = MeasuredLaneRow(str(lane), str(proj))
            row.enqueued += 1
            row.acked += int(acked)
            if (entity, entity_key, op) in triples:
                candidates.append(int(seq))
            elif seq in acked_before:
                row.acked_before_run += 1
            elif acked:
                row.lost += 1
            else:
                row.stranded += 1
        return rows, candidates

    no_rows: dict[tuple[str, str], MeasuredLaneRow] = {}
    no_seqs: list[int] = []
    rows, seqs = read_for_lanes(db, read, (no_rows, no_seqs))
    no_local: list[LocalMutation] = []
    local = read_for_lanes(db, lambda connection: _candidates(connection, seqs), no_local)
    matched = compute_lanes(local, received, frozenset(m.seq for m in local if m.seq in acked_before))
    for measured in matched.rows:
        row = rows[(measured.lane, measured.project)]
        for name in _MERGED:
            setattr(row, name, getattr(row, name) + getattr(measured, name))
    ordered = sorted(rows.values(), key=lambda r: (r.lane, r.project))
    table = LaneTable(
        rows=ordered,
        unmatched_received=matched.unmatched_received,
        lost_rows=matched.lost_rows,
        unmatched=matched.unmatched,
    )
    return table, local


def _candidates(connection: sqlite3.Connection, seqs: Sequence[int]) -> list[LocalMutation]:
    columns = {row[1] for row in connection.execute("PRAGMA table_info(sync_mutations)")}
    project = "COALESCE(project, '')" if "project" in columns else "''"
    found: list[LocalMutation] = []
    for start in range(0, len(seqs), _CHUNK):
        chunk = seqs[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        cursor = connection.execute(
            f"SELECT seq, target_key, {project}, entity, entity_key, op, payload, acked_at IS NOT NULL "
            f"FROM sync_mutations WHERE seq IN ({marks}) ORDER BY seq",
            chunk,
        )
        found.extend(local_mutation(row) for row in cursor)
    return found
