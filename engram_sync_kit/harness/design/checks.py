"""Parsers of the design's quoted outputs and the checks on them (issue 14).

The shapes, as the design (engram issue #1013, §2a, §2c, §3) quotes them:

    warning: saved to inbox: "<key>" (cwd <path>) is not enrolled — will not sync to cloud.
    To enroll it: engram cloud enroll <project>

    inbox: 214 memories in 9 unenrolled keys (oldest non-unsorted: 81 days)

    ok: "<repo-name>" enrolled.
    -> 16 memories of "<repo-name>" waiting in the inbox.
       Claim: engram cloud inbox claim --project <repo-name> --as <repo-name>

and for MCP "structured field routed_to: "inbox" + project_key". No engram release prints them yet
(v1.20.0 has none; upstream slices 3-4 are not merged), so the parsers are unit-tested against these
quotes, and v1.20 proves the steps around them (its save answer, `cloud status`, enroll, doctor).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_sync_kit.harness.design import schema as d
from engram_sync_kit.harness.engram.read import read_engram
from engram_sync_kit.harness.scenario.step_results import (
    CommandOutput,
    DoctorResult,
    SaveResult,
    StatusInboxLine,
    StepResults,
    save_result_name,
)

_WARNING = re.compile(
    r'warning: saved to inbox: "(?P<key>[^"]*)" \(cwd (?P<cwd>.*)\) is not enrolled\s*(?:—|--|-)\s*'
    r"will not sync to cloud\.?"
)
_ENROLL_TIP = re.compile(r"To enroll it: engram cloud enroll (?P<project>\S+)")
_STATUS_LINE = re.compile(
    r"^\s*inbox: (?P<memories>\d+) memor(?:y|ies) in (?P<keys>\d+) unenrolled keys?"
    r"(?: \(oldest non-unsorted: (?P<days>\d+) days?\))?\s*$",
    re.MULTILINE,
)
_WAITING = re.compile(r'->\s*(?P<count>\d+) memor(?:y|ies) of "(?P<project>[^"]*)" waiting in the inbox\.?')
_CLAIM = re.compile(
    r"Claim:\s*(?P<command>engram cloud inbox claim --project (?P<project>\S+)(?: --as (?P<claim_as>\S+))?)"
)


@dataclass(frozen=True)
class SaveWarning:
    key: str
    cwd: str
    enroll_project: str | None


@dataclass(frozen=True)
class EnrollHint:
    waiting: int
    project: str
    claim_command: str | None
    claim_as: str | None


def parse_save_warning(text: str) -> SaveWarning | None:
    match = _WARNING.search(text)
    if match is None:
        return None
    tip = _ENROLL_TIP.search(text, match.end())
    return SaveWarning(match["key"], match["cwd"], tip["project"] if tip else None)


def parse_status_inbox_line(text: str) -> StatusInboxLine | None:
    match = _STATUS_LINE.search(text)
    if match is None:
        return None
    days = match["days"]
    return StatusInboxLine(int(match["memories"]), int(match["keys"]), int(days) if days else None)


def parse_enroll_hint(text: str) -> EnrollHint | None:
    waiting = _WAITING.search(text)
    if waiting is None:
        return None
    claim = _CLAIM.search(text, waiting.end())
    return EnrollHint(
        int(waiting["count"]),
        waiting["project"],
        claim["command"] if claim else None,
        claim["claim_as"] if claim else None,
    )


def _answer_warning_text(answer: Any) -> str:
    """Every place an MCP answer could carry the warning: a warning field, or the result text."""
    if not isinstance(answer, Mapping):
        return ""
    parts = [answer.get(key) for key in ("warning", "warnings", "result", "message")]
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, list):
            texts += [str(item) for item in part]
    return "\n".join(texts)


def _same(have: Any, want: d.MatchValue) -> bool:
    if want is None:
        return have is None or have == ""
    if isinstance(want, bool) or isinstance(have, bool):
        return str(have).lower() == str(want).lower()
    return str(have) == str(want)


def _saved(results: StepResults, label: str) -> SaveResult:
    return results.get(label, SaveResult, "save", key=save_result_name(label))


def check_save_answer(check: d.SaveAnswerCheck, results: StepResults) -> list[str]:
    saved = _saved(results, check.of)
    via = saved.via
    answer = saved.answer if isinstance(saved.answer, Mapping) else {}
    shown = ", ".join(sorted(answer)) or "none"
    problems: list[str] = []
    wanted = {**check.fields}
    if check.routed_to is not None:
        wanted["routed_to"] = check.routed_to
    if check.project_key is not None:
        wanted["project_key"] = check.project_key
    if wanted and via == "cli":
        problems.append(f"save {check.of} ran via cli: answer fields are an MCP/HTTP matter")
    for name, value in wanted.items():
        if name not in answer:
            problems.append(f"save {check.of}: the answer has no {name} (fields: {shown})")
        elif not _same(answer[name], value):
            problems.append(f"save {check.of}: {name} is {answer[name]!r}, expected {value!r}")
    problems += [
        f"save {check.of}: the answer has {name} = {answer[name]!r}, expected none"
        for name in check.absent_fields
        if name in answer
    ]
    text = saved.stderr if via == "cli" else _answer_warning_text(answer)
    where = "stderr" if via == "cli" else "answer"
    warning = parse_save_warning(text)
    if check.warning is not None and (warning is not None) != check.warning:
        problems.append(
            f"save {check.of}: expected {'an' if check.warning else 'no'} inbox warning in its {where}, "
            f"got {'one' if warning else 'none'}"
        )
    if (check.warning_key is not None or check.warning_cwd) and warning is None:
        problems.append(f'save {check.of}: no `warning: saved to inbox: "<key>" (cwd <path>)` in its {where}')
    elif warning is not None:
        if check.warning_key is not None and warning.key != check.warning_key:
            problems.append(
                f"save {check.of}: the warning names key {warning.key!r}, expected {check.warning_key!r}"
            )
        if check.warning_cwd and warning.cwd != saved.cwd:
            problems.append(f"save {check.of}: the warning names cwd {warning.cwd!r}, expected {saved.cwd!r}")
    stderr = saved.stderr
    if (check.stderr_contains or check.stderr_not_contains) and via != "cli":
        problems.append(f"save {check.of} ran via {via}: only a cli save has a stderr of its own")
    problems += [f"save {check.of}: stderr lacks {t!r}" for t in check.stderr_contains if t not in stderr]
    problems += [f"save {check.of}: stderr has {t!r}" for t in check.stderr_not_contains if t in stderr]
    return problems


def check_enroll_hint(check: d.EnrollHintCheck, results: StepResults) -> list[str]:
    enrolled = results.get(check.of, CommandOutput, "enroll")  # `enroll`, or `run: [cloud, enroll, P]`
    hint = parse_enroll_hint(enrolled.stdout + "\n" + enrolled.stderr)
    said = enrolled.stdout.strip()[:200]
    if not check.hint:
        return [] if hint is None else [f"enroll {check.of}: unexpected inbox hint ({hint.waiting} waiting)"]
    if hint is None:
        return [
            f'enroll {check.of}: no `-> N memories of "P" waiting in the inbox.` line (printed: {said!r})'
        ]
    problems: list[str] = []
    if check.waiting is not None and hint.waiting != check.waiting:
        problems.append(f"enroll {check.of}: {hint.waiting} memories waiting, expected {check.waiting}")
    if hint.claim_command is None:
        problems.append(f"enroll {check.of}: no `Claim: engram cloud inbox claim --project ...` suggestion")
    elif check.claim_as is not None and hint.claim_as != check.claim_as:
        problems.append(
            f"enroll {check.of}: the claim suggests --as {hint.claim_as!r}, expected {check.claim_as!r}"
        )
    return problems


def check_cloud_status(check: d.CloudStatusCheck, results: StepResults) -> list[str]:
    status = results.get(check.of, CommandOutput, "cloud_status")  # or `run: [cloud, status]`
    line = parse_status_inbox_line(status.stdout)
    printed = " | ".join(status.stdout.strip().splitlines())[:200]
    if check.inbox_line is False:
        return [] if line is None else [f"cloud status: unexpected inbox line ({line.memories} memories)"]
    wants_line = check.inbox_line or any(
        value is not None for value in (check.memories, check.keys, check.oldest_days_at_least)
    )
    if not wants_line:
        return []
    if line is None:
        return [
            f"cloud status printed no `inbox: N memories in K unenrolled keys` line (printed: {printed!r})"
        ]
    problems: list[str] = []
    if check.memories is not None and line.memories != check.memories:
        problems.append(f"cloud status inbox: {line.memories} memories, expected {check.memories}")
    if check.keys is not None and line.keys != check.keys:
        problems.append(f"cloud status inbox: {line.keys} keys, expected {check.keys}")
    if check.oldest_days_at_least is not None and (line.oldest_days or 0) < check.oldest_days_at_least:
        problems.append(
            f"cloud status inbox: oldest non-unsorted {line.oldest_days} days, "
            f"expected at least {check.oldest_days_at_least}"
        )
    return problems


def check_doctor_verdict(check: d.DoctorVerdictCheck, results: StepResults) -> list[str]:
    doctor = results.get(check.of, DoctorResult, "doctor")
    report, checks = doctor.report, doctor.checks
    found = next((c for c in checks if c.get("check_id") == check.check), None)
    ids = sorted(str(c.get("check_id")) for c in checks)
    problems: list[str] = []
    if check.status_not and report.get("status") in check.status_not:
        problems.append(f"doctor status is {report.get('status')!r}, expected none of {check.status_not}")
    if not check.present:
        return problems + ([f"doctor: unexpected check {check.check!r}"] if found is not None else [])
    if found is None:
        return [*problems, f"doctor has no {check.check} check (checks: {', '.join(ids) or 'none'})"]
    for name in ("result", "severity", "reason_code"):
        expected = getattr(check, name)
        if expected is not None and found.get(name) != expected:
            problems.append(f"doctor {check.check} {name}: {found.get(name)!r}, expected {expected!r}")
    if found.get("result") in check.result_not:
        problems.append(
            f"doctor {check.check} result: {found.get('result')!r}, expected none of {check.result_not}"
        )
    detail = json.dumps({k: found.get(k) for k in ("message", "evidence", "why")}, ensure_ascii=False)
    problems += [
        f"doctor {check.check}: its detail does not name {key!r}"
        for key in check.mentions
        if key not in detail
    ]
    problems += [
        f"doctor {check.check}: its detail names {key!r}" for key in check.not_mentions if key in detail
    ]
    return problems


def check_inbox_row(check: d.InboxRowCheck, results: StepResults, db_path: Path | None) -> list[str]:
    saved = _saved(results, check.of)
    if db_path is None:
        raise LookupError("no database to read (the scenario did not get that far)")
    sync_id = saved.sync_id
    rows = read_engram(
        db_path,
        lambda connection: connection.execute(
            "SELECT target_key, project, payload, acked_at FROM sync_mutations "
            "WHERE entity = 'observation' AND entity_key = ? ORDER BY seq",
            (sync_id,),
        ).fetchall(),
    )
    if not rows:
        return [f"save {check.of}: no observation rows for {sync_id} in sync_mutations"]
    on_target = [row for row in rows if row[0] == check.target]
    if not on_target:
        lanes = sorted({f"{row[0]}/{row[1] or chr(34) * 2}" for row in rows})
        return [f"save {check.of}: no row on {check.target} (its rows: {', '.join(lanes)})"]
    problems: list[str] = []
    for target, project, payload_text, acked_at in on_target:
        try:
            payload = json.loads(payload_text)
        except json.JSONDecodeError:
            problems.append(f"save {check.of}: a payload on {target} is not JSON")
            continue
        if check.key is not None and project != check.key:
            problems.append(
                f"save {check.of} on {target}: key (project column) {project!r}, expected {check.key!r}"
            )
        if check.payload_project is not None and payload.get("project") != check.payload_project:
            problems.append(
                f"save {check.of} on {target}: payload project {payload.get('project')!r}, "
                f"expected the raw {check.payload_project!r}"
            )
        if check.payload_cwd and payload.get("cwd") != saved.cwd:
            problems.append(
                f"save {check.of} on {target}: payload cwd {payload.get('cwd')!r}, expected {saved.cwd!r}"
            )
        if check.acked is not None and (acked_at is not None) != check.acked:
            problems.append(
                f"save {check.of} on {target}: acked_at {acked_at!r}, expected {'set' if check.acked else 'none'}"
            )
    return problems
