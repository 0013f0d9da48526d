"""validate without engram: the plan file, the suggested plan, the schema diff, the renderings, --anonymize
and the command's one-line errors. The report used here is tests/harness/data/validate-report.json, an
anonymized report of a real run (see test_validate_html.py)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from engram_sync_kit.canary.inbox.selection import KeySummary
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.lanes import LocalMutation
from engram_sync_kit.harness.validate import cli as validate_cli
from engram_sync_kit.harness.validate.anonymize import anonymized, stable_hash
from engram_sync_kit.harness.validate.model import (
    Blocker,
    CanarySnapshot,
    Effect,
    LaneHealth,
    LaneRow,
    LanesHealth,
    Migrations,
    Refusal,
    Run,
    StuckRow,
    Tick,
    ValidateReport,
    WhatIf,
    as_report,
)
from engram_sync_kit.harness.validate.report import render_html, render_markdown
from engram_sync_kit.harness.validate.run import (
    PUSH_PATH,
    SchemaSnapshot,
    ValidateError,
    ValidateOptions,
    _name_the_testers_file,
    blocked_proof,
    parse_plan,
    refused_projects,
    refused_rows,
    schema_diff,
    suggested_plan,
)
from engram_sync_kit.harness.validate.stuck import runnable_commands, stuck_rows

KEY = b"\x00" * 32
DATA = Path(__file__).parent / "data" / "validate-report.json"


@pytest.fixture
def report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return loaded


# ─── the plan ────────────────────────────────────────────────────────────────


def test_plan_lines_with_or_without_the_program_name_comments_and_quotes() -> None:
    steps = parse_plan(
        "# triage\n\nengram-canary inbox drop --project unsorted --noise\n"
        "inbox claim --project 'lm studio' --as my-app  # renamed folder\n"
    )
    assert [(step.line, step.args) for step in steps] == [
        (3, ("inbox", "drop", "--project", "unsorted", "--noise")),
        (4, ("inbox", "claim", "--project", "lm studio", "--as", "my-app")),
    ]
    assert steps[1].text == "engram-canary inbox claim --project 'lm studio' --as my-app"


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            "rm -rf /",
            "plan.txt:2: only `inbox claim`, `inbox drop` and `repair` lines are allowed, got 'rm -rf /'",
        ),
        (
            "engram-canary cleanup-phantoms --apply",
            "plan.txt:2: only `inbox claim`, `inbox drop` and `repair`",
        ),
        (
            "inbox claim --project x --as y --db /home/me/.engram/engram.db",
            "plan.txt:2: --db is set by validate",
        ),
        ("inbox drop --project x --apply", "plan.txt:2: --apply is set by validate"),
        ("inbox drop --project x --backup-dir=/tmp", "plan.txt:2: --backup-dir is set by validate"),
        ("inbox claim --project 'unclosed", "plan.txt:2: cannot parse (No closing quotation)"),
    ],
)
def test_a_bad_plan_line_is_one_error_with_file_and_line(line: str, error: str) -> None:
    with pytest.raises(ValidateError) as raised:
        parse_plan(f"inbox drop --project unsorted --noise\n{line}\n", "plan.txt")
    assert str(raised.value).startswith(error)


def test_suggested_plan_drops_every_keys_noise_then_claims_what_inbox_list_can_claim() -> None:
    summaries = [
        KeySummary(
            key="agent-memory",
            count=3,
            telemetry=2,
            claim_command="engram-canary inbox claim --project agent-memory --as agent-memory",
        ),
        KeySummary(key="noise-only", count=0, telemetry=5),
        KeySummary(key="future", count=4, telemetry=0, hint="not enrolled"),
        KeySummary(
            key="unsorted",
            count=2,
            telemetry=9,
            cwd_claim_commands={
                "/home/ana/scratch": "engram-canary inbox claim --project unsorted --cwd /home/ana/scratch --as p"
            },
        ),
    ]
    assert [step.text for step in suggested_plan(summaries)] == [
        "engram-canary inbox drop --project agent-memory --noise",
        "engram-canary inbox drop --project noise-only --noise",
        "engram-canary inbox drop --project unsorted --noise",
        "engram-canary inbox claim --project agent-memory --as agent-memory",
        "engram-canary inbox claim --project unsorted --cwd /home/ana/scratch --as p",
    ]


def test_schema_diff_names_new_tables_columns_and_changed_objects() -> None:
    before = SchemaSnapshot(
        user_version=0,
        objects={"table a": "CREATE TABLE a (x)", "index i": "CREATE INDEX i ON a (x)"},
        columns={"a": ["x"]},
    )
    after = SchemaSnapshot(
        user_version=2,
        objects={"table a": "CREATE TABLE a (x, y)", "table b": "CREATE TABLE b (z)"},
        columns={"a": ["x", "y"], "b": ["z"]},
    )
    assert schema_diff(before, after) == Migrations(
        user_version=[0, 2],
        added=["table b"],
        dropped=["index i"],
        changed=["table a"],
        added_columns={"a": ["y"]},
    )


# ─── refusals ────────────────────────────────────────────────────────────────


def _push(project: str | None, status: int, key: str) -> SimpleNamespace:
    return SimpleNamespace(
        path=PUSH_PATH,
        status=status,
        project=project,
        entity="observation",
        entity_key=key,
        op="upsert",
        payload_digest="d",
    )


def test_a_refused_row_without_a_project_keeps_the_servers_reason() -> None:
    # engram v1.20 journals `engram save` without --project as project ''; the journal has no project.
    pushes = [_push(None, 400, "a"), _push(None, 400, "b"), _push("app", 200, "c")]
    assert refused_projects(pushes) == [""]
    reason = 'push: transport push project "": cloud: mutation push: status 400: mutation entries must specify a project'
    ticks = [Tick(tick=1, seconds=30.0, refused_projects=refused_projects(pushes), last_error=reason)]
    refused = refused_rows([*pushes, _push(None, 400, "a")], ticks)
    assert refused.by_project == [
        Refusal(project="", rows=2, attempts=3, statuses={"400": 3}, reasons=[reason])
    ]
    # Two byte-identical local rows (two saves' session rows) refused as one mutation are two rows.
    twin = LocalMutation(7, "cloud", "", "observation", "a", "upsert", "d", acked=False)
    local = [
        twin,
        replace(twin, seq=8),
        replace(twin, seq=9, entity_key="b"),
        replace(twin, seq=10, acked=True),
    ]
    assert refused_rows(pushes, ticks, local).by_project[0].rows == 3


# ─── the renderings ──────────────────────────────────────────────────────────


def test_markdown_is_short_and_pins_the_verdicts(report: dict[str, Any]) -> None:
    text = render_markdown(as_report(report))
    assert len(text.splitlines()) < 75
    assert (
        "- Original untouched: yes; 10 sync rows; 1 worker tick(s), engram's worker degraded: push:" in text
    )
    assert "- Migrations applied by the binary: none (schema unchanged, user_version 0)." in text
    assert "| 0 | 0 | 6 | 4 | 0 | 0 |" in text
    assert "- Proof: holds (ok: nothing blocked after the plan; " in text
    assert "| 500 | push: transport push project " in text and "session payload directory is required" in text
    # each reason once, with the projects it holds (issue 35 item 21)
    assert (
        "| cloud | refused: 400 mutation entries must specify a project | 2 | (no project) (2; seq 5, 6) |"
        in text
    )
    assert text.count("engram's worker stops its cycle at the first row the cloud refuses") == 1


def test_html_is_one_offline_file(report: dict[str, Any]) -> None:
    page = render_html(as_report(report))
    assert page.startswith("<!DOCTYPE html>")
    for forbidden in ("<script", "<link", "src=", "@import", "url("):
        assert forbidden not in page
    assert page.replace("http://www.w3.org/2000/svg", "").count("http") == 0


def test_html_escapes_names(report: dict[str, Any]) -> None:
    hostile = copy.deepcopy(report)
    hostile["current"]["lanes"][0]["project"] = "<script>alert(1)</script>"
    hostile["current"]["inbox_before"][0]["key"] = "x' onload='alert(1)"
    page = render_html(as_report(hostile))
    assert "<script>" not in page and "x' onload" not in page
    assert "&lt;script&gt;" in page


# ─── --anonymize ─────────────────────────────────────────────────────────────


def _named_report() -> dict[str, Any]:
    report: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    report.pop("anonymized", None)
    current = report["current"]
    current["lanes"][0].update(lane="cloud:Ana's App", project="Ana's App")
    current["inbox_before"][0].update(
        key="lm-studio",
        cwds={"/home/ana/código/LM Studio": 3},
        claim_command="engram-canary inbox claim --project lm-studio --as 'Ana'\"'\"'s App'",
    )
    current["refused"] = [
        {
            "project": "Ana's App",
            "rows": 2,
            "attempts": 3,
            "statuses": {"403": 3},
            "reasons": ['push: transport push project "Ana\'s App": status 403: forbidden'],
        }
    ]
    report["database"]["path"] = "/home/ana/.engram/engram.db"
    report["engram"]["binary"] = "/home/ana/go/bin/engram"
    return report


def hide(report: dict[str, Any], key: bytes = KEY) -> dict[str, Any]:
    """--anonymize of a report given as its JSON form, back in that form."""
    return anonymized(as_report(report), key).to_json()


def test_anonymize_hashes_names_everywhere_and_keeps_the_numbers() -> None:
    report = _named_report()
    hidden = hide(report)
    outputs = (
        json.dumps(hidden, ensure_ascii=False)
        + render_markdown(as_report(hidden))
        + render_html(as_report(hidden))
    )
    for secret in ("Ana", "lm-studio", "LM Studio", "código", "/home/ana"):
        assert secret not in outputs, secret
    lane = hidden["current"]["lanes"][0]
    assert lane["lane"] == "cloud:" + stable_hash("Ana's App", KEY) and lane["project"] == stable_hash(
        "Ana's App", KEY
    )
    app = stable_hash("Ana's App", KEY)
    assert hidden["current"]["refused"][0]["reasons"] == [
        f'push: transport push project "{app}": status 403: forbidden'
    ]
    assert hidden["current"]["totals"] == report["current"]["totals"]
    assert hidden["current"]["inbox_before"][0]["cwds"] == {stable_hash("/home/ana/código/LM Studio", KEY): 3}
    assert hide(report) == hidden  # the same key gives the same names
    other = hide(report, b"\x01" * 32)
    assert other["current"]["lanes"][0]["project"] != lane["project"]
    # salted: the plain sha256 of a name (what a brute-force search tries) is not its hash
    assert hashlib.sha256(b"Ana's App").hexdigest()[:12] not in json.dumps(hidden)


def test_anonymize_keeps_the_kits_own_words() -> None:
    report = _named_report()
    inbox = report["current"]["inbox_before"]
    inbox.append({**inbox[0], "key": "unsorted", "cwds": {}, "claim_command": None})
    hidden = hide(report)
    keys = {key["key"] for key in hidden["current"]["inbox_before"]}
    assert {"unsorted", "(no project)"} <= keys
    assert {row["lane"] for row in hidden["current"]["lanes"]} >= {"cloud"}


# ─── the command ─────────────────────────────────────────────────────────────


def test_cli_writes_json_html_and_markdown_from_one_report(
    report: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ValidateOptions] = []

    def fake_validate(options: ValidateOptions, progress: Any = None) -> ValidateReport:
        seen.append(options)
        return as_report(_named_report())

    monkeypatch.setattr(validate_cli, "validate", fake_validate)
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    args = [
        "validate",
        "--db",
        str(db),
        "--engram",
        str(binary),
        "--ticks",
        "3",
        "--allowed-projects",
        "a, b",
    ]
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    result = CliRunner(mix_stderr=False).invoke(
        cli, [*args, "--json", str(out_json), "--html", str(out_html), "--anonymize", "-q"]
    )
    assert result.exit_code == 0, result.output  # the sample's what-if plan holds its proof
    assert seen[0].ticks == 3 and seen[0].allowed_projects == ("a", "b") and seen[0].what_if
    written = json.loads(out_json.read_text())
    assert written["anonymized"] is True
    assert result.output == render_markdown(as_report(written))
    assert out_html.read_text() == render_html(as_report(written))
    assert "Ana" not in out_json.read_text() + out_html.read_text() + result.output


@pytest.mark.parametrize(
    ("extra", "message", "code"),
    [
        (["--ticks", "0"], "Error: Invalid value for '--ticks': 0 is not in the range 1<=x<=1000.", 3),
        (["--engram-version", "v1.20.0"], "Error: --engram and --engram-version are exclusive; give one", 3),
        (
            ["--json", "/no/such/dir/r.json"],
            "Error: --json /no/such/dir/r.json: no such directory /no/such/dir",
            3,
        ),
    ],
)
def test_cli_errors_are_one_line(tmp_path: Path, extra: list[str], message: str, code: int) -> None:
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    result = CliRunner().invoke(cli, ["validate", "--db", str(db), "--engram", str(binary), *extra])
    assert result.exit_code == code
    assert result.output.strip().splitlines()[-1] == f"{message} (see cli validate --help)"


def test_cli_bad_plan_and_missing_database_are_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("inbox claim --project x --as y --apply\n")
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")
    binary.chmod(0o755)
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    result = CliRunner().invoke(
        cli, ["validate", "--db", str(db), "--engram", str(binary), "--plan", str(plan), "-q"]
    )
    assert (result.exit_code, result.output.strip()) == (
        1,
        "Error: plan.txt:1: --apply is set by validate (it works on a copy)",
    )
    result = CliRunner().invoke(cli, ["validate", "--db", str(tmp_path / "nope.db"), "--engram", str(binary)])
    assert result.exit_code == 3 and "does not exist" in result.output.strip().splitlines()[-1]


def test_cli_not_an_engram_database_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    db.write_bytes(b"not sqlite at all" * 100)
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\necho 'engram 1.20.0'\n")
    binary.chmod(0o755)
    result = CliRunner().invoke(
        cli, ["validate", "--db", str(db), "--engram", str(binary), "--no-what-if", "-q"]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {db}: cannot copy"), result.output


def _fake_engram(tmp_path: Path, output: str = "engram 1.20.0") -> Path:
    binary = tmp_path / "engram"
    binary.write_text(f"#!/bin/sh\necho '{output}'\n")
    binary.chmod(0o755)
    return binary


def _one_line_error(tmp_path: Path, db: Path, *extra: str, binary: Path | None = None) -> str:
    engram = binary or _fake_engram(tmp_path)
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("")
    result = CliRunner().invoke(
        cli, ["validate", "--db", str(db), "--engram", str(engram), "--aliases", str(aliases), "-q", *extra]
    )
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


def test_a_sqlite_file_that_is_not_engrams_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with closing(sqlite3.connect(db)) as connection:
        connection.execute("CREATE TABLE notes (x)")
    assert _one_line_error(tmp_path, db).startswith("Error: ")
    assert "not an engram database with cloud sync (missing table" in _one_line_error(tmp_path, db)


def test_a_truncated_database_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    with closing(sqlite3.connect(db)) as connection:
        connection.execute("CREATE TABLE t (x)")
        connection.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 2000)
        connection.commit()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    assert _one_line_error(tmp_path, db).startswith(f"Error: --db {db}: ")


def test_a_plan_that_is_not_utf8_and_a_binary_that_is_not_engram_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    plan = tmp_path / "plan.txt"
    plan.write_bytes(b"inbox drop --project \xff\xfe\n")
    assert _one_line_error(tmp_path, db, "--plan", str(plan)).startswith(f"Error: --plan {plan}: cannot read")
    not_engram = _fake_engram(tmp_path, "hello")
    assert "printed no version" in _one_line_error(tmp_path, db, binary=not_engram)


def _lane(project: str, refused: int = 0, lane: str = "cloud", stranded: int = 0) -> LaneRow:
    return LaneRow(
        lane=lane,
        project=project,
        enqueued=1,
        acked_before_run=0,
        delivered=0,
        stranded=stranded,
        refused=refused,
        lost=0,
        duplicated=0,
    )


def _run(lanes: list[LaneRow], status: str = "ok", **update: Any) -> Run:
    """The sample's current run with these lanes and this canary verdict after it."""
    sample = as_report(json.loads(DATA.read_text(encoding="utf-8"))).current
    canary = CanarySnapshot(status=status, headline=status)
    return sample.model_copy(update={"lanes": lanes, "canary_after": canary, **update})


