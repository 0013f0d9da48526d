"""Evaluating a scenario's expectations against what engram and the cloud did."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from engram_sync_kit.engram_contract.journal_match import matches
from engram_sync_kit.harness.design import schema as d
from engram_sync_kit.harness.design.checks import (
    check_cloud_status,
    check_doctor_verdict,
    check_enroll_hint,
    check_inbox_row,
    check_save_answer,
)
from engram_sync_kit.harness.evidence import OutputEntry
from engram_sync_kit.harness.lanes import LaneTable, read_local_mutations
from engram_sync_kit.harness.scenario import schema as s
from engram_sync_kit.harness.scenario.localdata import local_key
from engram_sync_kit.harness.scenario.results import StepMarks
from engram_sync_kit.harness.scenario.step_results import (
    CanaryResult,
    CommandOutput,
    DoctorResult,
    HttpResult,
    InboxListResult,
    StepResult,
    StepResults,
)
from engram_sync_kit.harness.triage_copies import copy_problems, read_triage_entries

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")  # a Go pseudo-version has hyphens


def version_key(version: str) -> tuple[int, int, int, int, tuple[Any, ...]]:
    match = _VERSION.match(version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    major, minor, patch, pre = match.groups()
    pre_parts: tuple[Any, ...] = ()
    if pre:
        pre_parts = tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in pre.split("."))
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre_parts)


def in_range(version: str, spec: str) -> bool:
    """Whether VERSION satisfies a range like '>=1.20.0,<2.0.0'.

    As in PEP 440, '<2.0.0' leaves out 2.0.0's own pre-releases: v1.20's baselines must not judge
    v2.0.0-rc.12, whose predicted baselines say otherwise ('<2.0.0-rc.12' still means what it says)."""
    have = version_key(version)
    for part in spec.split(","):
        op, wanted = re.match(r"^\s*(>=|<=|==|!=|>|<)\s*(.+?)\s*$", part).groups()  # type: ignore[union-attr]
        other = version_key(wanted)
        prerelease_of_final = other[3] == 1 and have[3] == 0 and have[:3] == other[:3]
        ok = {
            ">=": have >= other,
            "<=": have <= other,
            "==": have == other,
            "!=": have != other,
            ">": have > other,
            "<": have < other and not prerelease_of_final,
        }[op]
        if not ok:
            return False
    return True


@dataclass
class Observed:
    """Everything a check may look at, gathered once after the steps ran."""

    version: str
    lanes: LaneTable
    sync_state_targets: list[str]
    results: StepResults
    stderr: str
    received: Sequence[Any]
    journal: Sequence[Any] = ()
    output: Sequence[OutputEntry] = ()
    marks: Mapping[str, StepMarks] = field(default_factory=dict)
    sync_state: Sequence[Mapping[str, Any]] = ()
    snapshots: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    count_local: Callable[[s.LocalCheck], int | None] | None = None
    db_path: Path | None = None


def _project(project: str) -> str:
    """The project as the scenario files spell it: "" for the empty project."""
    return project or '""'


def _lanes(check: s.LanesCheck, observed: Observed) -> list[str]:
    problems: list[str] = []
    for want in check.rows:
        row = observed.lanes.row(want.lane, want.project)
        actual = row.counts() if row else dict.fromkeys(s.LANE_COUNTS, 0)
        for count in s.LANE_COUNTS:
            expected = getattr(want, count)
            if expected is not None and actual[count] != expected:
                problems.append(
                    f"{want.lane}/{_project(want.project)} {count}: expected {expected}, got {actual[count]}"
                )
    if check.exact:
        listed = {(row.lane, row.project) for row in check.rows}
        for row in observed.lanes.rows:
            if (row.lane, row.project) not in listed:
                problems.append(
                    f"unexpected lane row {row.lane}/{_project(row.project)} ({row.enqueued} enqueued)"
                )
    return problems


def _lost(check: s.LostCheck, observed: Observed) -> list[str]:
    problems = []
    for want in check.rows:
        row = observed.lanes.row(want.lane, want.project)
        actual = row.lost if row else 0
        if actual != want.count:
            problems.append(f"{want.lane}/{_project(want.project)} lost: expected {want.count}, got {actual}")
    return problems


_ABSENT = {"absent": True}
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[([0-9]+)\]")


def json_at(document: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at a JSON path like $.upgrade.stage or $.lanes[0].lost."""
    current = document
    for key, index in _PATH_PART.findall(path[1:]):
        if key and isinstance(current, dict) and key in current:
            current = current[key]
        elif index and isinstance(current, list) and int(index) < len(current):
            current = current[int(index)]
        else:
            return False, None
    return True, current


