"""When engram's sync worker is alive, written once: what its sync_state row says about whether anything
still retries a lane.

engram v1.20.0 (tag v1.20.0, commit ba9e46c), internal/cloud/autosync/manager.go: the worker runs inside
`engram serve` and `engram mcp` when ENGRAM_CLOUD_AUTOSYNC=1 (cmd/engram/main.go, tryStartAutosync). It
cycles on every save (500 ms debounce) and every 30 s (DefaultConfig PollInterval). A cycle that passes
its gates takes a 60 s lease (AcquireSyncLease: lease_owner, lease_until) and ends in MarkSyncHealthy
(backoff_until cleared) or MarkSyncFailure (consecutive_failures + 1, a new backoff_until of
min(2^(n-1) s, 5 min) +-25%). The failure count the worker obeys is its own, in memory: once it reaches
MaxConsecutiveFailures = 10 every later cycle returns before the lease and writes nothing, until the
process restarts (a new Manager starts at 0). A clean stop releases the lease (ReleaseSyncLease:
lease_owner NULL); a killed process leaves it to lapse.

The newest stored v2 and v3 workers (internal/cloud/autosync/manager.go, index file ids 71019478362 and
70742347905, commits not named; *predicted* from source) keep the defaults (10, 30 s, 60 s lease, 1 s to
5 min backoff) but no longer give up: "At the failure ceiling, remain in backoff only until the current
deadline expires" (cycle), so they retry every backoff, at most 5 minutes apart, until they succeed.

So a live worker never leaves a degraded lane's backoff_until far in the past: within a poll tick of its
end the worker either heals the lane (backoff cleared) or fails again (a new backoff_until). The stored
consecutive_failures is at least the running worker's own count (both reset together on success, and a
restart resets only the one in memory), so >= 10 with the backoff long over is a worker that gave up or
no worker at all. Both are fixed the same way: restart it. On v2/v3 the same record is no worker at
all (its worker would have retried).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

#: manager.go @ba9e46c, DefaultConfig: the worker stops retrying after this many consecutive failures.
MAX_CONSECUTIVE_FAILURES: Final = 10
#: manager.go @ba9e46c, DefaultConfig PollInterval: an idle or recovering worker cycles this often.
POLL_INTERVAL_SECONDS: Final = 30.0
#: How long past backoff_until a live worker may take to write the cycle's outcome: one poll tick, plus a
#: push that waits on a slow cloud (engram's HTTP client gives up after 30 s), plus a tick of slack.
RETRY_GRACE_SECONDS: Final = 3 * POLL_INTERVAL_SECONDS + 30.0
#: What starts a worker again (its failure count lives in the process): stop the old `engram serve`
#: (or restart the agent that runs `engram mcp`), then this.
#: the reason_code v1.20's cycle records when it finds nothing enrolled to push while rows of unenrolled
#: projects wait (manager.go push: nonEnrolledPendingError, recordBlocked); the cycle then ends unpulled
NON_ENROLLED_PENDING_REASON: Final = "non_enrolled_pending_mutations"
RESTART_COMMAND: Final = "ENGRAM_CLOUD_AUTOSYNC=1 engram serve"
RESTART_ADVICE: Final = (
    f"stop engram serve and start it again ({RESTART_COMMAND}), or restart the agent that runs engram mcp"
)


class WorkerPresence(StrEnum):
    """What the lane's lease says of the worker, at the time of the check."""

    HOLDS_LEASE = "holds the lease"  # a cycle took the lease less than 60 s ago
    LEASE_LAPSED = "lease lapsed"  # the last worker stopped cycling without a clean stop, or gave up
    NO_WORKER = "no worker"  # never leased, or released by a clean stop


@dataclass(frozen=True)
class WorkerRecord:
    """The lane's sync_state row, as far as liveness is concerned (times already parsed, UTC)."""

    lifecycle: str | None
    consecutive_failures: int
    backoff_until: datetime | None
    lease_owner: str | None
    lease_until: datetime | None
    #: v1.20's worker gives up at MAX_CONSECUTIVE_FAILURES; v2/v3's retries on (predicted from source).
    gives_up: bool = True

    def presence(self, now: datetime) -> WorkerPresence:
        if not (self.lease_owner or "").strip():
            return WorkerPresence.NO_WORKER
        if self.lease_until is not None and self.lease_until > now:
            return WorkerPresence.HOLDS_LEASE
        return WorkerPresence.LEASE_LAPSED

    def backoff_over_for(self, now: datetime) -> float | None:
        """Seconds since the backoff ran out; None while none is recorded or it has not run out."""
        if self.backoff_until is None or self.backoff_until > now:
            return None
        return (now - self.backoff_until).total_seconds()

    def nothing_retried(self, now: datetime) -> bool:
        """The backoff ran out more than a live worker's retry takes, and no cycle wrote since."""
        over = self.backoff_over_for(now)
        return over is not None and over > RETRY_GRACE_SECONDS

    def gave_up(self, now: datetime) -> bool:
        """Past the worker's give-up point: 10 failures, and nothing retried after the last backoff."""
        return self.past_give_up_point and self.nothing_retried(now)

    @property
    def past_give_up_point(self) -> bool:
        return self.gives_up and self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES

    def stopped_while_degraded(self, now: datetime) -> bool:
        """Degraded short of a give-up, the backoff long over, and no cycle since."""
        return self.lifecycle == "degraded" and not self.past_give_up_point and self.nothing_retried(now)
