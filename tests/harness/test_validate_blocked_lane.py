"""`engram-harness validate` for a beta tester whose legacy lane is blocked, on a home made with the real
engram v1.20.0 only:

- main-proj and second-proj enrolled; saves of both from a directory;
- `engram save` without a project (the cloud answers 400 "mutation entries must specify a project");
- a session of main-proj created over `engram serve`'s HTTP API without a directory, then with one
  (the first, directory-less row stays first in the lane: the cloud answers 500);
- a session of the unenrolled side-project without a directory, with one observation.

The first screen must answer: lost (0), stuck per lane and project with engram's and the cloud's reasons
(400 and 500), and the complete commands against the tester's own file. Running those commands on the
real database must then let engram's own worker deliver what was held back.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.serve import EngramDaemon
from engram_sync_kit.harness.polling import eventually
from engram_sync_kit.harness.scenario.runner import copy_database
from engram_sync_kit.harness.validate.report import one_line

pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("validate-blocked-lane")]

ENROLLED = ("main-proj", "second-proj")
CANARY = Path(sys.executable).parent / "engram-canary"
TOKEN = "t"


@dataclass
class Validated:
    world: EngramEnvironment
    exit_code: int
    stdout: str
    report: dict[str, Any]
    html: str


def _engram(world: EngramEnvironment, *args: str, cwd: Path | None = None) -> None:
    result = world.run(list(args), cwd=cwd)
    assert result.returncode == 0, f"engram {' '.join(args)}: {meaningful_stderr(result.stderr)}"


def _post(daemon: EngramDaemon, path: str, body: dict[str, Any]) -> None:
    response = daemon.http.post(f"{daemon.base_url}{path}", json=body)
    assert response.status_code < 300, f"{path} {response.status_code}: {response.text}"


def make_blocked_home(world: EngramEnvironment) -> None:
    for project in ENROLLED:
        _engram(world, "cloud", "enroll", project)
    home_dir = world.root / "ana home"
    home_dir.mkdir()
    daemon = EngramDaemon(world, {}, world.root / "serve-setup.log")
    try:
        daemon.start(autosync=False)
        _post(daemon, "/sessions", {"id": "s-nodir", "project": "side-project"})
        _post(
            daemon,
            "/observations",
            {"session_id": "s-nodir", "type": "manual", "title": "side note", "content": "kept"},
        )
        _post(daemon, "/sessions", {"id": "s-late", "project": "main-proj"})
        _post(daemon, "/sessions", {"id": "s-late", "project": "main-proj", "directory": str(home_dir)})
    finally:
        daemon.close()
    _engram(world, "save", "stray thought", "saved without --project", cwd=home_dir)
    for project, title in (("main-proj", "main decision"), ("second-proj", "second decision")):
        _engram(world, "save", title, f"content of {title}", "--project", project, cwd=home_dir)


def query(db: Path, sql: str, *parameters: object) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as connection:
        return list(connection.execute(sql, parameters))


@pytest.fixture(scope="module")
def validated(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Validated:
    world = EngramEnvironment(binary=engram_bin, root=tmp_path_factory.mktemp("blocked home")).prepare()
    make_blocked_home(world)
    # a copy the later tests never change (one runs the printed commands on the real file)
    copy_database(world.db_path, world.root / "pristine home" / "engram.db")
    out = world.root / "out"
    out.mkdir()
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--db",
            str(world.db_path),
            "--engram",
            str(engram_bin),
            "--ticks",
            "2",
            "--json",
            str(out / "report.json"),
            "--html",
            str(out / "report.html"),
            "--quiet",
        ],
    )
    json_path, html_path = out / "report.json", out / "report.html"
    return Validated(
        world=world,
        exit_code=result.exit_code,
        stdout=result.output,
        report=json.loads(json_path.read_text()) if json_path.exists() else {},
        html=html_path.read_text() if html_path.exists() else "",
    )


def first_screen(stdout: str) -> str:
    """The markdown up to the detailed tables: what a tester sees before scrolling."""
    return stdout.split("\n**Details**", 1)[0]


def commands_to_run(stdout: str) -> list[str]:
    block = first_screen(stdout).split("**What to run**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("engram-canary ")]


def test_the_first_screen_answers_lost_stuck_and_what_to_run(validated: Validated) -> None:
    screen = first_screen(validated.stdout)
    assert validated.exit_code == 0, validated.stdout
    assert "**Lost:** 0 rows" in screen
    assert screen.index("**Lost:**") < screen.index("**Stuck:**") < screen.index("**What to run**")
    # both refusals of the lane, in the cloud's words, each with the rows it holds back
    assert "400 mutation entries must specify a project" in screen
    assert "500 session payload directory is required for upsert" in screen
    # engram's own record of why, and its worker in its own words (never "idle" for a blocked tick)
    assert "engram's worker: degraded" in screen
    assert validated.report["current"]["worker"]["lifecycle"] == "degraded"
    last_error = validated.report["current"]["worker"]["last_error"]
    assert "session payload directory is required for upsert" in last_error
    assert one_line(last_error) in screen  # engram's words, its lines joined
    assert "idle" not in screen


def test_the_stuck_table_names_every_blocker_per_lane_and_project(validated: Validated) -> None:
    stuck = validated.report["current"]["stuck"]
    by_why = {(row["lane"], row["project"], row["reason"]): row for row in stuck}
    no_project = by_why[("cloud", "(no project)", "400 mutation entries must specify a project")]
    assert no_project["rows"] == 2 and no_project["kind"] == "refused"
    late = by_why[("cloud", "main-proj", "500 session payload directory is required for upsert")]
    assert late["rows"] == 1 and late["kind"] == "refused"
    held = [row for row in stuck if row["kind"] == "held back"]
    assert {row["project"] for row in held} >= set(ENROLLED)
    assert all(row["lane"] == "cloud" and row["rows"] > 0 for row in held)
    side = [row for row in stuck if row["project"] == "side-project"]
    assert side and all(row["kind"] == "not enrolled" for row in side)


def test_the_commands_are_complete_and_name_the_testers_file(validated: Validated) -> None:
    db = str(validated.world.db_path)
    commands = commands_to_run(validated.stdout)
    assert commands, validated.stdout
    for command in commands:
        words = shlex.split(command)
        assert words[words.index("--db") + 1] == db, command
        assert "--apply" in words, command
    assert "engram-validate-" not in validated.stdout
    assert "engram-validate-" not in json.dumps(validated.report)
    assert commands[0] == shlex.join(["engram-canary", "repair", "--db", db, "--apply"])
    assert shlex.join(["engram-canary", "inbox", "drop", "--unattributed", "--db", db, "--apply"]) in commands


def test_the_what_if_takes_the_lane_health_way_out_and_its_proof_is_honest(validated: Validated) -> None:
    what_if = validated.report["what_if"]
    lines = [step["command"] for step in what_if["plan"]]
    assert lines[:2] == ["engram-canary repair", "engram-canary inbox drop --unattributed"]
    proof = {check["check"]: check["ok"] for check in what_if["proof"]["checks"]}
    assert proof["nothing blocked after the plan"] is True
    assert what_if["effect"]["delivered_in_run"] > 0
    assert what_if["run"]["totals"]["delivered"] > validated.report["current"]["totals"]["delivered"]
    assert "fig-proof" in validated.html and "nothing blocked after the plan" in validated.html
    # the lanes chart carries the why: refused and held-back rows per lane and project
    for series, label in (("refused", "cloud · (no project)"), ("held back", "cloud · second-proj")):
        assert f"data-series='{series}' data-label='{label}'" in validated.html


def test_the_printed_commands_on_the_real_database_let_engrams_worker_deliver(validated: Validated) -> None:
    world = validated.world
    db = world.db_path
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ENGRAM_", "XDG_"))}
    env.update(HOME=str(world.home), XDG_CONFIG_HOME=str(world.root / "xdg"))
    for command in commands_to_run(validated.stdout):
        words = shlex.split(command)
        result = subprocess.run(
            [str(CANARY), *words[1:]], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    waiting_sql = (
        "SELECT count(*) FROM sync_mutations WHERE target_key = 'cloud' AND acked_at IS NULL "
        "AND project IN ('main-proj', 'second-proj')"
    )
    assert query(db, waiting_sql)[0][0] > 0
    config = FakeCloudConfig(token=TOKEN, allowed_projects=ENROLLED, server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        daemon = EngramDaemon(
            world,
            {"ENGRAM_CLOUD_TOKEN": TOKEN, "ENGRAM_CLOUD_SERVER": cloud.base_url},
            world.root / "serve-after.log",
        )
        try:
            daemon.start(autosync=True)
            eventually(
                lambda: True if query(db, waiting_sql)[0][0] == 0 else None,
                timeout=75.0,
                what="engram's worker to deliver the rows the block held back",
                error=AssertionError,
            )
        finally:
            daemon.close()
        received = cloud.client.received()
    assert {row.project for row in received} == set(ENROLLED)


SECRETS = (
    "main-proj",
    "second-proj",
    "side-project",
    "s-nodir",
    "s-late",
    "ana home",
    "side note",
    "stray thought",
    "saved without --project",
    "main decision",
    "second decision",
    "content of main decision",
)


def test_anonymize_leaks_no_name_path_title_content_or_session_id(
    validated: Validated, engram_bin: Path
) -> None:
    world = validated.world
    out = world.root / "anon"
    out.mkdir()
    key = out / "validate.key"
    result = CliRunner(mix_stderr=False).invoke(
        cli,
        [
            "validate",
            "--db",
            str(world.root / "pristine home" / "engram.db"),
            "--engram",
            str(engram_bin),
            "--ticks",
            "1",
            "--json",
            str(out / "r.json"),
            "--html",
            str(out / "r.html"),
            "--anonymize",
            "--anonymize-key",
            str(key),
            "--no-doctor",
        ],
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    # --no-doctor: engram's doctor is skipped and said so; engram's time is reported apart from validate's
    report = json.loads((out / "r.json").read_text())
    assert report["current"]["doctor_before"]["status"] == "skipped"
    assert "engram doctor: skipped (--no-doctor)" in result.stdout
    assert "engram doctor (before)" not in result.stderr
    timings = report["timings"]
    assert timings["own"] + timings["engram"] == pytest.approx(timings["total"], abs=0.05)
    assert timings["engram"] >= report["current"]["timings"]["worker"]
    outputs = {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "json": (out / "r.json").read_text(),
        "html": (out / "r.html").read_text(),
    }
    secrets = [*SECRETS, str(world.root), str(world.db_path)]
    for kind, text in outputs.items():
        leaked = [secret for secret in secrets if secret in text]
        assert leaked == [], f"{kind} leaks {leaked}"
    assert "copying h" in result.stderr  # progress still speaks, of the hash
    # the home was still blocked: the hidden names are in the stuck table and lane health, hashed
    assert report["current"]["stuck"] and report["current"]["lane_health"]["lanes"][0]["blocked"]
    # the key maps names back: the same key gives the same hash of the tester's project
    from engram_sync_kit.harness.validate.anonymize import stable_hash

    mapped = stable_hash("main-proj", bytes.fromhex(key.read_text().strip()))
    assert mapped in outputs["stdout"]
