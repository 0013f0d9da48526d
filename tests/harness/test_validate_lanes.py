"""validate's streamed lane table (harness.validate_lanes) answers exactly what harness.lanes.compute_lanes
answers on every row held in memory.

The databases here simulate legacy data: a bare sync_mutations table with engram's columns, filled at
random (lanes, projects, acked before and during the run, byte-identical twins), and a random cloud
journal (delivered rows, duplicates, chunk exports of the current state, mutations no row enqueued).
"""

from __future__ import annotations

import json
import random
import sqlite3
import tracemalloc
from array import array
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.harness.lanes import compute_lanes, read_local_mutations
from engram_sync_kit.harness.validate.lanes import AckedSeqs, measure_lanes

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Item:
    entity: str
    entity_key: str
    op: str
    payload_digest: str
    payload: Any
    transport: str = "mutation"


def _database(path: Path, rng: random.Random) -> tuple[list[Item], list[tuple[str, str, str, str]]]:
    rows = []
    for seq in range(1, 400):
        entity = rng.choice(["session", "observation", "prompt"])
        key = f"k{rng.randrange(120)}"
        payload = {"id": key, "n": rng.randrange(3), "project": rng.choice(["a", "b", ""])}
        acked = rng.random() < 0.4
        rows.append(
            (
                seq,
                rng.choice(["cloud", "cloud:a", "local"]),
                payload["project"],
                entity,
                key,
                "upsert",
                json.dumps(payload),
                "2026-01-01" if acked else None,
            )
        )
    with closing(sqlite3.connect(path)) as connection:
        connection.execute(
            "CREATE TABLE sync_mutations (seq INTEGER PRIMARY KEY, target_key TEXT, project TEXT, entity TEXT, "
            "entity_key TEXT, op TEXT, payload TEXT, acked_at TEXT, source TEXT DEFAULT 'local')"
        )
        connection.execute(
            "CREATE TABLE sync_state (target_key TEXT PRIMARY KEY, lifecycle TEXT, last_error TEXT)"
        )
        connection.executemany("INSERT INTO sync_mutations VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'local')", rows)
        connection.commit()
    received: list[Item] = []
    for row in rng.sample(rows, 120):
        payload = json.loads(row[6])
        received += [Item(row[3], row[4], row[5], payload_digest(payload), payload)] * rng.choice([1, 1, 2])
    for _ in range(10):  # chunk exports: the entity's current state, a superset of the queued payload
        row = rng.choice(rows)
        payload = {**json.loads(row[6]), "extra": 1}
        received.append(Item(row[3], row[4], row[5], payload_digest(payload), payload, "chunk"))
    received += [Item("observation", "never", "upsert", "d", {})] * 3
    refused = [(row[3], row[4], row[5], payload_digest(json.loads(row[6]))) for row in rng.sample(rows, 15)]
    return received, refused


@pytest.mark.parametrize("seed", range(8))
def test_the_streamed_lane_table_equals_the_in_memory_one(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    db = tmp_path / "engram.db"
    received, refused = _database(db, rng)
    with closing(sqlite3.connect(db)) as connection:
        before = {
            int(r[0]) for r in connection.execute("SELECT seq FROM sync_mutations WHERE acked_at IS NOT NULL")
        }
        # the run acks some more rows (delivered or lost)
        connection.execute(
            "UPDATE sync_mutations SET acked_at = 'run' WHERE acked_at IS NULL AND seq % 7 = 0"
        )
        connection.commit()
    acked = AckedSeqs(array("q", sorted(before)))
    assert all(seq in acked for seq in before) and not any(
        seq in acked for seq in range(400) if seq not in before
    )
    expected = compute_lanes(read_local_mutations(db), received, frozenset(before))
    table, local = measure_lanes(db, received, refused, acked)
    assert [asdict(row) for row in table.rows] == [asdict(row) for row in expected.rows]
    assert table.unmatched_received == expected.unmatched_received
    everything = read_local_mutations(db)
    keys = set(refused)
    assert [m.seq for m in local if m.key in keys] == [m.seq for m in everything if m.key in keys]


def test_acked_seqs_read_from_a_database(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    _database(db, random.Random(1))
    with closing(sqlite3.connect(db)) as connection:
        before = {
            int(r[0]) for r in connection.execute("SELECT seq FROM sync_mutations WHERE acked_at IS NOT NULL")
        }
    acked = AckedSeqs.read(db)
    assert {seq for seq in range(0, 500) if seq in acked} == before
    assert -1 not in acked and "3" not in acked


def test_a_home_with_history_loses_nothing_when_its_acked_row_is_re_enqueued(tmp_path: Path) -> None:
    # issue 33: seq 1 was acked before the run, seq 2 is its byte-identical re-enqueue (engram v1.20's
    # session row on each `engram mcp` save), pushed and received once in the run
    db = tmp_path / "engram.db"
    session = {"id": "s-1", "project": "app", "directory": "/w"}
    with closing(sqlite3.connect(db)) as connection:
        connection.execute(
            "CREATE TABLE sync_mutations (seq INTEGER PRIMARY KEY, target_key TEXT, project TEXT, entity TEXT, "
            "entity_key TEXT, op TEXT, payload TEXT, acked_at TEXT, source TEXT DEFAULT 'local')"
        )
        connection.execute(
            "CREATE TABLE sync_state (target_key TEXT PRIMARY KEY, lifecycle TEXT, last_error TEXT)"
        )
        connection.execute(
            "INSERT INTO sync_mutations VALUES (1, 'cloud', 'app', 'session', 's-1', 'upsert', ?, "
            "'2026-01-01 00:00:00', 'local')",
            [json.dumps(session)],
        )
        connection.commit()
        acked_before = AckedSeqs.read(db)
        connection.execute(
            "INSERT INTO sync_mutations VALUES (2, 'cloud', 'app', 'session', 's-1', 'upsert', ?, "
            "'2026-01-02 00:00:00', 'local')",
            [json.dumps(session)],
        )
        connection.commit()
    copy = Item("session", "s-1", "upsert", payload_digest(session), session)
    table, _ = measure_lanes(db, [copy], [], acked_before)
    (only,) = table.rows
    assert (only.enqueued, only.acked_before_run, only.delivered, only.lost) == (2, 1, 1, 0)
    assert table.lost_rows == []


@pytest.mark.parametrize("largest", [2**32, 2**40, 2**63 - 1], ids=["2^32", "2^40", "2^63-1"])
def test_acked_seqs_cost_memory_by_rows_not_by_the_largest_seq(tmp_path: Path, largest: int) -> None:
    """A bitmap sized by the largest seq took 1.1 GB at 2^32 and raised MemoryError at 2^63-1 (issue 35,
    item 7). SIMULATION OF LEGACY DATA: a hand-made journal with three acked rows, the last at LARGEST."""
    db = tmp_path / "engram.db"
    _database(db, random.Random(2))
    with closing(sqlite3.connect(db)) as connection:
        connection.executemany(
            "INSERT INTO sync_mutations VALUES (?, 'cloud', 'a', 'session', 'k', 'upsert', '{}', ?, 'local')",
            [(largest - 1, None), (largest, "2026-01-01")],
        )
        connection.commit()
        before = {
            int(r[0]) for r in connection.execute("SELECT seq FROM sync_mutations WHERE acked_at IS NOT NULL")
        }
    tracemalloc.start()
    try:
        acked = AckedSeqs.read(db)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    assert largest in acked and largest - 1 not in acked and largest + 1 not in acked
    assert {seq for seq in [*range(0, 500), largest - 1, largest] if seq in acked} == before
