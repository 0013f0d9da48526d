"""The design's user-visible surfaces (issue 14): parsers and checks against the shapes the design
quotes (no engram release prints them yet: these tests are the proof that a check reads them and can
fail), and the loader's one-line refusals of the new steps and checks."""

from __future__ import annotations

import json
import sqlite3
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from engram_sync_kit.harness.design.checks import (
    check_cloud_status,
    check_doctor_verdict,
    check_enroll_hint,
    check_inbox_row,
    check_save_answer,
    parse_enroll_hint,
    parse_save_warning,
    parse_status_inbox_line,
)
from engram_sync_kit.harness.design.schema import (
    CloudStatusCheck,
    DoctorVerdictCheck,
    EnrollHintCheck,
    InboxRowCheck,
    SaveAnswerCheck,
)
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.step_results import (
    CloudStatusResult,
    CommandOutput,
    DoctorResult,
    EnrollResult,
    SaveResult,
    StepResults,
)

# Quoted from the design (../shared/seed, §2a, §2c, §3), with its placeholders filled in.
CLI_WARNING = (
    'warning: saved to inbox: "scratchpad" (cwd /home/me/scratch pad) is not enrolled — will not sync to cloud.\n'
    "To enroll it: engram cloud enroll scratchpad\n"
)
STATUS_LINE = "inbox: 214 memories in 9 unenrolled keys (oldest non-unsorted: 81 days)"
ENROLL_OUTPUT = (
    'ok: "my-app" enrolled.\n'
    '-> 16 memories of "my-app" waiting in the inbox.\n'
    "   Claim: engram cloud inbox claim --project my-app --as my-app\n"
)
# engram v1.20.0's real answers, for the negative side (captured from the binary).
V120_MCP_ANSWER = {
    "id": 1,
    "judgment_required": False,
    "project": "scratchpad",
    "project_path": "/home/me/scratch pad",
    "project_source": "dir_basename",
    "result": 'Memory saved: "t" (manual)\nSuggested topic_key: topic/t',
    "state": "active",
    "sync_id": "obs-0ca956d30d815a64",
}
V120_ENROLL = '✓ Project "my-app" enrolled for cloud sync\n'
V120_STATUS = "Cloud status: not configured\n"


def test_the_cli_warning_parses_key_cwd_and_the_enroll_tip() -> None:
    warning = parse_save_warning(CLI_WARNING)
    assert warning is not None
    assert (warning.key, warning.cwd, warning.enroll_project) == (
        "scratchpad",
        "/home/me/scratch pad",
        "scratchpad",
    )
    assert parse_save_warning(CLI_WARNING.replace("—", "-")) is not None  # an ASCII terminal's dash
    assert parse_save_warning('Memory saved: #3 "t" (manual)\n') is None
    assert parse_save_warning(CLI_WARNING.replace("is not enrolled", "is enrolled")) is None


def test_the_status_line_parses_and_an_unsorted_only_inbox_has_no_oldest() -> None:
    line = parse_status_inbox_line(f"Cloud status: configured\n{STATUS_LINE}\n")
    assert line is not None and (line.memories, line.keys, line.oldest_days) == (214, 9, 81)
    only_unsorted = parse_status_inbox_line("inbox: 1 memory in 1 unenrolled key")
    assert only_unsorted is not None and only_unsorted.oldest_days is None
    assert parse_status_inbox_line(V120_STATUS) is None
    assert parse_status_inbox_line("the inbox: 3 memories in 1 unenrolled key") is None  # a line of its own


def test_the_enroll_hint_parses_count_and_claim() -> None:
    hint = parse_enroll_hint(ENROLL_OUTPUT)
    assert hint is not None
    assert (hint.waiting, hint.project, hint.claim_as) == (16, "my-app", "my-app")
    assert hint.claim_command == "engram cloud inbox claim --project my-app --as my-app"
    assert parse_enroll_hint(V120_ENROLL) is None


def saved(via: str, answer: dict[str, Any] | None = None, stderr: str = "", stdout: str = "") -> StepResults:
    printed = CommandOutput(0, stdout, stderr) if via == "cli" else None
    return StepResults({"save:s": SaveResult(via, "/home/me/scratch pad", answer, printed)})


