"""The one ledger rule (engram_contract.ledger) against a brute-force reference, through its callers.

Journals are generated with byte-identical rows, acks before and during the run, rows the kit's triage
acked on purpose, copies the cloud dropped (acked, never stored), stored twice, or stored while the ack is
still to come, and copies no row enqueued. The reference tries every assignment of copies to rows.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_sync_kit.canary.cloud_client import CloudMutation
from engram_sync_kit.canary.reconcile import Journal, LocalRow, Matcher
from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.engram_contract.ledger import Ledger, Need, need_of
from engram_sync_kit.harness.lanes import LocalMutation, compute_lanes

pytestmark = pytest.mark.unit

LANES = ("cloud", "cloud:app")
COUNTED = ("delivered", "stranded", "lost", "acked_before_run", "triaged", "duplicated")


@dataclass(frozen=True)
class Copy:
    entity: str
    entity_key: str
    op: str
    payload_digest: str
    payload: Any = None
    transport: str = "mutation"


def _payload(variant: int) -> dict[str, Any]:
    # three entity keys, two payloads each: twins share (entity, key, op, digest)
    return {"id": f"s{variant // 2}", "n": variant % 2, "project": "app"}


def _mutation(seq: int, variant: int, lane: str, acked: bool) -> LocalMutation:
    body = _payload(variant)
    return LocalMutation(seq, lane, "app", "session", body["id"], "upsert", payload_digest(body), acked, body)


def _copy(variant: int) -> Copy:
    body = _payload(variant)
    return Copy("session", body["id"], "upsert", payload_digest(body), body)


def test_a_copy_goes_to_the_highest_need_then_the_lowest_seq() -> None:
    ranks = {"before": (Need.SETTLED, 1), "pending": (Need.PENDING, 2), "owed": (Need.OWED, 3)}
    ledger: Ledger[str, str] = Ledger(ranks.__getitem__)
    for name in ("before", "pending", "owed"):
        ledger.add("k", name)
    assert len(ledger) == 3 and ledger.remaining() == ["owed", "pending", "before"]
    assert [ledger.take("k"), ledger.take("k"), ledger.take("k"), ledger.take("k")] == [
        "owed",
        "pending",
        "before",
        None,
    ]
    assert len(ledger) == 0 and not ledger.waits_for("k") and ledger.take("other") is None
    assert need_of(acked=True, settled=True) is Need.SETTLED
    assert (need_of(acked=True, settled=False), need_of(acked=False, settled=False)) == (
        Need.OWED,
        Need.PENDING,
    )


def test_the_second_door_gives_each_copy_once_in_rank_order() -> None:
    ledger: Ledger[str, int] = Ledger(lambda seq: (Need.OWED if seq > 1 else Need.SETTLED, seq))
    for seq in (1, 2, 3):
        ledger.add("k", seq)
    copies = ["fits", "no"]
    given = ledger.take_fitting(lambda _: "k", copies, lambda _, copy: copy == "fits")
    assert given == [(2, "fits")] and copies == ["no"] and ledger.remaining() == [3, 1]
    assert ledger.take("k") == 3 and ledger.take("k") == 1


@dataclass(frozen=True)
class Generated:
    local: list[LocalMutation]
    received: list[Copy]
    acked_before: frozenset[int]
    triaged: frozenset[int]
    truly_lost: frozenset[int]  # acked in the run and never stored: the only real losses
    # per key, copies beyond the rows acked in the run: stored twice, or while the ack is still to come;
    # each may stand for a lost twin, which nothing can tell apart from it
    spare: Counter[tuple[str, str, str, str]]


FATES = ("acked_before", "stored", "dropped", "stored_twice", "stored_unacked", "waiting", "triaged")


@st.composite
def journals(draw: st.DrawFn) -> Generated:
    """A run of engram's worker on a home with sync history, as the lanes would see it."""
    count = draw(st.integers(0, 9))
    local, received = [], []
    acked_before, triaged, lost = set(), set(), set()
    spare: Counter[tuple[str, str, str, str]] = Counter()
    for seq in range(1, count + 1):
        variant = draw(st.integers(0, 5))
        fate = draw(st.sampled_from(FATES))
        acked = fate not in ("stored_unacked", "waiting")
        local.append(_mutation(seq, variant, draw(st.sampled_from(LANES)), acked))
        if fate == "acked_before":
            acked_before.add(seq)
        elif fate == "triaged":
            triaged.add(seq)
        elif fate == "dropped":
            lost.add(seq)
        copies = {"stored": 1, "stored_twice": 2, "stored_unacked": 1}.get(fate, 0)
        spare[local[-1].key] += fate in ("stored_twice", "stored_unacked")
        received += [_copy(variant)] * copies
    received += [_copy(variant) for variant in draw(st.lists(st.integers(6, 7), max_size=2))]  # strangers
    order = draw(st.permutations(range(len(received))))
    return Generated(
        local,
        [received[i] for i in order],
        frozenset(acked_before),
        frozenset(triaged),
        frozenset(lost),
        spare,
    )


