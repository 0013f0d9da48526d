"""`engram-harness validate` on the scale-1 make-deployment database with the real engram v1.20.0.

One validation (current run and what-if side by side, two worker ticks at most) is shared by the module:
engram's worker ticks every 30 s and has no trigger, so each run costs about 40 s of wall time.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.canary.derive import AliasMap
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.deployment import DeploymentSpec, DeploymentSummary, generate
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.validate.anonymize import anonymized
from engram_sync_kit.harness.validate.model import as_report
from engram_sync_kit.harness.validate.report import render_html, render_markdown
from engram_sync_kit.harness.validate.run import inbox_snapshot

pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("validate-scale-1")]


@dataclass
class Validated:
    db: Path
    summary: DeploymentSummary
    before: tuple[str, int, list[str]]
    after: tuple[str, int, list[str]]
    exit_code: int
    stdout: str
    report: dict[str, Any]
    html: str
    claimed_keys: dict[str, int]
    unsorted_telemetry: int


def _fingerprint(db: Path) -> tuple[str, int, list[str]]:
    return (
        hashlib.sha256(db.read_bytes()).hexdigest(),
        db.stat().st_mtime_ns,
        sorted(path.name for path in db.parent.iterdir()),
    )


@pytest.fixture(scope="module")
def validated(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Validated:
    root = tmp_path_factory.mktemp("validate")
    (root / "ws").mkdir()
    db = root / "home-copy" / "engram.db"
    db.parent.mkdir()
    summary = generate(DeploymentSpec(), 0, db, engram_bin, workspace=root / "ws")
    inbox, _ = inbox_snapshot(db, AliasMap())
    aliases = root / "aliases.yaml"
    aliases.write_text("", encoding="utf-8")
    claimable = {key.key: key.count for key in inbox if key.count and key.key != "unsorted"}
    claimed = dict(sorted(claimable.items())[:2])
    unsorted = next(key for key in inbox if key.key == "unsorted")
    plan = root / "plan.txt"
    plan.write_text(
        "# claim two keys into the designated project, drop the unsorted noise\n"
        "engram-canary inbox drop --project unsorted --noise\n"
        + "".join(f"inbox claim --project '{key}' --as {summary.designated_project}\n" for key in claimed),
        encoding="utf-8",
    )
    before = _fingerprint(db)
    json_path, html_path = root / "report.json", root / "report.html"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--db",
            str(db),
            "--engram",
            str(engram_bin),
            "--ticks",
            "2",
            "--plan",
            str(plan),
            "--json",
            str(json_path),
            "--html",
            str(html_path),
            "--aliases",
            str(aliases),
            "--quiet",
        ],
    )
    report = json.loads(json_path.read_text()) if json_path.exists() else {}
    return Validated(
        db=db,
        summary=summary,
        before=before,
        after=_fingerprint(db),
        exit_code=result.exit_code,
        stdout=result.output,
        report=report,
        html=html_path.read_text() if html_path.exists() else "",
        claimed_keys=claimed,
        unsorted_telemetry=unsorted.telemetry,
    )


def test_validate_exits_0_and_never_writes_the_original(validated: Validated) -> None:
    assert validated.exit_code == 0, validated.stdout
    assert validated.after == validated.before  # same bytes, same mtime, no -wal/-shm/backup beside it
    assert validated.report["database"]["original_untouched"] is True


def test_v120_delivers_nothing_from_the_measured_backlog_and_loses_nothing(validated: Validated) -> None:
    current = validated.report["current"]
    summary = validated.summary
    assert current["totals"] == {
        "enqueued": summary.mutation_rows,
        "acked_before_run": summary.mutation_rows - summary.stuck_rows - summary.per_project_rows,
        "delivered": 0,
        "stranded": summary.stuck_rows + summary.per_project_rows,
        "refused": 0,
        "lost": 0,
        "duplicated": 0,
    }
    per_project_lanes = [row for row in current["lanes"] if row["lane"] != "cloud"]
    assert sum(row["stranded"] for row in per_project_lanes) == summary.per_project_rows
    assert sum(row["enqueued"] for row in current["projects"]) == summary.mutation_rows
    # Only unenrolled rows wait: the worker's one cycle was blocked and it went idle.
    assert [tick["phase"] for tick in current["ticks"]] == ["degraded"]
    assert "not enrolled" in current["ticks"][0]["last_error"]


def test_canary_doctor_and_migrations_are_reported_before_and_after(validated: Validated) -> None:
    current = validated.report["current"]
    assert current["canary_before"]["status"] == current["canary_after"]["status"] == "critical"
    foreign = {finding["target_key"] for finding in current["canary_after"]["findings"]}
    assert set(validated.summary.foreign_targets) <= foreign
    assert current["doctor_before"]["status"] == current["doctor_after"]["status"] == "ok"
    assert current["migrations"] == {
        "user_version": [0, 0],
        "added": [],
        "dropped": [],
        "changed": [],
        "added_columns": {},
    }
    keys = {key["key"] for key in current["inbox_before"]}
    assert "unsorted" in keys and set(validated.claimed_keys) <= keys
    assert len(current["foreign_targets_before"]) == len(validated.summary.foreign_targets)


def test_what_if_discards_the_noise_delivers_the_claims_and_blocks_nothing(validated: Validated) -> None:
    what_if = validated.report["what_if"]
    assert [step["outcome"] for step in what_if["plan"]] == ["applied"] * (1 + len(validated.claimed_keys))
    effect = what_if["effect"]
    assert effect["discarded_rows"] == validated.unsorted_telemetry
    claimed = sum(validated.claimed_keys.values())
    assert effect["claimed_rows"] == claimed
    assert effect["to_deliver_rows"] >= claimed
    assert effect["delivered_in_run"] == effect["to_deliver_rows"]
    run = what_if["run"]
    designated = next(
        row
        for row in run["lanes"]
        if row["lane"] == "cloud" and row["project"] == validated.summary.designated_project
    )
    assert designated["delivered"] == effect["to_deliver_rows"]
    assert run["totals"]["lost"] == 0
    assert what_if["proof"]["ok"] is True, what_if["proof"]


def test_markdown_summary_on_stdout_and_html_file(validated: Validated) -> None:
    text = validated.stdout
    assert text.startswith(f"### engram 1.20.0 rehearsed on a copy of `{validated.db}`")
    assert "- Original untouched: yes;" in text
    assert "- Proof: holds" in text
    assert text == render_markdown(as_report(validated.report))
    assert validated.html == render_html(as_report(validated.report))
    assert "<svg id='plot-inbox'" in validated.html and "http://" not in validated.html.replace(
        "http://www.w3.org/2000/svg", ""
    )


def _names_in(db: Path) -> set[str]:
    queries = (
        "SELECT project FROM sessions",
        "SELECT directory FROM sessions",
        "SELECT title FROM observations",
        "SELECT content FROM observations",
        "SELECT project FROM sync_mutations",
        "SELECT project FROM sync_enrolled_projects",
        "SELECT substr(target_key, 7) FROM sync_state WHERE target_key LIKE 'cloud:%'",
    )
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        found = {str(row[0]) for query in queries for row in connection.execute(query) if row[0]}
    return {name for name in found if len(name) >= 4}


def test_anonymized_report_keeps_the_numbers_and_leaks_no_name(validated: Validated) -> None:
    report = anonymized(as_report(validated.report), b"k" * 32).to_json()
    assert report["current"]["totals"] == validated.report["current"]["totals"]
    assert len(report["current"]["lanes"]) == len(validated.report["current"]["lanes"])
    outputs = {
        "json": json.dumps(report, ensure_ascii=False),
        "markdown": render_markdown(as_report(report)),
        "html": render_html(as_report(report)),
    }
    names = _names_in(validated.db)
    assert len(names) > 1000  # titles, contents, projects and directories of the deployment
    for kind, text in outputs.items():
        leaked = sorted(name for name in names if name in text)
        assert leaked == [], f"{kind} leaks {leaked[:5]}"


def test_an_engram_whose_serve_dies_is_a_one_line_error(engram_bin: Path, tmp_path: Path) -> None:
    world = EngramEnvironment(binary=engram_bin, root=tmp_path / "machine").prepare()
    assert world.run(["cloud", "enroll", "my-app"]).returncode == 0
    broken = tmp_path / "engram"
    broken.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  version) echo 'engram 1.20.0' ;;\n"
        '  doctor) echo \'{"status": "ok", "checks": []}\' ;;\n'
        "  serve) echo 'panic: cannot listen' >&2; echo 'goroutine 1 [running]:' >&2; exit 2 ;;\n"
        "esac\n"
    )
    broken.chmod(0o755)
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("")
    args = ["validate", "--db", str(world.db_path), "--engram", str(broken), "--aliases", str(aliases)]
    result = CliRunner().invoke(cli, [*args, "--no-what-if", "-q"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(
        "Error: current: engram serve did not become ready; its log: | panic: cannot listen"
    )