def _answer(check: s.AnswerCheck, observed: Observed) -> list[str]:
    kept = observed.results.get(check.of, StepResult, "http")
    problems: list[str] = []
    if isinstance(kept, HttpResult):
        document = kept.body
        if check.status is not None and kept.status != check.status:
            problems.append(f"{check.of}: status {kept.status}, expected {check.status}")
    elif isinstance(kept, CommandOutput):
        try:
            document = json.loads(kept.stdout)
        except json.JSONDecodeError:
            return [f"{check.of}: stdout is not JSON: {kept.stdout[:100]!r}"]
    else:
        return [f"{check.of}: a {kept.step} result has no JSON answer (http, run or reconcile have)"]
    for path, want in check.json_.items():
        found, value = json_at(document, path)
        if want == _ABSENT:
            if found:
                problems.append(f"{check.of} {path}: expected absent, got {json.dumps(value)[:100]}")
        elif not found:
            problems.append(f"{check.of} {path}: absent, expected {json.dumps(want)}")
        elif value != want:
            problems.append(f"{check.of} {path}: expected {json.dumps(want)}, got {json.dumps(value)[:100]}")
    return problems


def _set(check: s.SetCheck, actual: list[str], what: str) -> list[str]:
    problems: list[str] = []
    have = set(actual)
    if check.equals is not None and have != set(check.equals):
        problems.append(f"{what}: expected exactly {sorted(check.equals)}, got {sorted(have)}")
    problems += [
        f"{what}: missing {item!r} (have {sorted(have)})" for item in check.includes if item not in have
    ]
    problems += [f"{what}: unexpected {item!r}" for item in check.excludes if item in have]
    return problems


def _finding_matches(finding: dict[str, Any], want: s.FindingMatch) -> bool:
    return all(
        expected is None or str(finding.get(key)) == expected
        for key, expected in (
            ("check", want.check),
            ("severity", want.severity),
            ("target_key", want.target_key),
            ("key", want.key),
        )
    )


def _canary(check: s.CanaryCheck, observed: Observed) -> list[str]:
    report = observed.results.get(check.of, CanaryResult, "canary").report
    problems: list[str] = []
    if check.status is not None and report.get("status") != check.status:
        problems.append(f"canary status: expected {check.status}, got {report.get('status')}")
    findings = report.get("findings", [])
    summary = ", ".join(f"{f.get('check')}:{f.get('key') or f.get('target_key')}" for f in findings) or "none"
    for want in check.findings_include:
        if not any(_finding_matches(finding, want) for finding in findings):
            problems.append(
                f"canary: no finding matching {want.model_dump(exclude_none=True)} (findings: {summary})"
            )
    for want in check.findings_exclude:
        if any(_finding_matches(finding, want) for finding in findings):
            problems.append(f"canary: unexpected finding matching {want.model_dump(exclude_none=True)}")
    return problems


def _inbox(check: s.InboxCheck, observed: Observed) -> list[str]:
    listed = observed.results.get(check.of, InboxListResult, "inbox").keys
    keys: dict[Any, Mapping[str, Any]] = {entry.get("key"): entry for entry in listed}
    problems: list[str] = []
    if check.empty is not None and (not keys) != check.empty:
        problems.append(f"inbox: expected {'empty' if check.empty else 'non-empty'}, got keys {sorted(keys)}")
    for want in check.keys_include:
        entry = keys.get(want.key)
        if entry is None:
            problems.append(f"inbox: key {want.key!r} missing (keys: {sorted(map(str, keys))})")
            continue
        for name in ("count", "telemetry", "resolved_to"):
            expected = getattr(want, name)
            if expected is not None and entry.get(name) != expected:
                problems.append(f"inbox {want.key} {name}: expected {expected}, got {entry.get(name)}")
    problems += [f"inbox: unexpected key {key!r}" for key in check.keys_exclude if key in keys]
    return problems


