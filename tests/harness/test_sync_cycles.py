"""`sync: {cycles: N}` counts worker cycles as they end: each after the fake answered its requests."""

from __future__ import annotations

from engram_sync_kit.harness.steps import BLOCKED_REASON, WorkerSnapshot, _cycle_done

FAILED_ONCE = WorkerSnapshot(None, 1, "degraded", "transport_failed", "lease-1", journal_id=4)


def test_a_renewed_lease_after_a_failure_is_the_next_cycle_starting_not_ending() -> None:
    # Before: the lease every cycle takes at its start counted as a finished cycle while the worker was
    # still degraded from the last refusal, so `cycles: 3` ended after 2 refused pushes.
    starting = WorkerSnapshot(None, 1, "degraded", "transport_failed", "lease-2", journal_id=4)
    assert not _cycle_done(FAILED_ONCE, starting)
    refused_again = WorkerSnapshot(None, 2, "degraded", "transport_failed", "lease-2", journal_id=5)
    assert _cycle_done(FAILED_ONCE, refused_again)
    delivered = WorkerSnapshot("2026-12-01T10:00:00Z", 0, "healthy", "", "lease-2", journal_id=7)
    assert _cycle_done(FAILED_ONCE, delivered)


def test_a_blocked_cycle_ends_with_a_new_lease_the_blocked_reason_and_nothing_sent() -> None:
    blocked = WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-1", journal_id=4)
    assert _cycle_done(blocked, WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-2", journal_id=4))
    # a request reached the fake: that cycle is not a blocked one, its end is its outcome
    assert not _cycle_done(
        blocked, WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-2", journal_id=5)
    )
