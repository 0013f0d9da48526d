"""The per-lane delivery table: what engram enqueued on each local lane, and what the cloud received.

A lane is a sync_mutations.target_key; rows are counted per (lane, project column). A local row is
*delivered* when the cloud stored a mutation with the same entity, entity_key, op and payload digest,
matched by engram_contract.ledger: identical rows (a byte-identical re-enqueue) each need their own
received copy, and a row acked before the run takes none that a row of the run waits for; copies
received beyond the local rows that match them are *duplicated*.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from engram_sync_kit.canary.triage_log import logged_acks
from engram_sync_kit.engram_contract import LANE_COUNTS, carries_fields, decoded_payload, payload_digest
from engram_sync_kit.engram_contract.ledger import Ledger, need_of
from engram_sync_kit.harness.engram.read import EngramReadError, read_engram, read_with
from engram_sync_kit.harness.errors import HarnessError

MatchKey = tuple[str, str, str, str]
T = TypeVar("T")


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
    payload: Any = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> MatchKey:
        return (self.entity, self.entity_key, self.op, self.digest)


class JournalledMutation(Protocol):
    """What the fake cloud records of one mutation, in its store or its journal: how lanes match it."""

    @property
    def entity(self) -> str | None: ...
    @property
    def entity_key(self) -> str | None: ...
    @property
    def op(self) -> str | None: ...
    @property
    def payload_digest(self) -> str | None: ...


class Received(JournalledMutation, Protocol):
    @property
    def payload(self) -> Any: ...
    @property
    def transport(self) -> Any: ...


@dataclass
class MeasuredLaneRow:
    """What the run measured for one lane and project; a scenario states its
    expectation of such a row as harness.schema.LaneRow."""

    lane: str
    project: str
    enqueued: int = 0
    acked: int = 0
    delivered: int = 0
    stranded: int = 0
    lost: int = 0
    duplicated: int = 0
    delivered_as_current_state: int = 0
    acked_before_run: int = 0
    triaged: int = 0  # acked by the kit's own triage --apply (its log says so): never meant for the cloud

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in LANE_COUNTS}


@dataclass
class LaneTable:
    rows: list[MeasuredLaneRow] = field(default_factory=list)
    unmatched_received: int = 0
    lost_rows: list[LocalMutation] = field(default_factory=list)
    unmatched: list[MatchKey] = field(default_factory=list)

    def row(self, lane: str, project: str) -> MeasuredLaneRow | None:
        return next((r for r in self.rows if r.lane == lane and r.project == project), None)

    @property
    def lost(self) -> int:
        return sum(row.lost for row in self.rows)

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(row) for row in self.rows]


class LaneReadError(HarnessError):
    """The lane table's inputs cannot be read: an empty table would pass "nothing lost" unchecked."""


def read_for_lanes(db_path: Path, read: Callable[[sqlite3.Connection], T], empty: T) -> T:
    """READ on a read-only connection; EMPTY only when engram never created the database."""
    if not db_path.exists():
        return empty
    try:
        return read_engram(db_path, read)
    except EngramReadError as error:
        raise LaneReadError(f"cannot count the lanes: {error}") from error


def read_local_mutations(db_path: Path) -> list[LocalMutation]:
    """Every locally enqueued sync_mutations row, read-only."""
    return read_for_lanes(db_path, _local_mutations, [])


def _local_mutations(connection: sqlite3.Connection) -> list[LocalMutation]:
    columns = {row[1] for row in connection.execute("PRAGMA table_info(sync_mutations)")}
    if not columns:
        return []
    project = "COALESCE(project, '')" if "project" in columns else "''"
    source = "WHERE source = 'local'" if "source" in columns else ""
    cursor = connection.execute(
        f"SELECT seq, target_key, {project}, entity, entity_key, op, payload, acked_at IS NOT NULL "
        f"FROM sync_mutations {source} ORDER BY seq"
    )
    return [local_mutation(row) for row in cursor]


def local_mutation(row: Sequence[Any]) -> LocalMutation:
    """One row of `seq, target_key, project, entity, entity_key, op, payload, acked` as a LocalMutation."""
    seq, lane, proj, entity, entity_key, op, payload, acked = row
    decoded = decoded_payload(payload)
    return LocalMutation(
        seq=int(seq),
        lane=str(lane),
        project=str(proj),
        entity=str(entity),
        entity_key=str(entity_key),
        op=str(op),
        digest=payload_digest(decoded),
        acked=bool(acked),
        payload=decoded,
    )