def _doctor(check: s.DoctorCheck, observed: Observed) -> list[str]:
    doctor = observed.results.get(check.of, DoctorResult, "doctor")
    flagged: set[Any] = {c.get("check_id") for c in doctor.checks if c.get("result") not in (None, "ok")}
    problems = [
        f"doctor: check {c!r} reported nothing (flagged: {sorted(flagged)})"
        for c in check.checks_include
        if c not in flagged
    ]
    problems += [f"doctor: check {c!r} reported findings" for c in check.checks_exclude if c in flagged]
    return problems


def _window(
    check: s.TextCheck | s.JournalCheck, observed: Observed
) -> tuple[StepMarks | None, StepMarks | None]:
    def marks(label: str | None) -> StepMarks | None:
        if label is None:
            return None
        if label not in observed.marks:
            raise LookupError(f"step {label!r} did not run (a failed or skipped step before it?)")
        return observed.marks[label]

    return marks(check.since), marks(check.until)


def _scope(check: s.TextCheck | s.JournalCheck) -> str:
    parts = [f"since {check.since}" if check.since else "", f"until {check.until}" if check.until else ""]
    if isinstance(check, s.TextCheck) and check.process:
        parts.insert(0, f"of {check.process}")
    scope = " ".join(part for part in parts if part)
    return f" ({scope})" if scope else ""


def _text(check: s.TextCheck, observed: Observed) -> list[str]:
    since, until = _window(check, observed)
    if check.process is None and since is None and until is None:
        text = observed.stderr
    else:
        start = since.output_before if since else 0
        end = until.output_after if until else None
        chosen = [
            entry
            for entry in observed.output[start:end]
            if check.process is None or entry.process == check.process
        ]
        text = "\n".join(f"[{e.source}] {line}" for e in chosen for line in e.text.splitlines())
    scope = _scope(check)
    problems = [
        f"engram stderr{scope} does not contain {needle!r}" for needle in check.contains if needle not in text
    ]
    problems += [
        f"engram stderr{scope} contains {needle!r}" for needle in check.not_contains if needle in text
    ]
    return problems


def _command(check: s.CommandCheck, observed: Observed) -> list[str]:
    ran = observed.results.get(check.of, CommandOutput, "run")
    problems: list[str] = []
    if check.exit is not None and ran.exit != check.exit:
        problems.append(f"{check.of}: exit {ran.exit}, expected {check.exit}")
    if check.exit_not is not None and ran.exit == check.exit_not:
        problems.append(f"{check.of}: exit {ran.exit}, expected anything else")
    problems += [f"{check.of}: stdout lacks {t!r}" for t in check.stdout_contains if t not in ran.stdout]
    problems += [f"{check.of}: stdout has {t!r}" for t in check.stdout_not_contains if t in ran.stdout]
    problems += [f"{check.of}: stderr lacks {t!r}" for t in check.stderr_contains if t not in ran.stderr]
    problems += [f"{check.of}: stderr has {t!r}" for t in check.stderr_not_contains if t in ran.stderr]
    return problems


def _received(check: s.ReceivedCheck, observed: Observed) -> list[str]:
    count = sum(1 for item in observed.received if matches(item, check.match))
    return (
        []
        if count == check.count
        else [f"cloud received {count} matching {check.match}, expected {check.count}"]
    )


def _journal(check: s.JournalCheck, observed: Observed) -> list[str]:
    since, until = _window(check, observed)
    low = since.journal_before if since else 0
    high = until.journal_after if until else None
    count = sum(1 for entry in observed.journal if entry_in(entry, low, high) and matches(entry, check.match))
    what = f"cloud journal{_scope(check)} has {count} entries matching {check.match}"
    if check.count is not None and count != check.count:
        return [f"{what}, expected {check.count}"]
    if check.at_least is not None and count < check.at_least:
        return [f"{what}, expected at least {check.at_least}"]
    if check.at_most is not None and count > check.at_most:
        return [f"{what}, expected at most {check.at_most}"]
    return []


