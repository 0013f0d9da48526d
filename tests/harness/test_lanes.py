"""The per-lane delivery table, computed from local rows and what the cloud stored."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.fake_cloud.models import payload_digest as cloud_digest
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.lanes import LocalMutation, compute_lanes, read_acked_seqs, read_local_mutations

PAYLOAD = {"sync_id": "obs-1", "title": "t", "content": "ü", "project": "app"}


@dataclass
class Got:
    entity: str
    entity_key: str
    op: str
    payload: dict[str, Any]
    transport: str = "mutation"

    @property
    def payload_digest(self) -> str:
        return cloud_digest(self.payload)


def row(seq: int, *, lane: str = "cloud", project: str = "app", key: str = "obs-1", acked: bool = True,
        payload: dict[str, Any] | None = None) -> LocalMutation:  # fmt: skip
    body = payload if payload is not None else PAYLOAD
    return LocalMutation(seq, lane, project, "observation", key, "upsert", payload_digest(body), acked, body)


# sha256 of the sorted, compact, UTF-8 JSON text, worked out by hand (not by the function under test).
PAYLOAD_DIGEST = hashlib.sha256(
    '{"content":"ü","project":"app","sync_id":"obs-1","title":"t"}'.encode()
).hexdigest()


def test_the_digest_is_sha256_of_sorted_compact_json_for_objects_and_json_strings() -> None:
    assert PAYLOAD_DIGEST == "bf23494fa273b2706fcdb3f9b5bde45817a3eb19a055d31d187b9b82a03530cf"
    assert payload_digest(PAYLOAD) == PAYLOAD_DIGEST
    assert (
        payload_digest('{"title": "t", "sync_id": "obs-1", "content": "ü", "project": "app"}')
        == PAYLOAD_DIGEST
    )
    assert cloud_digest(PAYLOAD) == PAYLOAD_DIGEST  # the fake cloud stores the same digest
    assert payload_digest({**PAYLOAD, "title": "T"}) != PAYLOAD_DIGEST


def test_an_unreadable_database_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    garbage = tmp_path / "engram.db"
    garbage.write_bytes(b"this is not an SQLite database" * 100)
    with pytest.raises(HarnessError, match="engram.db"):
        read_local_mutations(garbage)
    with pytest.raises(HarnessError, match="engram.db"):
        read_acked_seqs(garbage)
    no_journal = tmp_path / "no-journal.db"
    sqlite3.connect(no_journal).execute("CREATE TABLE sync_mutations (seq INTEGER)").connection.close()
    with pytest.raises(HarnessError, match="no-journal.db"):
        read_local_mutations(no_journal)


def test_a_database_engram_never_created_has_no_local_rows(tmp_path: Path) -> None:
    assert read_local_mutations(tmp_path / "absent.db") == []
    assert read_acked_seqs(tmp_path / "absent.db") == frozenset()


def test_delivered_stranded_and_lost_are_told_apart() -> None:
    local = [row(1), row(2, key="obs-2", acked=False), row(3, key="obs-3", acked=True)]
    table = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)])
    (only,) = table.rows
    assert only.counts() == {
        "enqueued": 3,
        "acked": 2,
        "delivered": 1,
        "stranded": 1,
        "lost": 1,
        "duplicated": 0,
    }
    assert [m.seq for m in table.lost_rows] == [3]
    assert table.lost == 1


def test_a_byte_identical_reenqueue_needs_its_own_received_copy() -> None:
    local = [row(1), row(2)]
    once = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)])
    assert once.rows[0].delivered == 1 and once.rows[0].lost == 1
    twice = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)] * 2)
    assert twice.rows[0].delivered == 2 and twice.rows[0].lost == 0


def test_copies_beyond_the_local_rows_are_duplicated_and_strangers_unmatched() -> None:
    received = [Got("observation", "obs-1", "upsert", PAYLOAD)] * 3 + [
        Got("session", "s", "upsert", {"id": "s"})
    ]
    table = compute_lanes([row(1)], received)
    assert table.rows[0].duplicated == 2
    assert table.unmatched_received == 1


def test_rows_are_grouped_by_lane_and_project_column() -> None:
    local = [row(1, lane="cloud:app", acked=False), row(2, project="other", acked=False), row(3)]
    table = compute_lanes(local, [])
    assert [(r.lane, r.project, r.enqueued) for r in table.rows] == [
        ("cloud", "app", 1),
        ("cloud", "other", 1),
        ("cloud:app", "app", 1),
    ]


def test_a_chunk_carrying_the_current_state_counts_as_delivered() -> None:
    queued = {"sync_id": "obs-1", "title": "t"}
    current = {"sync_id": "obs-1", "title": "t", "project": "app"}
    table = compute_lanes([row(1, payload=queued)], [Got("observation", "obs-1", "upsert", current, "chunk")])
    assert table.rows[0].delivered == 1 and table.rows[0].delivered_as_current_state == 1
    assert table.unmatched_received == 0
    # over the mutation protocol the exact payload is required
    table = compute_lanes([row(1, payload=queued)], [Got("observation", "obs-1", "upsert", current)])
    assert table.rows[0].lost == 1 and table.unmatched_received == 1


def test_a_chunk_whose_current_state_changed_a_field_of_the_row_does_not_deliver_it() -> None:
    queued = {"sync_id": "obs-1", "title": "t"}
    changed = {"sync_id": "obs-1", "title": "t2", "project": "app"}
    table = compute_lanes([row(1, payload=queued)], [Got("observation", "obs-1", "upsert", changed, "chunk")])
    assert (table.rows[0].delivered, table.rows[0].lost, table.unmatched_received) == (0, 1, 1)


def test_one_chunk_item_delivers_one_row() -> None:
    queued = {"sync_id": "obs-1", "title": "t"}
    rows = [row(1, payload=queued), row(2, payload=queued)]
    table = compute_lanes(
        rows, [Got("observation", "obs-1", "upsert", {**queued, "project": "app"}, "chunk")]
    )
    assert (table.rows[0].delivered_as_current_state, table.rows[0].lost) == (1, 1)


def test_a_row_acked_before_the_run_leaves_the_one_copy_to_its_identical_reenqueue() -> None:
    # engram v1.20 re-queues the same session row on every `engram mcp` save: on a home with sync history
    # the older twin was acked before the run, the new one is pushed and received once in the run (issue 33)
    table = compute_lanes([row(1), row(2)], [Got("observation", "obs-1", "upsert", PAYLOAD)], frozenset({1}))
    (only,) = table.rows
    assert (only.acked_before_run, only.delivered, only.lost, only.duplicated) == (1, 1, 0, 0)
    assert table.lost_rows == [] and table.lost == 0


def test_an_unacked_twin_never_takes_the_copy_an_acked_twin_needs() -> None:
    local = [row(1, acked=False, lane="cloud:other"), row(2)]
    table = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)])
    assert table.lost == 0 and table.lost_rows == []
    assert [(r.lane, r.delivered, r.stranded) for r in table.rows] == [("cloud", 1, 0), ("cloud:other", 0, 1)]


def test_a_row_acked_before_the_run_takes_a_copy_only_no_twin_waits_for() -> None:
    local = [row(1), row(2), row(3, acked=False)]
    table = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)] * 3, frozenset({1}))
    (only,) = table.rows
    assert (only.acked_before_run, only.delivered, only.lost, only.stranded) == (0, 3, 0, 0)
    table = compute_lanes(local, [Got("observation", "obs-1", "upsert", PAYLOAD)] * 2, frozenset({1}))
    (only,) = table.rows
    assert (only.acked_before_run, only.delivered, only.lost, only.stranded) == (1, 2, 0, 0)


def test_a_chunk_copy_goes_to_the_row_of_the_run_not_its_twin_acked_before() -> None:
    queued = {"sync_id": "obs-1", "title": "t"}
    rows = [row(1, payload=queued), row(2, payload=queued)]
    table = compute_lanes(
        rows, [Got("observation", "obs-1", "upsert", {**queued, "project": "app"}, "chunk")], frozenset({1})
    )
    (only,) = table.rows
    assert (only.acked_before_run, only.delivered_as_current_state, only.lost) == (1, 1, 0)


def test_rows_acked_before_a_run_on_a_copied_database_are_not_lost() -> None:
    table = compute_lanes([row(1), row(2, key="obs-2")], [], acked_before=frozenset({1}))
    (only,) = table.rows
    assert only.acked_before_run == 1 and only.lost == 1 and [m.seq for m in table.lost_rows] == [2]


def test_rows_the_triage_acked_on_purpose_are_triaged_not_lost() -> None:
    local = [row(1, key="obs-1"), row(2, key="obs-2"), row(3, key="obs-3", acked=False)]
    table = compute_lanes(local, [], triaged=frozenset({1, 3}))
    (only,) = table.rows
    assert (only.triaged, only.lost, only.stranded) == (1, 1, 1)  # an unacked row is never triaged
    assert [m.seq for m in table.lost_rows] == [2]