NOTHING_CLAIMED = Effect(still_waiting=0, delivered_in_run=0)


def test_a_project_named_slash_does_not_eat_the_kits_own_text() -> None:
    current = _run([_lane("/"), _lane("my-app")], lane_health=LanesHealth())
    what_if = _run(
        [_lane("/"), _lane("my-app", refused=1)],
        worker_pending_after=1,
        ended="stalled",
        lane_health=LanesHealth(),
    )
    proof = blocked_proof(current, what_if, NOTHING_CLAIMED)
    sample = as_report(json.loads(DATA.read_text(encoding="utf-8")))
    assert sample.what_if is not None
    what_if_part = WhatIf(plan_source="suggested", plan=[], effect=NOTHING_CLAIMED, run=what_if, proof=proof)
    report = sample.model_copy(update={"current": current, "what_if": what_if_part})
    hidden = anonymized(report, KEY)
    assert hidden.what_if is not None
    (refusals,) = (check for check in hidden.what_if.proof.checks if check.check == "no new refusals")
    assert refusals.detail == f"lane cloud project {stable_hash('my-app', KEY)}: 0 -> 1"


def test_claimed_copies_waiting_on_a_stalled_worker_fail_the_proof_but_not_at_the_tick_limit() -> None:
    lanes = [_lane("my-app")]
    current = _run(lanes)
    effect = Effect(still_waiting=5, delivered_in_run=0)

    def flowing(ended: str) -> bool:
        what_if = _run(lanes, worker_pending_after=5, ended=ended)
        (check,) = (
            c for c in blocked_proof(current, what_if, effect).checks if c.check.startswith("claimed")
        )
        return check.ok

    assert (flowing("stalled"), flowing("tick limit"), flowing("idle")) == (False, True, False)