def entry_in(entry: Any, low: int, high: int | None) -> bool:
    identifier = getattr(entry, "id", None)
    if identifier is None:
        return low == 0 and high is None
    return bool(identifier > low and (high is None or identifier <= high))


def _count_problem(name: str, want: s.Count, have: Any) -> str | None:
    value = int(have or 0)
    if want.exactly is not None and value != want.exactly:
        return f"{name}: expected {want.exactly}, got {value}"
    if want.at_least is not None and value < want.at_least:
        return f"{name}: expected at least {want.at_least}, got {value}"
    if want.at_most is not None and value > want.at_most:
        return f"{name}: expected at most {want.at_most}, got {value}"
    return None


def _sync_state(check: s.SyncStateCheck, observed: Observed) -> list[str]:
    if check.at is None:
        rows, where = observed.sync_state, "at the end"
    else:
        if check.at not in observed.snapshots:
            raise LookupError(f"observe point {check.at!r} was not reached (a failed step before it?)")
        rows, where = observed.snapshots[check.at].get("sync_state", []), f"at {check.at}"
    row = next((r for r in rows if r.get("target_key") == check.target), None)
    targets = sorted(str(r.get("target_key")) for r in rows)
    if check.absent:
        return [] if row is None else [f"sync_state {check.target} {where}: expected no row, found one"]
    if row is None:
        return [f"sync_state {check.target} {where}: no such row (targets: {targets})"]
    prefix = f"sync_state {check.target} {where}"
    problems: list[str] = []
    for name in ("lifecycle", "reason_code"):
        expected = getattr(check, name)
        actual = row.get(name) or ""
        if expected is not None and actual != expected:
            problems.append(f"{prefix} {name}: expected {expected!r}, got {actual!r}")
    error = str(row.get("last_error") or "")
    if check.last_error_contains is not None and check.last_error_contains not in error:
        problems.append(
            f"{prefix} last_error: expected it to contain {check.last_error_contains!r}, got {error!r}"
        )
    if check.last_error_empty is not None and (error == "") != check.last_error_empty:
        wanted = "empty" if check.last_error_empty else "an error"
        problems.append(f"{prefix} last_error: expected {wanted}, got {error!r}")
    for name in ("consecutive_failures", "last_enqueued_seq", "last_acked_seq", "last_pulled_seq"):
        want = getattr(check, name)
        if want is not None and (problem := _count_problem(name, want, row.get(name))) is not None:
            problems.append(f"{prefix} {problem}")
    return problems


def _local(check: s.LocalCheck, observed: Observed) -> list[str]:
    count: int | None
    if check.at is not None:
        if check.at not in observed.snapshots:
            raise LookupError(f"observe point {check.at!r} was not reached (a failed step before it?)")
        count = observed.snapshots[check.at].get("local", {}).get(local_key(check))
    elif observed.count_local is None:
        raise LookupError("no database to read (the scenario did not get that far)")
    else:
        count = observed.count_local(check)
    if count is None:
        return ["engram's database could not be read"]
    described = check.model_dump(exclude_none=True, exclude={"present", "count", "at"})
    what = f"local {described}" + (f" at {check.at}" if check.at else "")
    if check.count is not None:
        return [] if count == check.count else [f"{what}: expected {check.count} row(s), got {count}"]
    if check.present and count == 0:
        return [f"{what}: expected present, found none"]
    if not check.present and count:
        return [f"{what}: expected absent, found {count}"]
    return []


def _sync_state_targets(check: s.SetCheck, observed: Observed) -> list[str]:
    return _set(check, observed.sync_state_targets, "sync_state targets")


def _save_answer(check: d.SaveAnswerCheck, observed: Observed) -> list[str]:
    return check_save_answer(check, observed.results)


def _enroll_hint(check: d.EnrollHintCheck, observed: Observed) -> list[str]:
    return check_enroll_hint(check, observed.results)


