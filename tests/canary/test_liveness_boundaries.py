"""Liveness at its edges (mutants): the stall threshold, the give-up count and the retry grace, each
pinned one second (or one failure) either side, on the pure rules of canary.liveness and
engram_contract.worker_liveness."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram_sync_kit.canary.config import CanaryConfig, Thresholds
from engram_sync_kit.canary.liveness import (
    BACKOFF_EXPIRED,
    SYNC_STALLED,
    WORKER_GAVE_UP,
    LaneLiveness,
    duration_text,
    lane_liveness_findings,
)
from engram_sync_kit.engram_contract.worker_liveness import (
    MAX_CONSECUTIVE_FAILURES,
    RETRY_GRACE_SECONDS,
    WorkerPresence,
    WorkerRecord,
)

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
HOUR = 3600.0
IDLE = WorkerRecord(None, 0, None, None, None)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def lane(
    *,
    waiting: int = 3,
    oldest: float | None = HOUR + 1,
    last_ack: float | None = None,
    record: WorkerRecord = IDLE,
    takes_part: bool = True,
) -> LaneLiveness:
    return LaneLiveness(
        target_key="cloud",
        waiting_rows=waiting,
        oldest_waiting_at=None if oldest is None else ago(oldest),
        last_ack_at=None if last_ack is None else ago(last_ack),
        record=record,
        last_error="push: 503" if record.consecutive_failures else None,
        takes_part=takes_part,
    )


def checks(liveness: LaneLiveness) -> list[str]:
    return [finding.check for finding in lane_liveness_findings(liveness, NOW, HOUR)]


def test_the_default_threshold_is_an_hour_and_a_config_key() -> None:
    assert CanaryConfig().thresholds.stall_after_seconds == HOUR
    assert Thresholds(stall_after_seconds=90).stall_after_seconds == 90
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Thresholds(stall_after_seconds=0)


@pytest.mark.parametrize(
    ("oldest", "last_ack", "waiting", "stalled"),
    [
        (HOUR, None, 3, False),  # exactly the threshold: not yet
        (HOUR + 1, None, 3, True),  # one second past it, never acked
        (HOUR + 1, HOUR, 3, False),  # an ack within the threshold is progress
        (HOUR + 1, HOUR + 1, 3, True),  # the last ack as old as the wait: no progress
        (10 * 86400, 20 * 86400, 1, True),
        (HOUR + 1, None, 0, False),  # nothing waits
        (None, None, 3, False),  # an unreadable occurred_at is no age
    ],
)
def test_a_stall_is_one_second_past_the_threshold_with_no_ack_within_it(
    oldest: float | None, last_ack: float | None, waiting: int, stalled: bool
) -> None:
    assert (SYNC_STALLED in checks(lane(oldest=oldest, last_ack=last_ack, waiting=waiting))) is stalled


def test_a_home_outside_cloud_sync_never_stalls() -> None:
    assert checks(lane(oldest=30 * 86400, takes_part=False)) == []


def degraded(failures: int, backoff_over: float, owner: str | None = None) -> WorkerRecord:
    return WorkerRecord("degraded", failures, ago(backoff_over), owner, ago(backoff_over) if owner else None)


@pytest.mark.parametrize(
    ("failures", "backoff_over", "expected"),
    [
        (MAX_CONSECUTIVE_FAILURES, RETRY_GRACE_SECONDS + 1, [WORKER_GAVE_UP]),
        (MAX_CONSECUTIVE_FAILURES, RETRY_GRACE_SECONDS, []),  # a live worker may still be retrying
        (MAX_CONSECUTIVE_FAILURES + 5, RETRY_GRACE_SECONDS + 1, [WORKER_GAVE_UP]),
        (MAX_CONSECUTIVE_FAILURES - 1, RETRY_GRACE_SECONDS + 1, [BACKOFF_EXPIRED]),
        (MAX_CONSECUTIVE_FAILURES - 1, RETRY_GRACE_SECONDS, []),
        (1, RETRY_GRACE_SECONDS + 1, [BACKOFF_EXPIRED]),
        (3, -60, []),  # still backing off
    ],
)
def test_give_up_and_expired_backoff_at_their_edges(
    failures: int, backoff_over: float, expected: list[str]
) -> None:
    assert checks(lane(oldest=60, record=degraded(failures, backoff_over))) == expected


def test_an_expired_backoff_with_nothing_waiting_is_no_finding_but_giving_up_is() -> None:
    assert checks(lane(waiting=0, oldest=None, record=degraded(2, RETRY_GRACE_SECONDS + 1))) == []
    gave_up = degraded(MAX_CONSECUTIVE_FAILURES, RETRY_GRACE_SECONDS + 1)
    assert checks(lane(waiting=0, oldest=None, record=gave_up)) == [WORKER_GAVE_UP]


def test_a_healthy_lane_with_a_stale_backoff_field_is_not_degraded() -> None:
    record = WorkerRecord("healthy", 0, ago(RETRY_GRACE_SECONDS + 1), None, None)
    assert checks(lane(oldest=60, record=record)) == []


def test_the_give_up_and_the_stall_are_two_findings_of_one_lane() -> None:
    gave_up = degraded(MAX_CONSECUTIVE_FAILURES, 2 * HOUR, owner="autosync-1")
    [give_up, stall] = lane_liveness_findings(lane(oldest=3 * HOUR, record=gave_up), NOW, HOUR)
    assert (give_up.check, give_up.severity, give_up.size) == (WORKER_GAVE_UP, "critical", 3)
    assert give_up.evidence["clear_command"] == "ENGRAM_CLOUD_AUTOSYNC=1 engram serve"
    assert give_up.message == (
        "engram's worker has given up on lane 'cloud': 10 consecutive failures (v1.20 stops retrying after 10 "
        "until the process restarts), and no retry came in the 2h since its last backoff ran out at "
        "2026-12-02T10:00:00Z; last error: push: 503; 3 rows wait; restart it: stop engram serve and start it "
        "again (ENGRAM_CLOUD_AUTOSYNC=1 engram serve), or restart the agent that runs engram mcp"
    )
    assert (stall.check, stall.severity) == (SYNC_STALLED, "critical")
    assert stall.message == (
        "sync on lane 'cloud' has stalled: 3 rows the worker sends wait, the oldest for 3h (since "
        "2026-12-02T09:00:00Z), and nothing on it was ever acked; the lease of autosync-1 lapsed at "
        "2026-12-02T10:00:00Z: that worker stopped cycling (gave up, or was killed)"
    )


@pytest.mark.parametrize(
    ("owner", "lease_until", "presence"),
    [
        (None, None, WorkerPresence.NO_WORKER),
        ("  ", ago(-30), WorkerPresence.NO_WORKER),
        ("autosync-1", ago(-1), WorkerPresence.HOLDS_LEASE),
        ("autosync-1", ago(0), WorkerPresence.LEASE_LAPSED),  # lease_until is exclusive
        ("autosync-1", None, WorkerPresence.LEASE_LAPSED),
    ],
)
def test_what_the_lease_says_of_the_worker(
    owner: str | None, lease_until: datetime | None, presence: WorkerPresence
) -> None:
    assert WorkerRecord("healthy", 0, None, owner, lease_until).presence(NOW) is presence


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-5, "0s"), (119, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h"), (172799, "47h"), (172800, "2d")],
)
def test_durations_are_rounded_down_at_each_unit(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_a_worker_that_retries_past_ten_failures_never_gives_up() -> None:
    """v2/v3 (predicted from source): at 10 failures the worker only waits out its backoff."""
    record = WorkerRecord(
        "degraded", MAX_CONSECUTIVE_FAILURES + 3, ago(RETRY_GRACE_SECONDS + 1), None, None, False
    )
    assert checks(lane(oldest=60, record=record)) == [BACKOFF_EXPIRED]


def test_a_huge_last_error_stays_a_bounded_line() -> None:
    record = degraded(MAX_CONSECUTIVE_FAILURES, RETRY_GRACE_SECONDS + 1)
    liveness = lane(oldest=60, record=record)
    huge = LaneLiveness(**{**liveness.__dict__, "last_error": "\u00e9\n" * 500_000})
    [finding] = lane_liveness_findings(huge, NOW, HOUR)
    assert len(finding.message) < 1000 and finding.message.count("\u2026") == 1


@pytest.mark.parametrize(
    "value", [None, "", "not a time", "2026-13-45 99:99:99", 12345, b"\xff\xfe", "\u00e9t\u00e9"]
)
def test_an_unreadable_engram_time_is_no_time(value: object) -> None:
    from engram_sync_kit.canary.liveness import _time

    assert _time(value) is None


@pytest.mark.parametrize(
    ("value", "count"), [(None, 0), ("x", 0), ("3.5", 0), (b"7", 0), (4, 4), ("12", 12), ("-1", -1)]
)
def test_an_unreadable_failure_count_is_zero(value: object, count: int) -> None:
    from engram_sync_kit.canary.liveness import _int

    assert _int(value) == count


def test_a_bad_threshold_in_the_config_is_one_line(tmp_path: Path) -> None:
    from engram_sync_kit.canary.config import ConfigError, load_config

    for text, problem in (
        ("thresholds:\n  stall_after_seconds: abc\n", "valid number"),
        ("thresholds:\n  stall_after_seconds: 0\n", "greater than or equal to 1"),
        ("thresholds:\n  stall_after_seconds: 1e308\n", "less than or equal to 2592000"),
    ):
        config = tmp_path / "config.yaml"
        config.write_text(text)
        with pytest.raises(ConfigError) as error:
            load_config(config)
        assert problem in str(error.value) and "\n" not in str(error.value)


def test_watch_says_when_a_liveness_finding_appears_and_when_it_clears() -> None:
    from engram_sync_kit.canary.liveness import liveness_transitions

    stalled = lane_liveness_findings(lane(oldest=2 * HOUR), NOW, HOUR)
    db = Path("/home/me/.engram/engram.db")
    [appeared] = liveness_transitions([], stalled, db)
    assert (appeared.event, appeared.target_key, appeared.severity) == ("appeared", "cloud", "critical")
    assert appeared.line.startswith("engram-canary CRITICAL: sync_stalled sync on lane 'cloud' has stalled")
    assert appeared.line.endswith(f" db={db}")
    assert liveness_transitions(stalled, stalled, db) == []
    [gone] = liveness_transitions(stalled, [], db)
    assert gone.line == f"engram-canary OK: sync_stalled on lane 'cloud' has cleared db={db}"