def test_the_proof_says_blocked_whenever_a_blocker_remains_after_the_plan() -> None:
    """The plan dropped telemetry and delivered nothing; the row without a project still holds the lane."""
    lanes = [_lane("my-app")]
    current = _run(lanes, status="critical")
    blocker = Blocker(
        seq=7,
        project="",
        entity="observation",
        status=400,
        reason="400 mutation entries must specify a project",
        repairable=False,
    )
    health = LanesHealth(
        lanes=[
            LaneHealth(
                target_key="cloud", blocked=True, blockers=[blocker], lifecycle="degraded", last_error="x"
            )
        ],
        enrolled=["my-app"],
    )
    what_if = _run(lanes, status="critical", worker_pending_after=19, ended="stalled", lane_health=health)
    proof = blocked_proof(current, what_if, NOTHING_CLAIMED)
    (blocked,) = (check for check in proof.checks if check.check == "nothing blocked after the plan")
    assert blocked.model_dump() == {
        "check": "nothing blocked after the plan",
        "ok": False,
        "detail": "lane cloud: seq 7 ((no project): 400 mutation entries must specify a project)",
    }
    assert proof.ok is False


def test_the_anonymize_key_file_is_made_private_and_gives_the_same_names_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(validate_cli, "validate", lambda options, progress=None: as_report(_named_report()))
    db = tmp_path / "engram.db"
    db.write_bytes(b"")
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    key_file = tmp_path / "validate.key"
    args = ["validate", "--db", str(db), "--engram", str(binary), "-q", "--anonymize"]
    first = CliRunner(mix_stderr=False).invoke(cli, [*args, "--anonymize-key", str(key_file)])
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = bytes.fromhex(key_file.read_text().strip())
    assert len(key) == 32
    again = CliRunner(mix_stderr=False).invoke(cli, [*args, "--anonymize-key", str(key_file)])
    assert first.stdout == again.stdout and stable_hash("Ana's App", key) in first.stdout
    unkeyed = CliRunner(mix_stderr=False).invoke(cli, args)
    assert stable_hash("Ana's App", key) not in unkeyed.stdout  # a fresh random key each run
    key_file.write_text("not a key\n")
    broken = CliRunner().invoke(cli, [*args, "--anonymize-key", str(key_file)])
    assert broken.exit_code == 3
    assert (
        broken.output.strip()
        .splitlines()[-1]
        .startswith(f"Error: --anonymize-key {key_file}: not a key this command wrote (64 hex digits)")
    )
    lonely = CliRunner().invoke(cli, ["validate", "--db", str(db), "--anonymize-key", str(key_file)])
    assert lonely.exit_code == 3 and "--anonymize-key goes with --anonymize" in lonely.output


