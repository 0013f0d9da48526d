"""validate on a larger make-deployment database (scale 3, about 23k sync rows) against a server whose
allowlist refuses the project a plan claims into: the refusals, with the server's reasons, and a what-if
that says no. Real engram v1.20.0; about 45 s of wall time (the worker's 30 s tick)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from canary.derive import AliasMap
from harness.deployment import DeploymentSpec, generate
from harness.validate import ValidateOptions, inbox_snapshot, validate
from harness.validate_report import render_markdown

pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("validate-scale-3")]


def test_a_plan_into_a_refused_project_is_reported_with_the_servers_reason(
    engram_bin: Path, tmp_path: Path
) -> None:
    (tmp_path / "ws").mkdir()
    db = tmp_path / "engram.db"
    summary = generate(DeploymentSpec().scaled(3), 1, db, engram_bin, workspace=tmp_path / "ws")
    refused_project = summary.designated_project
    allowed = tuple(project for project in summary.enrolled_projects if project != refused_project)
    inbox, _ = inbox_snapshot(db, AliasMap())
    keys = sorted(key["key"] for key in inbox if key["count"] and key["key"] != "unsorted")[:3]
    assert keys
    plan = tmp_path / "plan.txt"
    plan.write_text("".join(f"inbox claim --project '{key}' --as {refused_project}\n" for key in keys))
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("")
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        rows = int(connection.execute("SELECT COUNT(*) FROM sync_mutations").fetchone()[0])

    report = validate(
        ValidateOptions(
            db=db, binary=engram_bin, ticks=2, plan=plan, allowed_projects=allowed, aliases=aliases
        )
    )

    assert rows > 20_000 and report["current"]["totals"]["enqueued"] == rows
    assert report["database"]["original_untouched"] is True
    what_if = report["what_if"]
    claimed = what_if["effect"]["to_deliver_rows"]
    assert claimed == sum(key["count"] for key in inbox if key["key"] in keys)
    (refused,) = what_if["run"]["refused"]
    assert refused["project"] == refused_project and refused["rows"] == claimed
    assert set(refused["statuses"]) == {"403"}
    assert refused["reasons"] and "forbidden: project is not allowed" in refused["reasons"][0]
    assert what_if["run"]["totals"]["lost"] == 0
    assert what_if["proof"]["ok"] is False
    failed = [check["check"] for check in what_if["proof"]["checks"] if not check["ok"]]
    assert failed == ["no new refusals"]
    text = render_markdown(report)
    assert "- Nothing becomes blocked: NO (" in text
    assert f"With the plan, the server refuses {claimed} row(s) of '{refused_project}'" in text