def test_save_answer_routed_to_and_warning_pass_on_the_design_shape_and_fail_on_v120() -> None:
    design_answer = {
        **V120_MCP_ANSWER,
        "routed_to": "inbox",
        "project_key": "scratchpad",
        "warning": CLI_WARNING,
    }
    check = SaveAnswerCheck(
        of="s", routed_to="inbox", project_key="scratchpad", warning=True, warning_key="scratchpad",
        warning_cwd=True,
    )  # fmt: skip
    assert check_save_answer(check, saved("mcp", answer=design_answer)) == []
    problems = check_save_answer(check, saved("mcp", answer=V120_MCP_ANSWER))
    assert problems[0] == (
        "save s: the answer has no routed_to (fields: id, judgment_required, project, project_path, "
        "project_source, result, state, sync_id)"
    )
    assert "save s: expected an inbox warning in its answer, got none" in problems
    assert (
        check_save_answer(
            SaveAnswerCheck(of="s", fields={"project_source": "dir_basename"}),
            saved("mcp", answer=V120_MCP_ANSWER),
        )
        == []
    )
    wrong_cwd = {**design_answer, "warning": CLI_WARNING.replace("scratch pad", "elsewhere")}
    assert check_save_answer(check, saved("mcp", answer=wrong_cwd)) == [
        "save s: the warning names cwd '/home/me/elsewhere', expected '/home/me/scratch pad'"
    ]


def test_save_answer_reads_the_cli_stderr() -> None:
    check = SaveAnswerCheck(of="s", warning=True, warning_key="scratchpad", stderr_contains=["To enroll it:"])
    assert check_save_answer(check, saved("cli", stderr=CLI_WARNING, stdout="Memory saved: #3")) == []
    assert check_save_answer(check, saved("cli", stderr="", stdout="Memory saved: #3")) == [
        "save s: expected an inbox warning in its stderr, got none",
        'save s: no `warning: saved to inbox: "<key>" (cwd <path>)` in its stderr',
        "save s: stderr lacks 'To enroll it:'",
    ]
    with pytest.raises(LookupError, match="no save result named 'other'"):
        check_save_answer(SaveAnswerCheck(of="other"), saved("cli"))


def test_enroll_hint_check() -> None:
    results = StepResults({"e": EnrollResult(0, ENROLL_OUTPUT, "")})
    assert check_enroll_hint(EnrollHintCheck(of="e", waiting=16, claim_as="my-app"), results) == []
    assert check_enroll_hint(EnrollHintCheck(of="e", waiting=3), results) == [
        "enroll e: 16 memories waiting, expected 3"
    ]
    v120 = StepResults({"e": EnrollResult(0, V120_ENROLL, "")})
    assert check_enroll_hint(EnrollHintCheck(of="e", hint=False), v120) == []
    assert check_enroll_hint(EnrollHintCheck(of="e", waiting=16), v120) == [
        'enroll e: no `-> N memories of "P" waiting in the inbox.` line (printed: \'✓ Project "my-app" '
        "enrolled for cloud sync')"
    ]


def test_cloud_status_check() -> None:
    results = StepResults({"status": CloudStatusResult(0, STATUS_LINE, "")})
    assert check_cloud_status(CloudStatusCheck(memories=214, keys=9, oldest_days_at_least=7), results) == []
    assert check_cloud_status(CloudStatusCheck(inbox_line=False), results) == [
        "cloud status: unexpected inbox line (214 memories)"
    ]
    assert check_cloud_status(
        CloudStatusCheck(inbox_line=True), StepResults({"status": CloudStatusResult(0, V120_STATUS, "")})
    ) == [
        "cloud status printed no `inbox: N memories in K unenrolled keys` line (printed: 'Cloud status: not "
        "configured')"
    ]


def doctor(*checks: dict[str, Any], status: str = "warning") -> StepResults:
    return StepResults({"doctor": DoctorResult({"status": status, "checks": list(checks)})})


INBOX_DEPTH = {
    "check_id": "inbox_depth",
    "result": "warning",
    "severity": "warning",
    "message": 'inbox key "old-key" has waited 8 days; unsorted grew by 101 rows in 7 days',
    "evidence": {"keys": [{"key": "old-key", "oldest_days": 8}], "unsorted_growth_7d": 101},
}