def test_anonymized_progress_and_errors_name_no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_dir = tmp_path / "ana-private"
    secret_dir.mkdir()
    db = secret_dir / "engram.db"
    db.write_bytes(b"")

    def fail(options: ValidateOptions, progress: Any) -> None:
        progress(f"copying {options.db}")
        raise HarnessError(f"{options.db}: cannot copy (disk I/O error)")

    monkeypatch.setattr(validate_cli, "validate", fail)
    binary = tmp_path / "engram"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    result = CliRunner(mix_stderr=False).invoke(
        cli, ["validate", "--db", str(db), "--engram", str(binary), "--anonymize"]
    )
    assert result.exit_code == 1
    assert "ana-private" not in result.stderr + result.stdout, result.stderr
    assert result.stderr.startswith("copying h") and "cannot copy (disk I/O error)" in result.stderr


def test_the_lanes_chart_splits_by_project_and_by_why(report: dict[str, Any]) -> None:
    shaped = copy.deepcopy(report)
    shaped["current"]["stuck"] = [
        {
            "lane": "cloud",
            "project": "(no project)",
            "rows": 2,
            "kind": "refused",
            "reason": "400 x",
            "seqs": [5],
        },
        {"lane": "cloud", "project": "app", "rows": 1, "kind": "refused", "reason": "500 y", "seqs": [3]},
        {
            "lane": "cloud",
            "project": "app",
            "rows": 3,
            "kind": "held back",
            "reason": "behind seq 3",
            "seqs": [],
        },
        {
            "lane": "cloud",
            "project": "side",
            "rows": 2,
            "kind": "not enrolled",
            "reason": "inbox",
            "seqs": [],
        },
    ]
    page = render_html(as_report(shaped))
    chart = page.split("<svg id='plot-lanes'", 1)[1].split("</svg>", 1)[0]
    bars = re.findall(r"data-series='([^']*)' data-label='([^']*)' data-value='([^']*)'", chart)
    assert ("refused", "cloud · app", "1") in bars and ("held back", "cloud · app", "3") in bars
    assert ("refused", "cloud · (no project)", "2") in bars and ("not enrolled", "cloud · side", "2") in bars


