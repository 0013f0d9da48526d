"""Expectations: version ranges, and each check kind against observed facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.lanes import LaneTable, MeasuredLaneRow
from engram_sync_kit.harness.scenario.checks import Observed, evaluate, in_range
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.step_results import (
    CanaryResult,
    DoctorResult,
    EnrollResult,
    InboxListResult,
    StepResults,
)


@pytest.mark.parametrize(
    ("version", "spec", "holds"),
    [
        ("1.20.0", ">=1.20.0,<2.0.0", True),
        # PEP 440's exclusive '<': a pre-release of 2.0.0 is not below 2.0.0 (v1.20's baselines judged
        # rc.12, whose predicted baselines contradict them)
        ("2.0.0-rc.6", ">=1.20.0,<2.0.0", False),
        ("2.0.0-rc.12", ">=1.20.0,<2.0.0", False),
        ("1.99.9", ">=1.20.0,<2.0.0", True),
        ("2.0.0-rc.11", ">=2.0.0-rc.11,<2.0.0-rc.12", True),
        ("2.0.0-rc.12", ">=2.0.0-rc.11,<2.0.0-rc.12", False),
        ("3.7.2", ">=2.0.0-rc.12,<4.0.0", True),
        ("4.0.0-rc.1", ">=2.0.0-rc.12,<4.0.0", False),
        ("2.0.0-rc.1", "<=2.0.0", True),
        ("2.0.0", ">=1.20.0,<2.0.0", False),
        ("2.0.0-rc.10", ">2.0.0-rc.9", True),
        ("v1.19.0", ">=1.20.0", False),
        ("1.20.0", "==1.20.0", True),
        ("1.20.0", "!=1.20.0", False),
    ],
)
def test_version_ranges(version: str, spec: str, holds: bool) -> None:
    assert in_range(version, spec) is holds


def observed(**overrides: object) -> Observed:
    base: dict[str, object] = {
        "version": "1.20.0",
        "lanes": LaneTable(rows=[MeasuredLaneRow("cloud", "app", enqueued=2, acked=2, delivered=2)]),
        "sync_state_targets": ["cloud", "cloud:app"],
        "results": StepResults(
            {
                "canary": CanaryResult(
                    2,
                    {
                        "status": "critical",
                        "findings": [{"check": "foreign_sync_target", "target_key": "cloud:x", "key": "x"}],
                    },
                ),
                "inbox": InboxListResult(0, ({"key": "x", "count": 1, "telemetry": 1},)),
                "doctor": DoctorResult(
                    {
                        "checks": [
                            {"check_id": "sqlite_lock_contention", "result": "ok"},
                            {"check_id": "a", "result": "blocked"},
                        ]
                    }
                ),
                "enroll": EnrollResult(0, "enrolled inbox", ""),
            }
        ),
        "stderr": "[engram serve] warning: saved to inbox",
        "received": [],
    }
    base.update(overrides)
    return Observed(**base)  # type: ignore[arg-type]


def expectations(text: str) -> list[object]:
    scenario = parse_scenario("name: x\nsteps: []\nexpect:\n" + text, Path("x.scenario.yaml"))
    return [at.expectation for at in scenario.expectations]


def judge(text: str, facts: Observed | None = None) -> list[tuple[str, str]]:
    return [evaluate(e, facts or observed()) for e in expectations(text)]  # type: ignore[arg-type]


def test_lane_checks_compare_only_listed_counts_and_exact_rejects_extra_rows() -> None:
    assert judge("  - {tag: design, lanes: {rows: [{lane: cloud, project: app, delivered: 2}]}}\n") == [
        ("pass", "")
    ]
    assert judge("  - {tag: design, lanes: {rows: [{lane: cloud, project: app, stranded: 1}]}}\n") == [
        ("fail", "cloud/app stranded: expected 1, got 0")
    ]
    assert judge(
        "  - {tag: design, lanes: {exact: true, rows: [{lane: 'cloud:inbox', project: app, enqueued: 0}]}}\n"
    ) == [("fail", "unexpected lane row cloud/app (2 enqueued)")]


def test_baseline_outside_its_range_is_not_applicable() -> None:
    text = "  - {tag: baseline, engram: '>=2.0.0', sync_state_targets: {equals: []}}\n"
    assert judge(text) == [("n/a", "engram 1.20.0 is outside >=2.0.0")]


def test_set_canary_inbox_doctor_stderr_command_checks() -> None:
    text = (
        "  - {tag: design, sync_state_targets: {excludes: ['cloud:app']}}\n"
        "  - {tag: design, canary: {status: critical, findings_include: [{check: foreign_sync_target, key: x}]}}\n"
        "  - {tag: design, inbox: {keys_include: [{key: x, count: 2}]}}\n"
        "  - {tag: design, doctor: {checks_include: [a], checks_exclude: [sqlite_lock_contention]}}\n"
        "  - {tag: design, stderr: {contains: ['saved to inbox'], not_contains: [panic]}}\n"
        "  - {tag: design, command: {of: enroll, exit_not: 0}}\n"
        "  - {tag: design, canary: {of: later}}\n"
    )
    assert judge(text) == [
        ("fail", "sync_state targets: unexpected 'cloud:app'"),
        ("pass", ""),
        ("fail", "inbox x count: expected 2, got 1"),
        ("pass", ""),
        ("pass", ""),
        ("fail", "enroll: exit 0, expected anything else"),
        ("fail", "no canary result named 'later': add a `canary:` step (as: later) before the checks"),
    ]


class Entry:
    def __init__(self, status: int, path: str) -> None:
        self.status, self.path = status, path


def test_journal_checks_count_matching_entries() -> None:
    facts = observed(journal=[Entry(503, "/sync/mutations/push")] * 2 + [Entry(200, "/sync/mutations/push")])
    text = (
        "  - {tag: design, journal: {count: 2, match: {status: '503'}}}\n"
        "  - {tag: design, journal: {at_least: 4, match: {path: /sync/mutations/push}}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        (
            "fail",
            "cloud journal has 3 entries matching {'path': '/sync/mutations/push'}, expected at least 4",
        ),
    ]