def test_doctor_verdict_reads_result_severity_and_per_key_detail() -> None:
    check = DoctorVerdictCheck(
        check="inbox_depth", result="warning", result_not=["blocked"], severity="warning",
        mentions=["old-key"], not_mentions=["fresh-key"], status_not=["blocked"],
    )  # fmt: skip
    assert check_doctor_verdict(check, doctor(INBOX_DEPTH)) == []
    rc6_like = {**INBOX_DEPTH, "result": "blocked", "severity": "blocking"}
    assert check_doctor_verdict(check, doctor(rc6_like, status="blocked")) == [
        "doctor status is 'blocked', expected none of ['blocked']",
        "doctor inbox_depth result: 'blocked', expected 'warning'",
        "doctor inbox_depth severity: 'blocking', expected 'warning'",
        "doctor inbox_depth result: 'blocked', expected none of ['blocked']",
    ]
    v120 = doctor(
        {"check_id": "sync_mutation_required_fields", "result": "ok", "severity": "info"}, status="ok"
    )
    assert check_doctor_verdict(check, v120) == [
        "doctor has no inbox_depth check (checks: sync_mutation_required_fields)"
    ]
    assert check_doctor_verdict(DoctorVerdictCheck(check="inbox_depth", present=False), v120) == []


def scenario_text(step: str, check: str) -> str:
    return f"""\
name: s
workspaces:
  app: {{git: my-app}}
steps:
  - {step}
expect:
  - tag: design
    design_section: "§3"
    {check}
"""


@pytest.mark.parametrize(
    ("step", "check", "error"),
    [
        (
            "engram_inbox: {action: claim}",
            "command: {of: engram_inbox}",
            "steps.0.engram_inbox: engram_inbox claim needs project",
        ),
        (
            "engram_inbox: {action: list, noise: true}",
            "command: {of: engram_inbox}",
            "noise is only for action drop",
        ),
        ("engram_inbox: {action: drop, project: k, cwd: nowhere}", "command: {of: engram_inbox}", "nowhere"),
        (
            "cloud_status: {as: st}",
            "cloud_status: {of: st, colour: 1}",
            "expect.0.cloud_status.colour: unknown key",
        ),
        ("enroll: {project: x, as: e}", "enroll_hint: {of: e, waiting: -1}", "expect.0.enroll_hint.waiting"),
        (
            "doctor: {}",
            "doctor_check: {check: inbox_depth, present: false, result: ok}",
            "present: false cannot",
        ),
    ],
)
def test_new_steps_and_checks_refuse_bad_input_in_one_line(
    step: str, check: str, error: str, tmp_path: Path
) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(scenario_text(step, check), tmp_path / "s.scenario.yaml")
    assert error in str(refused.value) and "\n" not in str(refused.value)


def journal_db(tmp_path: Path, *rows: tuple[str, str, str, str | None]) -> Path:
    """A sync_mutations table of the design's shape (engram's own columns), for the inbox_row reader,
    beside the sync_state table that makes the file engram's to the harness's reader (EngramDb)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "engram.db"
    connection = sqlite3.connect(db)
    connection.execute("CREATE TABLE sync_state (target_key TEXT PRIMARY KEY)")
    connection.execute(
        "CREATE TABLE sync_mutations (seq INTEGER PRIMARY KEY, target_key TEXT, entity TEXT, entity_key TEXT, "
        "op TEXT, payload TEXT, project TEXT, acked_at TEXT)"
    )
    for target, project, payload, acked_at in rows:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project, acked_at) "
            "VALUES (?, 'observation', 'obs-1', 'upsert', ?, ?, ?)",
            (target, payload, project, acked_at),
        )
    connection.commit()
    connection.close()
    return db


CWD = "/home/me/código/Client Portal"  # NFC


def test_inbox_row_keeps_the_raw_project_and_cwd_byte_for_byte(tmp_path: Path) -> None:
    results = StepResults({"save:p": SaveResult("mcp", CWD, sync_id="obs-1")})
    raw = json.dumps({"project": "Client_Portal", "cwd": CWD})
    db = journal_db(tmp_path, ("cloud:inbox", "client-portal", raw, None))
    check = InboxRowCheck(of="p", key="client-portal", payload_project="Client_Portal")
    assert check_inbox_row(check, results, db) == []
    assert check_inbox_row(InboxRowCheck(of="p", acked=True), results, db) == [
        "save p on cloud:inbox: acked_at None, expected set"
    ]
    nfd = unicodedata.normalize("NFD", CWD)
    slugged = json.dumps({"project": "client-portal", "cwd": nfd})
    lossy = journal_db(tmp_path / "lossy", ("cloud:inbox", "client-portal", slugged, None))
    assert check_inbox_row(check, results, lossy) == [
        "save p on cloud:inbox: payload project 'client-portal', expected the raw 'Client_Portal'",
        f"save p on cloud:inbox: payload cwd {nfd!r}, expected {CWD!r}",
    ]
    legacy = journal_db(tmp_path / "legacy", ("cloud", "client_portal", raw, None))
    assert check_inbox_row(check, results, legacy) == [
        "save p: no row on cloud:inbox (its rows: cloud/client_portal)"
    ]