def spread_foreign_targets(report: dict[str, Any]) -> dict[str, Any]:
    """The sample (one small home) has one foreign target: add one touched three months earlier."""
    shaped = copy.deepcopy(report)
    targets = shaped["current"]["foreign_targets_before"]
    targets.append({**targets[0], "target_key": "cloud:older-target", "updated_at": "2026-09-01 08:00:00"})
    return shaped


def test_foreign_targets_all_touched_at_once_are_a_table_not_a_vertical_line(report: dict[str, Any]) -> None:
    shaped = copy.deepcopy(report)
    for target in shaped["current"]["foreign_targets_before"]:
        target["updated_at"] = "2026-03-01 10:00:00"
    page = render_html(as_report(shaped))
    assert "<svg id='plot-foreign'" not in page and "<table id='foreign-targets'>" in page
    assert page.count("<svg id='plot-foreign'") == 0
    assert "<svg id='plot-foreign'" in render_html(as_report(spread_foreign_targets(report)))


def test_no_table_has_a_column_without_a_value(report: dict[str, Any]) -> None:
    shaped = copy.deepcopy(report)
    for key in shaped["current"]["inbox_before"]:
        key["claim_command"] = None
    page = render_html(as_report(shaped))
    inbox = page.split("<table id='inbox'>", 1)[1].split("</table>", 1)[0]
    assert "<th>claim</th>" not in inbox
    for table in re.findall(r"<table[^>]*>(.*?)</table>", page):
        header = re.findall(r"<th>(.*?)</th>", table)
        rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
        for index, name in enumerate(header):
            assert any(row[index] for row in rows), f"empty column {name!r}"