def _cloud_status(check: d.CloudStatusCheck, observed: Observed) -> list[str]:
    return check_cloud_status(check, observed.results)


def _doctor_check(check: d.DoctorVerdictCheck, observed: Observed) -> list[str]:
    return check_doctor_verdict(check, observed.results)


def _inbox_row(check: d.InboxRowCheck, observed: Observed) -> list[str]:
    return check_inbox_row(check, observed.results, observed.db_path)


CheckT = TypeVar("CheckT", bound=BaseModel, contravariant=True)
ModelT = TypeVar("ModelT", bound=BaseModel)


class Evaluator(Protocol[CheckT]):
    """Judges one check of its kind against what the scenario observed: the problems found."""

    def __call__(self, check: CheckT, observed: Observed, /) -> list[str]: ...


@dataclass(frozen=True)
class Judge:
    model: type[BaseModel]
    evaluate: Evaluator[Any]

    def __call__(self, check: BaseModel, observed: Observed) -> list[str]:
        return self.evaluate(check, observed)


def _triage_copies(check: s.TriageCopiesCheck, observed: Observed) -> list[str]:
    if observed.db_path is None:
        raise LookupError("no database to read (the scenario did not get that far)")
    entries = read_triage_entries(observed.db_path)
    triaged = {int(seq) for entry in entries for seq in entry.get("acked_seqs") or ()}
    found = copy_problems(read_local_mutations(observed.db_path), entries, triaged)
    shown = {
        "refused": [f"seq {seq} ({reason})" for seq, reason in found.refused],
        "missing": [
            f"seq {row.seq} ({row.entity} {row.entity_key}, copy for {project!r})"
            for row, project in found.missing
        ],
        "without_session": [
            f"seq {seq} (session {session!r}, project {project!r})"
            for seq, session, project in found.without_session
        ],
    }
    return [
        f"triage copies {name}: expected {getattr(check, name)}, got {len(items)}: {', '.join(items[:5])}"
        for name, items in shown.items()
        if len(items) != getattr(check, name)
    ]


def judge(model: type[ModelT], evaluate: Evaluator[ModelT]) -> Judge:
    """One entry of EVALUATORS: mypy checks that `evaluate` takes the check model of its kind."""
    return Judge(model, evaluate)


#: kind -> the judge of its check: one entry per expectation model (tests/harness/test_typed_seams.py)
EVALUATORS: dict[str, Judge] = {
    "lanes": judge(s.LanesCheck, _lanes),
    "lost": judge(s.LostCheck, _lost),
    "answer": judge(s.AnswerCheck, _answer),
    "sync_state_targets": judge(s.SetCheck, _sync_state_targets),
    "canary": judge(s.CanaryCheck, _canary),
    "inbox": judge(s.InboxCheck, _inbox),
    "doctor": judge(s.DoctorCheck, _doctor),
    "stderr": judge(s.TextCheck, _text),
    "command": judge(s.CommandCheck, _command),
    "received": judge(s.ReceivedCheck, _received),
    "journal": judge(s.JournalCheck, _journal),
    "sync_state": judge(s.SyncStateCheck, _sync_state),
    "local": judge(s.LocalCheck, _local),
    "save_answer": judge(d.SaveAnswerCheck, _save_answer),
    "enroll_hint": judge(d.EnrollHintCheck, _enroll_hint),
    "cloud_status": judge(d.CloudStatusCheck, _cloud_status),
    "doctor_check": judge(d.DoctorVerdictCheck, _doctor_check),
    "inbox_row": judge(d.InboxRowCheck, _inbox_row),
    "triage_copies": judge(s.TriageCopiesCheck, _triage_copies),
}


def evaluate(expectation: s.ExpectationBase, observed: Observed) -> tuple[str, str]:
    if (
        expectation.tag == "baseline"
        and expectation.engram
        and not in_range(observed.version, expectation.engram)
    ):
        return "n/a", f"engram {observed.version} is outside {expectation.engram}"
    try:
        problems = EVALUATORS[expectation.kind](expectation.check, observed)
    except LookupError as error:
        problems = [str(error)]
    return ("fail", "; ".join(problems)) if problems else ("pass", "")
