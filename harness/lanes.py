"""The per-lane delivery table: what engram enqueued on each local lane, and what the cloud received.

A lane is a sync_mutations.target_key; rows are counted per (lane, project column). A local row is
*delivered* when the cloud stored a mutation with the same entity, entity_key, op and payload digest.
Identical rows (a byte-identical re-enqueue) each need their own received copy; copies received beyond
the local rows that match them are *duplicated*.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from canary.db import open_read_only

MatchKey = tuple[str, str, str, str]


def payload_digest(payload: Any) -> str:
    """The fake cloud's digest: sha256 of the canonical JSON of the payload object."""
    if isinstance(payload, str):
        with contextlib.suppress(json.JSONDecodeError):
            payload = json.loads(payload)
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LocalMutation:
    seq: int
    lane: str
    project: str
    entity: str
    entity_key: str
    op: str
    digest: str
    acked: bool

    @property
    def key(self) -> MatchKey:
        return (self.entity, self.entity_key, self.op, self.digest)


class Received(Protocol):
    @property
    def entity(self) -> str | None: ...
    @property
    def entity_key(self) -> str | None: ...
    @property
    def op(self) -> str | None: ...
    @property
    def payload_digest(self) -> str | None: ...


@dataclass
class LaneRow:
    lane: str
    project: str
    enqueued: int = 0
    acked: int = 0
    delivered: int = 0
    stranded: int = 0
    lost: int = 0
    duplicated: int = 0

    def counts(self) -> dict[str, int]:
        data = asdict(self)
        data.pop("lane")
        data.pop("project")
        return data


@dataclass
class LaneTable:
    rows: list[LaneRow] = field(default_factory=list)
    unmatched_received: int = 0

    def row(self, lane: str, project: str) -> LaneRow | None:
        return next((r for r in self.rows if r.lane == lane and r.project == project), None)

    @property
    def lost(self) -> int:
        return sum(row.lost for row in self.rows)

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(row) for row in self.rows]


def read_local_mutations(db_path: Path) -> list[LocalMutation]:
    """Every locally enqueued sync_mutations row, read-only."""
    connection = open_read_only(db_path)
    try:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(sync_mutations)")}
        if not columns:
            return []
        project = "COALESCE(project, '')" if "project" in columns else "''"
        source = "WHERE source = 'local'" if "source" in columns else ""
        cursor = connection.execute(
            f"SELECT seq, target_key, {project}, entity, entity_key, op, payload, acked_at IS NOT NULL "
            f"FROM sync_mutations {source} ORDER BY seq"
        )
        return [
            LocalMutation(
                seq=int(seq),
                lane=str(lane),
                project=str(proj),
                entity=str(entity),
                entity_key=str(entity_key),
                op=str(op),
                digest=payload_digest(payload),
                acked=bool(acked),
            )
            for seq, lane, proj, entity, entity_key, op, payload, acked in cursor
        ]
    except sqlite3.Error:
        return []
    finally:
        connection.close()


def compute_lanes(local: Sequence[LocalMutation], received: Iterable[Received]) -> LaneTable:
    available: Counter[MatchKey] = Counter(
        (str(r.entity), str(r.entity_key), str(r.op), str(r.payload_digest)) for r in received
    )
    rows: dict[tuple[str, str], LaneRow] = {}
    last_owner: dict[MatchKey, LaneRow] = {}
    by_key: defaultdict[MatchKey, int] = defaultdict(int)
    for mutation in sorted(local, key=lambda m: m.seq):
        row = rows.setdefault((mutation.lane, mutation.project), LaneRow(mutation.lane, mutation.project))
        row.enqueued += 1
        row.acked += int(mutation.acked)
        by_key[mutation.key] += 1
        last_owner[mutation.key] = row
        if available[mutation.key] > 0:
            available[mutation.key] -= 1
            row.delivered += 1
        elif mutation.acked:
            row.lost += 1
        else:
            row.stranded += 1
    unmatched = 0
    for key, extra in available.items():
        if extra <= 0:
            continue
        if key in last_owner:
            last_owner[key].duplicated += extra
        else:
            unmatched += extra
    ordered = sorted(rows.values(), key=lambda r: (r.lane, r.project))
    return LaneTable(rows=ordered, unmatched_received=unmatched)


def read_sync_state_targets(db_path: Path) -> list[str]:
    connection = open_read_only(db_path)
    try:
        return sorted(str(row[0]) for row in connection.execute("SELECT target_key FROM sync_state"))
    except sqlite3.Error:
        return []
    finally:
        connection.close()