def test_every_rendering_comes_from_the_one_typed_model(report: dict[str, Any]) -> None:
    model = ValidateReport.model_validate(report)
    assert render_markdown(as_report(model)) == render_markdown(as_report(report))
    assert render_html(as_report(model)) == render_html(as_report(report))
    assert ValidateReport.model_validate(model.to_json()) == model  # the JSON form loads back the same
    unknown = copy.deepcopy(report)
    unknown["current"]["totals"]["surprise"] = 1
    with pytest.raises(ValidationError):
        render_markdown(as_report(unknown))
    wrong = copy.deepcopy(report)
    wrong["current"]["totals"]["lost"] = "many"
    with pytest.raises(ValidationError):
        render_html(as_report(wrong))


def test_stuck_rows_give_engrams_reason_for_unenrolled_rows_and_every_blocker() -> None:
    last_error = (
        "pending cloud sync mutations are blocked because project(s) are not enrolled: /=31, notes=2\n\nmore"
    )
    blockers = [
        {
            "seq": 5,
            "project": "",
            "entity": "session",
            "status": 400,
            "reason": "400 mutation entries must specify a project",
            "repairable": False,
        },
        {
            "seq": 3,
            "project": "app",
            "entity": "session",
            "status": 500,
            "reason": "500 session payload directory is required for upsert",
            "repairable": True,
        },
    ]
    health = LanesHealth(
        lanes=[
            LaneHealth(
                target_key="cloud",
                lifecycle="degraded",
                last_error=last_error,
                blockers=[Blocker.model_validate(blocker) for blocker in blockers],
                held_back_by_project={"app": 19},
            )
        ],
        enrolled=["app"],
    )
    lanes = [
        _lane("", stranded=1),
        _lane("app", stranded=20),
        _lane("/", stranded=31),
        _lane("app", lane="cloud:app", stranded=4),
    ]
    rows = [(r.lane, r.project, r.rows, r.kind, r.reason) for r in stuck_rows(lanes, health)]
    assert rows == [
        ("cloud", "(no project)", 1, "refused", "400 mutation entries must specify a project"),
        ("cloud", "app", 1, "refused", "500 session payload directory is required for upsert"),
        (
            "cloud",
            "app",
            19,
            "held back",
            "behind seq 5 (400 mutation entries must specify a project): engram's worker stops its cycle at "
            "the first row the cloud refuses",
        ),
        (
            "cloud",
            "/",
            31,
            "not enrolled",
            "the project is not enrolled: engram never sends it (the inbox); engram: pending cloud sync "
            "mutations are blocked because project(s) are not enrolled: /=31, notes=2",
        ),
        ("cloud:app", "app", 4, "per-project lane", "engram v1.20's worker never reads a per-project lane"),
    ]


