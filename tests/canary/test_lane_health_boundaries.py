"""When a lane counts as blocked, pinned at its edge: a degraded lane with nothing pending is not blocked
(a mutation run turned `pending > 0` into `>= 0` and every other test stayed green)."""

from __future__ import annotations

import pytest

from engram_sync_kit.canary.lane_health import LaneHealth


@pytest.mark.parametrize(
    ("lifecycle", "last_error", "pending", "blocked"),
    [
        ("degraded", "push failed: 400", 0, False),
        ("degraded", "push failed: 400", 1, True),
        ("degraded", "   ", 1, False),
        ("healthy", "push failed: 400", 1, False),
    ],
)
def test_a_degraded_lane_is_blocked_only_with_rows_waiting(
    lifecycle: str, last_error: str, pending: int, blocked: bool
) -> None:
    lane = LaneHealth("cloud", lifecycle=lifecycle, last_error=last_error, pending=pending)
    assert lane.blocked is blocked
