"""`engram-canary repair`: corrected copies of pending rows the cloud refuses, where engram knows the answer.

A pending legacy-lane row that the cloud refuses (a session upsert without a directory, an observation
without content or type, an empty project) blocks every later row of the lane. When the missing value is
recorded in engram's own tables (the sessions row, the observation row, the prompt row), repair appends
a corrected copy and acks the original: the append-only rule of claim, with its pre-flight, backup, one
short transaction and dry run. A value that cannot be derived is never guessed: the row is named with
the `inbox drop` command that clears it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.inbox.selection import InboxRow
from engram_sync_kit.canary.lanes import Deriver, Fix, derive_fix, entry_refusal, pending_listed_rows
from engram_sync_kit.canary.triage.plan import Copy, Plan, RefusedRow
from engram_sync_kit.canary.triage.sync_bookkeeping import count_rows, seq_chunks


def drop_command(row: InboxRow) -> str:
    if not row.project.strip():
        return "engram-canary inbox drop --unattributed"
    return f"engram-canary inbox drop --seq {row.seq}"


def plan_repair(db: EngramDb) -> Plan:
    """Every pending listed row the cloud refuses: a corrected copy when derivable, else a named refusal."""
    enrolled = db.enrolled_projects()
    deriver = Deriver(db, enrolled)
    plan = Plan(
        operation="repair",
        enrolled=enrolled,
        high_water=count_rows(db.connection, "SELECT ifnull(MAX(seq), 0) FROM sync_mutations"),
    )
    for row in pending_listed_rows(db):
        refusal = entry_refusal(row.project, row, row.payload)
        if refusal is None:
            continue
        outcome = derive_fix(row, refusal, deriver)
        if isinstance(outcome, Fix):
            plan.copies.append(Copy(row, outcome.project, outcome.payload, repair=outcome.description))
            plan.acks.append(row)
        else:
            remedy = f"cannot be derived: {outcome}; drop it ({drop_command(row)})"
            plan.refused.append(RefusedRow(row, refusal, remedy))
    return plan


@dataclass(frozen=True)
class RepairPlanner:
    build: Callable[[EngramDb], Plan] = plan_repair

    def plan(self, db: EngramDb) -> Plan:
        return self.build(db)

    def revalidate(self, db: EngramDb, plan: Plan) -> Plan:
        """Holds while enrollment is unchanged and every repaired original is still unacked."""
        if db.enrolled_projects() != plan.enrolled:
            return self.plan(db)
        seqs: Sequence[int] = [row.seq for row in plan.acks]
        unacked = sum(
            count_rows(
                db.connection,
                f"SELECT COUNT(*) FROM sync_mutations WHERE acked_at IS NULL AND seq IN ({marks})",
                *chunk,
            )
            for chunk, marks in seq_chunks(seqs)
        )
        return plan if unacked == len(seqs) else self.plan(db)