@settings(max_examples=400, deadline=None)
@given(journals())
def test_no_generated_journal_shows_a_false_loss(journal: Generated) -> None:
    table = compute_lanes(journal.local, journal.received, journal.acked_before, journal.triaged)
    by_seq = {m.seq: m for m in journal.local}
    named = Counter(m.key for m in table.lost_rows)
    truly = Counter(by_seq[seq].key for seq in journal.truly_lost)
    # a lost row is named only where an identical row truly lost its copy (twins cannot be told apart),
    # and every true loss is named unless a spare identical copy stands for it
    assert all(named[key] <= truly[key] for key in named)
    assert named == Counter(
        {key: n - journal.spare[key] for key, n in truly.items() if n > journal.spare[key]}
    )
    assert table.lost <= len(journal.truly_lost)
    assert sum(r.enqueued for r in table.rows) == len(journal.local)


def _rank(mutation: LocalMutation, acked_before: frozenset[int], triaged: frozenset[int]) -> Need:
    settled = mutation.seq in acked_before or (mutation.acked and mutation.seq in triaged)
    return need_of(acked=mutation.acked, settled=settled)


def _brute_force(
    local: list[LocalMutation], received: list[Copy], acked_before: frozenset[int], triaged: frozenset[int]
) -> tuple[int, dict[tuple[str, str], dict[str, int]], frozenset[int]]:
    """Every assignment of copies to identical rows: the fewest lost rows any of them allows, and the lane
    counts of the assignment that serves needs first (acked in the run, unacked, settled), then low seqs."""
    copies = Counter((c.entity, c.entity_key, c.op, c.payload_digest) for c in received)
    needs = {m.seq: _rank(m, acked_before, triaged) for m in local}
    fewest_lost = len(local) + 1
    best: tuple[Any, ...] | None = None
    chosen: frozenset[int] = frozenset()
    for picks in itertools.product((False, True), repeat=len(local)):
        matched = [m for m, pick in zip(local, picks, strict=True) if pick]
        if any(n > copies[key] for key, n in Counter(m.key for m in matched).items()):
            continue
        seqs = frozenset(m.seq for m in matched)
        lost = sum(1 for m in local if m.seq not in seqs and needs[m.seq] is Need.OWED)
        fewest_lost = min(fewest_lost, lost)
        served = tuple(sum(1 for s in seqs if needs[s] is need) for need in Need)
        order = sorted(local, key=lambda m: (needs[m.seq], m.seq))
        preference = (served, tuple(m.seq in seqs for m in order))
        if best is None or preference > best:
            best, chosen = preference, seqs
    counts: dict[tuple[str, str], dict[str, int]] = {}
    taken = Counter(m.key for m in local if m.seq in chosen)
    owner = {m.key: (m.lane, m.project) for m in local}
    for m in local:
        lane = counts.setdefault((m.lane, m.project), dict.fromkeys(COUNTED, 0))
        if m.seq in chosen:
            lane["delivered"] += 1
        elif m.seq in acked_before:
            lane["acked_before_run"] += 1
        elif m.acked and m.seq in triaged:
            lane["triaged"] += 1
        else:
            lane["lost" if m.acked else "stranded"] += 1
    for key, n in copies.items():
        if key in owner:
            counts[owner[key]]["duplicated"] += n - taken[key]
    return fewest_lost, counts, chosen


rows = st.lists(
    st.tuples(
        st.integers(0, 3), st.sampled_from(LANES), st.booleans(), st.sampled_from(("", "before", "triaged"))
    ),
    max_size=8,
)


@settings(max_examples=400, deadline=None)
@given(rows, st.lists(st.integers(0, 4), max_size=8))
def test_the_ledger_equals_a_brute_force_assignment(
    drawn: list[tuple[int, str, bool, str]], copy_variants: list[int]
) -> None:
    """Any rows and copies, even ones engram would not make (a copy of a row acked before the run)."""
    local = [_mutation(seq, variant, lane, acked) for seq, (variant, lane, acked, _) in enumerate(drawn, 1)]
    acked_before = frozenset(seq for seq, row in enumerate(drawn, 1) if row[3] == "before")
    triaged = frozenset(seq for seq, row in enumerate(drawn, 1) if row[3] == "triaged")
    received = [_copy(variant) for variant in copy_variants]
    table = compute_lanes(local, received, acked_before, triaged)
    fewest_lost, counts, _ = _brute_force(local, received, acked_before, triaged)
    assert table.lost == fewest_lost
    assert {(r.lane, r.project): {name: getattr(r, name) for name in COUNTED} for r in table.rows} == counts
    keys = {m.key for m in local}
    assert table.unmatched_received == sum(
        1 for c in received if (c.entity, c.entity_key, c.op, c.payload_digest) not in keys
    )


@settings(max_examples=300, deadline=None)
@given(journals())
def test_reconcile_names_the_rows_the_lanes_call_lost(journal: Generated) -> None:
    """I1-reconcile holds by construction: both read the same ledger, so they name the same rows."""
    in_run = [m for m in journal.local if m.seq not in journal.acked_before and m.seq not in journal.triaged]
    table = compute_lanes(in_run, journal.received)
    acked = [
        LocalRow(m.seq, m.lane, m.project, (m.entity, m.entity_key, m.op, bytes.fromhex(m.digest)), "t")
        for m in in_run
        if m.acked
    ]
    matcher = Matcher(Journal(acked, {}, {m.entity_key for m in in_run}, frozenset({"app"})))
    for number, copy in enumerate(journal.received, 1):
        matcher.pulled(CloudMutation(number, "app", copy.entity, copy.entity_key, copy.op, copy.payload, ""))
    missing = matcher.settle({m.seq: m.payload for m in in_run})
    assert [row.seq for row in missing] == [m.seq for m in table.lost_rows]