def test_a_plan_that_frees_nothing_while_rows_are_held_back_says_so_first_and_in_red(
    report: dict[str, Any],
) -> None:
    # the case: the plan drops telemetry, delivers 0, the row without a project still blocks
    shaped = copy.deepcopy(report)
    shaped["current"]["stuck"] = [
        {
            "lane": "cloud",
            "project": "(no project)",
            "rows": 1,
            "kind": "refused",
            "reason": "400 x",
            "seqs": [4],
        },
        {
            "lane": "cloud",
            "project": "app",
            "rows": 19,
            "kind": "held back",
            "reason": "behind seq 4",
            "seqs": [],
        },
    ]
    what_if = shaped["what_if"]
    what_if["run"]["totals"]["delivered"] = shaped["current"]["totals"]["delivered"]
    what_if["proof"] = {
        "ok": False,
        "checks": [
            {"check": "nothing blocked after the plan", "ok": False, "detail": "lane cloud: seq 4 (...)"},
            {"check": "nothing lost", "ok": True, "detail": "0 row(s) acked but never received"},
        ],
    }
    text = render_markdown(as_report(shaped))
    screen = text.split("**Details**")[0]
    assert "it delivers nothing while 20 row(s) are held back" in screen
    assert (
        "Its proof FAILS: nothing blocked after the plan (lane cloud: seq 4 (...)). Do not run it as is."
        in screen
    )
    page = render_html(as_report(shaped))
    assert "<div class='figure bad' id='fig-proof'><b>NO</b>nothing blocked after the plan</div>" in page
    assert "<p id='plan-verdict' class='bad'>" in page


def test_anonymize_hashes_the_names_of_lane_health_and_the_stuck_table(report: dict[str, Any]) -> None:
    shaped = copy.deepcopy(report)
    health = {
        "lanes": [
            {
                "target_key": "cloud",
                "lifecycle": "degraded",
                "last_error": 'push: transport push project "Ana Secret": status 500',
                "blocked": True,
                "blockers": [
                    {
                        "seq": 3,
                        "project": "Ana Secret",
                        "entity": "session",
                        "status": 500,
                        "reason": "500 x",
                        "repairable": True,
                    }
                ],
                "held_back_by_project": {"Ana Secret": 4, "Zé Private": 2},
                "way_out": ["engram-canary repair"],
            }
        ],
        "enrolled": ["Ana Secret", "Zé Private"],
    }
    shaped["current"]["lane_health"] = shaped["current"]["lane_health_before"] = health
    shaped["current"]["stuck"] = [
        {
            "lane": "cloud",
            "project": "Zé Private",
            "rows": 2,
            "kind": "held back",
            "reason": "behind seq 3",
            "seqs": [],
        }
    ]
    shaped["database"]["path"] = "/home/ana/x.db"
    shaped["what_to_run"] = [
        "engram-canary inbox drop --project 'Zé Private' --noise --db /home/ana/x.db --apply"
    ]
    hidden = hide(shaped)
    outputs = (
        json.dumps(hidden, ensure_ascii=False)
        + render_markdown(as_report(hidden))
        + render_html(as_report(hidden))
    )
    for secret in ("Ana Secret", "Zé Private", "/home/ana"):
        assert secret not in outputs, secret
    assert hidden["current"]["lane_health"]["lanes"][0]["held_back_by_project"] == {
        stable_hash("Ana Secret", KEY): 4,
        stable_hash("Zé Private", KEY): 2,
    }


