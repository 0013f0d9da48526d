"""`sync: {cycles: N}` counts worker cycles as they end: each after the fake answered its requests."""

from __future__ import annotations

import pytest

from engram_sync_kit.harness.scenario import steps
from engram_sync_kit.harness.scenario.steps import BLOCKED_REASON, WorkerSnapshot, _cycle_done

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


class NextCycleMidRead:
    """A world whose v1.20 worker, after a blocked cycle, starts the next one while the harness reads its
    snapshot. The start takes the lease and sets the phase to running with no I/O between
    (internal/cloud/autosync/manager.go cycle() and push() in v1.20.0); the push to the fake comes later.
    `start_after` is how many of the snapshot's reads come before the start."""

    def __init__(self, start_after: int) -> None:
        self.reads = 0
        self.start_after = start_after
        self.started = False
        self.daemon = self
        self.journal_seen = 4
        self.own_journal_seen = 4  # its own requests: all of them, one machine

    def _read(self) -> None:
        if self.reads == self.start_after:
            self.started = True
        self.reads += 1

    def sync_status(self) -> dict[str, object]:
        self._read()
        if self.started:
            return {"phase": "running", "consecutive_failures": 0, "last_sync_at": None, "reason_code": ""}
        return {
            "phase": "degraded",
            "consecutive_failures": 0,
            "last_sync_at": None,
            "reason_code": BLOCKED_REASON,
        }

    def lease(self) -> str:
        self._read()
        return "lease-2" if self.started else "lease-1"

    def journal_mark(self) -> int:
        self._read()
        return 4  # the new cycle's push has not reached the fake yet


@pytest.mark.parametrize("start_after", [0, 1, 2, 3])
def test_the_next_cycle_starting_mid_snapshot_is_never_a_finished_one(
    monkeypatch: pytest.MonkeyPatch, start_after: int
) -> None:
    """The CI flake (issue 35 item 20): the status was read before the lease, so a cycle that took its
    lease between the two reads looked like a blocked cycle that had ended, and the harness read the
    cloud before that cycle's push ("lost 2")."""
    world = NextCycleMidRead(start_after=99)  # the snapshot before: the worker never starts
    monkeypatch.setattr(steps, "_lease", lambda w: w.lease())
    monkeypatch.setattr(steps, "_journal_mark", lambda w: w.journal_mark())
    before = steps._status_snapshot(world)  # type: ignore[arg-type]
    assert before == WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-1", journal_id=4)
    world = NextCycleMidRead(start_after)
    now = steps._status_snapshot(world)  # type: ignore[arg-type]
    assert world.reads == 3
    assert not _cycle_done(before, now), now


def test_a_blocked_cycle_that_ended_before_the_snapshot_is_finished() -> None:
    blocked = WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-1", journal_id=4)
    assert _cycle_done(blocked, WorkerSnapshot(None, 0, "degraded", BLOCKED_REASON, "lease-2", journal_id=4))
    # still running under its new lease: not ended, whatever the reason code says
    assert not _cycle_done(
        blocked, WorkerSnapshot(None, 0, "running", BLOCKED_REASON, "lease-2", journal_id=4)
    )
