"""The journal in engram's order: seqs follow time (with the measured permanent gaps), acks and
sync_state follow v1.20's rules (refreshProjectSyncStateTx)."""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from engram_sync_kit.canary.targets import project_target
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.harness.deployment.history import History
from engram_sync_kit.harness.deployment.records import stamp

FORBIDDEN_MESSAGE = "push mutations: http 403: forbidden: project is not allowed"


# One sync_mutations row, in MUTATION_COLUMNS order. A plain tuple typed position by position: a
# million are built, and a named tuple costs several percent of a deployment's time.
MUTATION_COLUMNS = (
    "seq",
    "target_key",
    "entity",
    "entity_key",
    "op",
    "payload",
    "source",
    "occurred_at",
    "acked_at",
    "project",
)
MutationRow = tuple[int, str, str, str, str, str, str, str, str | None, str]
_TARGET, _ENTITY, _ACKED_AT = (MUTATION_COLUMNS.index(name) for name in ("target_key", "entity", "acked_at"))


class SyncStateRow(NamedTuple):
    """One sync_state row; the field names are the column names the fill inserts into."""

    target_key: str
    lifecycle: str
    last_enqueued_seq: int
    last_acked_seq: int
    last_pulled_seq: int = 0
    consecutive_failures: int = 0
    backoff_until: str | None = None
    lease_owner: str | None = None
    lease_until: str | None = None
    last_error: str | None = None
    updated_at: str | None = None
    reason_code: str | None = None
    reason_message: str | None = None


@dataclass(frozen=True)
class SequencedRows:
    mutations: list[MutationRow]
    states: list[SyncStateRow]

    @property
    def max_seq(self) -> int:
        return self.mutations[-1][0] if self.mutations else 0

    @property
    def stuck(self) -> list[MutationRow]:
        """Rows of the legacy lane never acked."""
        return [row for row in self.mutations if row[_ACKED_AT] is None and row[_TARGET] == LEGACY_TARGET]

    def count_stuck(self, entities: frozenset[str]) -> int:
        return sum(1 for row in self.stuck if row[_ENTITY] in entities)

    @property
    def per_project_rows(self) -> int:
        """Rows on a cloud:<project> lane."""
        return sum(1 for row in self.mutations if row[_TARGET] != LEGACY_TARGET)


@dataclass(slots=True)
class _LaneCursor:
    max_seq: int = 0
    max_acked: int = 0
    pending: int = 0
    last: int = 0


def sequence(history: History) -> SequencedRows:
    """Seqs follow time, with the measured permanent gaps; acks and sync_state follow engram's rules."""
    spec = history.spec
    # By time, then creation order: a stable sort on the time alone keeps creation order for ties.
    events = sorted(history.journal.events, key=itemgetter(0))
    total = len(events)
    gaps = set(history.rng.sample(range(1, total), min(spec.seq_gaps, max(0, total - 1))))
    rows: list[MutationRow] = []
    seq = 0
    legacy_enqueued = legacy_acked = 0
    per_project: dict[str, _LaneCursor] = {}
    random_number = history.rng.random
    for index, (when, _order, target, entity, key, op, payload, project, acked) in enumerate(events):
        seq += 2 if index in gaps else 1
        acked_at = stamp(min(history.end, when + 2 + int(random_number() * 39))) if acked else None
        rows.append((seq, target, entity, key, op, payload, "local", stamp(when), acked_at, project))
        if target != LEGACY_TARGET:
            continue
        legacy_enqueued = seq
        if acked:
            legacy_acked = seq
        cursor = per_project.get(project)
        if cursor is None:
            cursor = per_project[project] = _LaneCursor()
        cursor.max_seq = seq
        cursor.last = when
        if acked:
            cursor.max_acked = seq
        else:
            cursor.pending += 1

    states: list[SyncStateRow] = [
        SyncStateRow(LEGACY_TARGET, "pending", legacy_enqueued, legacy_acked, updated_at=stamp(history.end))
    ]
    for project in [*history.enrolled, *(plan.key for plan in history.plans)]:
        cursor = per_project[project]
        states.append(
            SyncStateRow(
                project_target(project),
                "pending" if cursor.pending else "healthy",
                cursor.max_seq,
                cursor.max_acked,
                updated_at=stamp(cursor.last),
            )
        )
    forbidden = per_project[history.forbidden_key]
    states.append(
        SyncStateRow(
            project_target(history.forbidden_key),
            "degraded",
            forbidden.max_seq,
            forbidden.max_acked,
            last_error=FORBIDDEN_MESSAGE,
            updated_at=stamp(history.forbidden_at),
            reason_code="policy_forbidden",
            reason_message=FORBIDDEN_MESSAGE,
        )
    )
    return SequencedRows(mutations=rows, states=states)
