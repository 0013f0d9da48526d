"""The new checks judge facts in the domain's words, and each of them can fail (issue 19)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engram_sync_kit.engram_contract.journal_match import matches
from engram_sync_kit.harness.evidence import OutputEntry
from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.checks import Observed, evaluate
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.localdata import local_key
from engram_sync_kit.harness.scenario.results import StepMarks
from engram_sync_kit.harness.scenario.schema import LocalCheck
from engram_sync_kit.harness.scenario.step_results import RunResult, StepResults

STEPS = "  - observe: mid\n  - enroll: {project: a, label: first}\n  - enroll: {project: b, label: second}\n"


@dataclass
class Entry:
    id: int
    path: str
    status: int
    project: str | None = None


def observed(**overrides: object) -> Observed:
    base: dict[str, object] = {
        "version": "1.20.0",
        "lanes": LaneTable(),
        "sync_state_targets": ["cloud"],
        "results": StepResults({"cmd": RunResult(0, "Imported 1 chunk", "")}),
        "stderr": "",
        "received": [],
    }
    base.update(overrides)
    return Observed(**base)  # type: ignore[arg-type]


def judge(expect: str, facts: Observed) -> list[tuple[str, str]]:
    scenario = parse_scenario("name: x\nsteps:\n" + STEPS + "expect:\n" + expect, Path("x.scenario.yaml"))
    return [evaluate(at.expectation, facts) for at in scenario.expectations]


ROW = {
    "target_key": "cloud",
    "lifecycle": "degraded",
    "reason_code": "transport_failed",
    "last_error": 'push: transport push project "": cloud: mutation push: status 400',
    "consecutive_failures": 2,
    "last_enqueued_seq": 4,
    "last_acked_seq": 0,
    "last_pulled_seq": 0,
}


def test_sync_state_checks_each_column_and_can_fail() -> None:
    facts = observed(
        sync_state=[ROW],
        snapshots={"mid": {"sync_state": [dict(ROW, lifecycle="healthy", consecutive_failures=0)]}},
    )
    text = (
        "  - {tag: design, sync_state: {lifecycle: degraded, reason_code: transport_failed, "
        "last_error_contains: 'status 400', consecutive_failures: {at_least: 1}, last_pulled_seq: 0}}\n"
        "  - {tag: design, sync_state: {lifecycle: healthy, consecutive_failures: 0}}\n"
        "  - {tag: design, sync_state: {at: mid, lifecycle: healthy, consecutive_failures: {at_most: 0}}}\n"
        "  - {tag: design, sync_state: {last_pulled_seq: {at_least: 1}, last_error_empty: true}}\n"
        "  - {tag: design, sync_state: {target: 'cloud:a', absent: true}}\n"
        "  - {tag: design, sync_state: {target: cloud, absent: true}}\n"
        "  - {tag: design, sync_state: {target: 'cloud:a', lifecycle: idle}}\n"
        "  - {tag: design, sync_state: {reason_code: ''}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        (
            "fail",
            "sync_state cloud at the end lifecycle: expected 'healthy', got 'degraded'; "
            "sync_state cloud at the end consecutive_failures: expected 0, got 2",
        ),
        ("pass", ""),
        (
            "fail",
            'sync_state cloud at the end last_error: expected empty, got \'push: transport push project "": '
            "cloud: mutation push: status 400'; sync_state cloud at the end last_pulled_seq: expected at least "
            "1, got 0",
        ),
        ("pass", ""),
        ("fail", "sync_state cloud at the end: expected no row, found one"),
        ("fail", "sync_state cloud:a at the end: no such row (targets: ['cloud'])"),
        ("fail", "sync_state cloud at the end reason_code: expected '', got 'transport_failed'"),
    ]


def test_a_sync_state_check_at_an_observe_point_that_was_not_reached_fails() -> None:
    assert judge("  - {tag: design, sync_state: {at: mid, lifecycle: idle}}\n", observed()) == [
        ("fail", "observe point 'mid' was not reached (a failed step before it?)")
    ]


def test_local_checks_count_rows_and_can_fail() -> None:
    asked: list[LocalCheck] = []

    def count(check: LocalCheck) -> int:
        asked.append(check)
        return 1 if check.title == "arrived" else 0

    facts = observed(count_local=count)
    text = (
        "  - {tag: design, local: {title: arrived, project: my-app}}\n"
        "  - {tag: design, local: {title: missing}}\n"
        "  - {tag: design, local: {title: arrived, present: false}}\n"
        "  - {tag: design, local: {title: arrived, count: 2}}\n"
        "  - {tag: design, local: {entity: session, key: s1, present: false}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        ("fail", "local {'entity': 'observation', 'title': 'missing'}: expected present, found none"),
        ("fail", "local {'entity': 'observation', 'title': 'arrived'}: expected absent, found 1"),
        ("fail", "local {'entity': 'observation', 'title': 'arrived'}: expected 2 row(s), got 1"),
        ("pass", ""),
    ]
    assert asked[0].project == "my-app"
    assert judge("  - {tag: design, local: {title: x}}\n", observed(count_local=lambda check: None)) == [
        ("fail", "engram's database could not be read")
    ]


def test_a_local_check_at_an_observe_point_reads_that_snapshot() -> None:
    key = local_key(LocalCheck(title="arrived"))
    facts = observed(snapshots={"mid": {"local": {key: 0}}}, count_local=lambda check: 1)
    text = (
        "  - {tag: design, local: {at: mid, title: arrived, present: false}}\n"
        "  - {tag: design, local: {at: mid, title: arrived}}\n"
        "  - {tag: design, local: {title: arrived}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        ("fail", "local {'entity': 'observation', 'title': 'arrived'} at mid: expected present, found none"),
        ("pass", ""),
    ]
    assert judge("  - {tag: design, local: {at: mid, title: x}}\n", observed()) == [
        ("fail", "observe point 'mid' was not reached (a failed step before it?)")
    ]


JOURNAL = [
    Entry(1, "/sync/mutations/push", 200, "my-app"),
    Entry(2, "/sync/mutations/push", 400, None),
    Entry(3, "/sync/mutations/pull", 200, None),
    Entry(4, "/sync/mutations/push", 400, None),
]
MARKS = {"first": StepMarks(1, 2, 0, 1), "second": StepMarks(2, 4, 1, 3)}


def test_journal_windows_count_only_entries_of_that_span() -> None:
    facts = observed(journal=JOURNAL, marks=MARKS)
    text = (
        "  - {tag: design, journal: {count: 2, match: {status: 400, project: null}}}\n"
        "  - {tag: design, journal: {count: 1, since: second, match: {status: 400, project: ''}}}\n"
        "  - {tag: design, journal: {count: 1, until: first, match: {status: 400}}}\n"
        "  - {tag: design, journal: {count: 2, since: first, until: second, match: {status: '400'}}}\n"
        "  - {tag: design, journal: {at_most: 0, since: second, match: {path: /sync/mutations/pull}}}\n"
        "  - {tag: design, journal: {count: 0, until: first, match: {project: my-app}}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        ("pass", ""),
        ("pass", ""),
        ("pass", ""),
        (
            "fail",
            "cloud journal (since second) has 1 entries matching {'path': '/sync/mutations/pull'}, "
            "expected at most 0",
        ),
        ("fail", "cloud journal (until first) has 1 entries matching {'project': 'my-app'}, expected 0"),
    ]


def test_a_window_on_a_step_that_never_ran_fails_with_the_reason() -> None:
    assert judge("  - {tag: design, journal: {count: 0, since: second}}\n", observed(journal=JOURNAL)) == [
        ("fail", "step 'second' did not run (a failed or skipped step before it?)")
    ]


OUTPUT = [
    OutputEntry("cli", "engram stats", "warning: first"),
    OutputEntry("serve", "engram serve", "[autosync] started"),
    OutputEntry("cli", "engram sync --cloud", "error: boom"),
    OutputEntry("mcp", "engram mcp #0", "mcp says hi"),
]


def test_stderr_checks_scope_to_one_process_and_a_window() -> None:
    facts = observed(output=OUTPUT, marks=MARKS, stderr="\n".join(e.text for e in OUTPUT))
    text = (
        "  - {tag: design, stderr: {process: serve, not_contains: [boom]}}\n"
        "  - {tag: design, stderr: {process: cli, not_contains: [boom]}}\n"
        "  - {tag: design, stderr: {since: second, not_contains: [first], contains: [boom, hi]}}\n"
        "  - {tag: design, stderr: {until: first, contains: [autosync]}}\n"
        "  - {tag: design, stderr: {not_contains: [boom]}}\n"
        "  - {tag: design, stderr: {process: mcp, since: first, until: second, contains: [hi]}}\n"
    )
    assert judge(text, facts) == [
        ("pass", ""),
        ("fail", "engram stderr (of cli) contains 'boom'"),
        ("pass", ""),
        ("fail", "engram stderr (until first) does not contain 'autosync'"),
        ("fail", "engram stderr contains 'boom'"),
        ("fail", "engram stderr (of mcp since first until second) does not contain 'hi'"),
    ]


def test_command_stdout_not_contains_can_fail() -> None:
    text = (
        "  - {tag: design, command: {of: cmd, stdout_not_contains: [error]}}\n"
        "  - {tag: design, command: {of: cmd, stdout_not_contains: [Imported]}}\n"
    )
    assert judge(text, observed()) == [("pass", ""), ("fail", "cmd: stdout has 'Imported'")]


def test_matching_reads_ints_strings_and_the_empty_project_alike() -> None:
    entry = Entry(1, "/p", 503, None)
    assert matches(entry, {"status": 503}) and matches(entry, {"status": "503"})
    assert matches(entry, {"project": ""}) and matches(entry, {"project": None})
    assert not matches(entry, {"status": 200})
    assert not matches(Entry(1, "/p", 200, "x"), {"project": ""})