def _transport(item: Received) -> str:
    value = item.transport
    return str(getattr(value, "value", value))


def read_acked_seqs(db_path: Path) -> frozenset[int]:
    """Rows already acked when a run starts (a copied database): delivered to some earlier cloud, not lost."""
    sql = "SELECT seq FROM sync_mutations WHERE acked_at IS NOT NULL"
    return read_for_lanes(
        db_path, lambda connection: frozenset(int(row[0]) for row in connection.execute(sql)), frozenset()
    )


def triaged_seqs(db_path: Path) -> frozenset[int]:
    """The rows the kit's triage --apply acked on purpose (discarded, or replaced by a copy), from the
    triage log next to the database: acked and never sent, yet not lost."""
    return frozenset(logged_acks(db_path))


def compute_lanes(
    local: Sequence[LocalMutation],
    received: Iterable[Received],
    acked_before: frozenset[int] = frozenset(),
    triaged: frozenset[int] = frozenset(),
) -> LaneTable:
    """Count each local row by what the cloud received, matched by engram_contract.ledger's one rule: a
    row acked before the run or by triage never takes a copy an identical row of the run waits for."""

    def rank(mutation: LocalMutation) -> tuple[int, int]:
        settled = mutation.seq in acked_before or (mutation.acked and mutation.seq in triaged)
        return need_of(acked=mutation.acked, settled=settled), mutation.seq

    rows: dict[tuple[str, str], MeasuredLaneRow] = {}
    owners: dict[MatchKey, MeasuredLaneRow] = {}
    ledger: Ledger[MatchKey, LocalMutation] = Ledger(rank)
    for mutation in sorted(local, key=lambda m: m.seq):
        row = rows.setdefault(
            (mutation.lane, mutation.project), MeasuredLaneRow(mutation.lane, mutation.project)
        )
        row.enqueued += 1
        row.acked += int(mutation.acked)
        owners[mutation.key] = row
        ledger.add(mutation.key, mutation)
    surplus: list[tuple[MatchKey, Received]] = []
    for item in received:
        key = (str(item.entity), str(item.entity_key), str(item.op), str(item.payload_digest))
        taken = ledger.take(key)
        if taken is None:
            surplus.append((key, item))
        else:
            rows[(taken.lane, taken.project)].delivered += 1
    # The chunk path (engram sync --cloud) exports the entity's current row, not the queued payload.
    chunk_items = [(key, item) for key, item in surplus if _transport(item) == "chunk"]
    given = ledger.take_fitting(
        lambda mutation: mutation.key,
        chunk_items,
        lambda mutation, copy: copy[0][:3] == mutation.key[:3]
        and carries_fields(copy[1].payload, mutation.payload),
    )
    for mutation, _ in given:
        row = rows[(mutation.lane, mutation.project)]
        row.delivered += 1
        row.delivered_as_current_state += 1
    taken_copies = {id(copy[1]) for _, copy in given}
    lost_rows: list[LocalMutation] = []
    for mutation in sorted(ledger.remaining(), key=lambda m: m.seq):
        row = rows[(mutation.lane, mutation.project)]
        if mutation.seq in acked_before:
            row.acked_before_run += 1
        elif mutation.acked and mutation.seq in triaged:
            row.triaged += 1
        elif mutation.acked:
            row.lost += 1
            lost_rows.append(mutation)
        else:
            row.stranded += 1
    strangers: dict[MatchKey, int] = {}  # in the order the cloud first received each
    for key, item in surplus:
        if id(item) in taken_copies:
            continue
        if key in owners:
            owners[key].duplicated += 1
        else:
            strangers[key] = strangers.get(key, 0) + 1
    unmatched = [key for key, count in strangers.items() for _ in range(count)]
    ordered = sorted(rows.values(), key=lambda r: (r.lane, r.project))
    return LaneTable(
        rows=ordered, unmatched_received=len(unmatched), lost_rows=lost_rows, unmatched=unmatched
    )


def read_sync_state_targets(db_path: Path) -> list[str]:
    sql = "SELECT target_key FROM sync_state"
    return read_with(db_path, lambda connection: sorted(str(row[0]) for row in connection.execute(sql)), [])