def test_the_details_give_validates_own_time_apart_from_engrams(report: dict[str, Any]) -> None:
    shaped = copy.deepcopy(report)
    shaped["timings"].update(total=368.0, engram=305.5, own=62.5)
    shaped["current"]["timings"] = {
        "doctor_before": 120.0,
        "serve_start": 32.0,
        "worker": 65.0,
        "doctor_after": 118.0,
    }
    assert (
        "- Time: 368 s in all, validate's own 62 s, engram's 306 s (this run: engram doctor 238 s, "
        "serve's start 32 s, worker ticks 33 s)."
    ) in render_markdown(as_report(shaped))


def _canary_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENGRAM_CANARY_CONFIG", raising=False)
    return tmp_path / "xdg" / "engram-canary"


def test_the_printed_commands_use_no_deprecated_aliases_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _canary_home(tmp_path, monkeypatch)
    db, aliases = Path("/home/t/.engram/engram.db"), tmp_path / "my aliases.yaml"
    chosen = [("inbox", "drop", "--project", "unsorted", "--noise"), ("repair",)]
    commands = runnable_commands(chosen, db, aliases)
    assert commands == [
        f"# first set inbox: aliases: {aliases} in the canary's config file (engram-canary config names it)",
        "engram-canary inbox drop --project unsorted --noise --db /home/t/.engram/engram.db --apply",
        "engram-canary repair --db /home/t/.engram/engram.db --apply",
    ]
    assert not any("--aliases" in command for command in commands)


def test_an_alias_map_the_canary_reads_anyway_needs_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = _canary_home(tmp_path, monkeypatch)
    db, chosen = Path("/d/engram.db"), [("inbox", "drop", "--project", "x")]
    plain = ["engram-canary inbox drop --project x --db /d/engram.db --apply"]
    assert runnable_commands(chosen, db, config_dir / "aliases.yaml") == plain
    assert runnable_commands(chosen, db, None) == plain
    assert runnable_commands([("repair",)], db, tmp_path / "elsewhere.yaml") == [
        "engram-canary repair --db /d/engram.db --apply"
    ]
    elsewhere = tmp_path / "elsewhere.yaml"
    config = tmp_path / "canary.yaml"
    config.write_text(f"inbox:\n  aliases: {elsewhere}\n", encoding="utf-8")
    monkeypatch.setenv("ENGRAM_CANARY_CONFIG", str(config))
    assert runnable_commands(chosen, db, elsewhere) == plain


@pytest.mark.parametrize(
    "missing",
    [
        ("what_to_run",),
        ("current", "stuck"),
        ("current", "worker"),
        ("current", "lane_health"),
        ("current", "lane_health_before"),
        ("what_if", "run", "stuck"),
    ],
    ids=lambda path: ".".join(path),
)
def test_a_report_of_the_old_format_is_refused_not_shown_with_empty_answers(
    report: dict[str, Any], missing: tuple[str, ...]
) -> None:
    old = copy.deepcopy(report)
    *parents, last = missing
    section = old
    for part in parents:
        section = section[part]
    del section[last]
    with pytest.raises(ValidationError, match=last):
        render_markdown(as_report(old))


def test_parts_built_typed_name_the_testers_file_too(tmp_path: Path) -> None:
    copy_db, real_db = tmp_path / "work" / "current" / "engram.db", Path("/home/t/.engram/engram.db")
    row = StuckRow(lane="cloud", project="p", rows=1, kind="refused", reason=f"{copy_db}: locked", seqs=[1])
    sample = as_report(json.loads(DATA.read_text(encoding="utf-8")))
    report = sample.model_copy(update={"current": sample.current.model_copy(update={"stuck": [row]})})
    named = _name_the_testers_file(report, {copy_db: real_db}, tmp_path / "work")
    assert named.current.stuck == [row.model_copy(update={"reason": f"{real_db}: locked"})]
