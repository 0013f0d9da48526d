"""make-deployment: the measured shape by SQL, engram's payload rules, determinism, and the real engram on it."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from engram_sync_kit.engram_contract import go_json
from engram_sync_kit.harness.deployment import (
    REFERENCE_TIME,
    DeploymentError,
    DeploymentSpec,
    DeploymentSummary,
    canonical_digest,
    generate,
    stamp,
)
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr

SEED_7_DIGEST = "e42238bcd7a7cf29bc6ed91900d7f57dc05d841bf9c0b91a6aa177f5c0dc4fcd"
TIME_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
HEX_ID = {"observation": re.compile(r"^obs-[0-9a-f]{16}$"), "prompt": re.compile(r"^prompt-[0-9a-f]{16}$")}
HEX_ID["relation"] = re.compile(r"^rel-[0-9a-f]{16}$")
# Field order of engram v1.20's sync*Payload structs (internal/store/store.go), as json.Marshal writes them.
PAYLOAD_FIELDS = {
    "session": ["id", "project", "directory", "started_at"],
    "prompt": ["sync_id", "session_id", "content", "project", "created_at"],
    "observation": [
        "sync_id",
        "session_id",
        "type",
        "title",
        "content",
        "tool_name",
        "project",
        "scope",
        "topic_key",
        "revision_count",
        "duplicate_count",
        "last_seen_at",
        "created_at",
        "updated_at",
    ],
    "relation": [
        "sync_id",
        "source_id",
        "target_id",
        "relation",
        "reason",
        "evidence",
        "confidence",
        "judgment_status",
        "marked_by_actor",
        "marked_by_kind",
        "marked_by_model",
        "session_id",
        "project",
        "created_at",
        "updated_at",
    ],
}


@pytest.fixture(scope="module")
def deployment(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> DeploymentSummary:
    out = tmp_path_factory.mktemp("deployment") / "engram.db"
    return generate(DeploymentSpec(), 7, out, engram_bin, with_digest=True)


@pytest.fixture
def db(deployment: DeploymentSummary) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(f"file:{deployment.path}?mode=ro", uri=True)
    yield connection
    connection.close()


def one(connection: sqlite3.Connection, sql: str, *args: object) -> int:
    return int(connection.execute(sql, args).fetchone()[0])


def engram_world(engram_bin: Path, root: Path, db_path: Path) -> EngramEnvironment:
    """An engram world whose data dir holds only the generated file."""
    world = EngramEnvironment(binary=engram_bin, root=root).prepare()
    world.db_path.symlink_to(db_path)
    return world


# ── the spec (no binary) ─────────────────────────────────────────────────────


@pytest.mark.unit
def test_spec_defaults_are_the_measured_numbers() -> None:
    spec = DeploymentSpec()
    assert (spec.sessions, spec.prompts, spec.enrolled_projects, spec.phantom_keys) == (4799, 1188, 10, 35)
    assert (spec.stuck_rows, spec.stuck_sessions + spec.stuck_prompts) == (892, 880)
    assert (spec.home.sessions, spec.designated_sessions, spec.per_project_rows) == (538, 348, 135)
    assert spec.mutation_rows == 7580
    assert spec.reference_time == REFERENCE_TIME


@pytest.mark.unit
def test_scaling_multiplies_volumes_but_not_keys() -> None:
    spec = DeploymentSpec().scaled(10)
    assert (spec.sessions, spec.prompts, spec.stuck_rows, spec.per_project_rows) == (47990, 11880, 8920, 1350)
    assert (spec.enrolled_projects, spec.phantom_keys) == (10, 35)
    tiny = DeploymentSpec().scaled(0.01)
    assert tiny.phantom_keys == 35
    assert tiny.stuck_sessions >= 35
    assert all(volume.sessions >= 1 for volume in tiny.special_keys)


@pytest.mark.unit
def test_a_spec_whose_volumes_do_not_fit_is_refused_in_one_line() -> None:
    with pytest.raises(ValidationError, match="stuck_sessions leaves 10 rows where at least 653 are needed"):
        DeploymentSpec(stuck_sessions=10)
    with pytest.raises(DeploymentError, match=r"--scale -1: must be a positive number"):
        DeploymentSpec().scaled(-1)
    with pytest.raises(DeploymentError, match=r"--scale 1000: at most 400 \(about 3M mutation rows"):
        DeploymentSpec().scaled(1000)
    assert DeploymentSpec().scaled(0.001).phantom_keys == 35


@pytest.mark.unit
def test_go_json_writes_what_go_json_marshal_writes() -> None:
    assert (
        go_json({"title": "a<b> & c", "n": 1, "x": "ñ"}, sort_keys=False)
        == '{"title":"a\\u003cb\\u003e \\u0026 c","n":1,"x":"ñ"}'
    )
    assert stamp(0) == "1970-01-01 00:00:00"
    assert stamp(1788566400 + 3723) == "2026-09-05 01:02:03"


# ── the measured shape, by SQL ───────────────────────────────────────────────


@pytest.mark.engram
def test_scale_one_reproduces_the_measured_counts(
    db: sqlite3.Connection, deployment: DeploymentSummary
) -> None:
    assert one(db, "SELECT count(*) FROM sync_enrolled_projects") == 10
    assert one(db, "SELECT count(*) FROM sync_mutations") == 7580
    assert one(db, "SELECT max(seq) FROM sync_mutations") == 7600  # 20 permanent seq gaps
    assert one(db, "SELECT count(*) FROM sessions") == 4799
    assert one(db, "SELECT count(*) FROM user_prompts") == 1188
    assert one(db, "SELECT count(*) FROM sync_mutations WHERE entity = 'session'") == 4799
    assert one(db, "SELECT count(*) FROM sync_mutations WHERE entity = 'prompt'") == 1188
    assert (
        one(
            db,
            "SELECT count(*) FROM sync_mutations WHERE entity IN ('session','prompt') AND target_key != 'cloud'",
        )
        == 0
    )
    unenrolled_unacked = (
        "FROM sync_mutations WHERE target_key = 'cloud' AND acked_at IS NULL"
        " AND project NOT IN (SELECT project FROM sync_enrolled_projects)"
    )
    assert one(db, f"SELECT count(*) {unenrolled_unacked}") == 892
    assert one(db, f"SELECT count(*) {unenrolled_unacked} AND entity IN ('session','prompt')") == 880
    assert one(db, f"SELECT count(DISTINCT project) {unenrolled_unacked}") == 35
    assert one(db, "SELECT count(*) FROM sessions WHERE project = ?", deployment.home_key) == 538
    assert (
        one(
            db,
            "SELECT count(*) FROM sessions WHERE directory = ? AND project = ?",
            deployment.designated_directory,
            deployment.designated_project,
        )
        == 348
    )
    per_project = "FROM sync_mutations WHERE target_key != 'cloud'"
    assert one(db, f"SELECT count(*) {per_project}") == 135
    assert one(db, f"SELECT count(*) {per_project} AND acked_at IS NULL AND entity = 'observation'") == 135
    assert (
        one(
            db,
            f"SELECT count(*) {per_project} AND substr(target_key, 7) NOT IN (SELECT project FROM sync_enrolled_projects)",
        )
        == 0
    )
    assert (
        one(db, "SELECT count(*) FROM sync_mutations WHERE entity = 'relation' AND acked_at IS NOT NULL")
        == 167
    )
    assert (
        one(db, "SELECT count(*) FROM sync_mutations WHERE entity = 'relation' AND target_key = 'cloud'")
        == 167
    )
    assert one(db, "SELECT count(*) FROM memory_relations WHERE judgment_status = 'judged'") == 167


@pytest.mark.engram
def test_phantom_targets_and_the_dead_403_one(db: sqlite3.Connection, deployment: DeploymentSummary) -> None:
    enrolled = {row[0] for row in db.execute("SELECT project FROM sync_enrolled_projects")}
    assert enrolled == set(deployment.enrolled_projects)
    allowed = {"cloud"} | {f"cloud:{project}" for project in enrolled}
    foreign = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT target_key, lifecycle, reason_code, last_acked_seq FROM sync_state ORDER BY target_key"
        )
        if row[0] not in allowed
    }
    assert len(foreign) == 36
    dead = foreign.pop(f"cloud:{deployment.forbidden_key}")
    assert dead[:2] == ("degraded", "policy_forbidden")
    assert set(foreign.values()) == {("pending", None, 0)}
    assert set(foreign) == {f"cloud:{key}" for key in deployment.phantom_keys}
    # The measured noise keys: '/', the home dir's basename, a scratch dir, a UUID-named dir, and one
    # folder under three separator spellings (its casing survives only in the directories).
    keys = set(deployment.phantom_keys)
    assert {
        "/",
        deployment.home_key,
        "prueba",
        "lm-studio-models",
        "lm_studio_models",
        "lm studio models",
    } <= keys
    assert any(
        re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", key) for key in keys
    )
    spellings = {
        row[0]
        for row in db.execute("SELECT DISTINCT directory FROM sessions WHERE project LIKE 'lm%studio%models'")
    }
    assert {Path(directory).name for directory in spellings} == {
        "LM-Studio-Models",
        "LM_Studio_Models",
        "LM Studio Models",
    }
    # One non-repo working dir, two keys at two times.
    split = dict(
        db.execute(
            "SELECT project, count(*) FROM sessions WHERE directory LIKE '%/Documents/notes' GROUP BY project"
        ).fetchall()
    )
    assert split == {"notes": 24, "documents": 1}
    assert one_text(db, "SELECT max(started_at) FROM sessions WHERE project = 'notes'") < one_text(
        db, "SELECT min(started_at) FROM sessions WHERE project = 'documents'"
    )


def one_text(connection: sqlite3.Connection, sql: str) -> str:
    return str(connection.execute(sql).fetchone()[0])


@pytest.mark.engram
def test_sync_state_cursors_follow_engram_rules(
    db: sqlite3.Connection, deployment: DeploymentSummary
) -> None:
    states = {
        row[0]: row[1:]
        for row in db.execute(
            "SELECT target_key, lifecycle, last_enqueued_seq, last_acked_seq FROM sync_state"
        )
    }
    legacy_max = one(db, "SELECT max(seq) FROM sync_mutations WHERE target_key = 'cloud'")
    legacy_acked = one(
        db, "SELECT max(seq) FROM sync_mutations WHERE target_key = 'cloud' AND acked_at IS NOT NULL"
    )
    assert states["cloud"] == ("pending", legacy_max, legacy_acked)
    for key in [*deployment.phantom_keys, *deployment.enrolled_projects, deployment.forbidden_key]:
        max_seq = one(
            db, "SELECT max(seq) FROM sync_mutations WHERE target_key = 'cloud' AND project = ?", key
        )
        max_acked = one(
            db,
            "SELECT ifnull(max(seq), 0) FROM sync_mutations WHERE target_key = 'cloud' AND project = ?"
            " AND acked_at IS NOT NULL",
            key,
        )
        pending = one(
            db,
            "SELECT count(*) FROM sync_mutations WHERE target_key = 'cloud' AND project = ? AND acked_at IS NULL",
            key,
        )
        lifecycle, enqueued, acked = states[f"cloud:{key}"]
        assert (enqueued, acked) == (max_seq, max_acked), key
        if key == deployment.forbidden_key:
            assert (lifecycle, pending) == ("degraded", 0)
        else:
            assert lifecycle == ("pending" if pending else "healthy"), key
        # v1.20 journals every row in the legacy lane: a phantom target holds no rows of its own.
        if key not in deployment.enrolled_projects:
            assert one(db, "SELECT count(*) FROM sync_mutations WHERE target_key = ?", f"cloud:{key}") == 0


@pytest.mark.engram
def test_payloads_are_shaped_like_engram_v120(db: sqlite3.Connection, deployment: DeploymentSummary) -> None:
    reference = deployment.reference_time
    for entity, key, payload, project, occurred, acked, source, op in db.execute(
        "SELECT entity, entity_key, payload, project, occurred_at, acked_at, source, op FROM sync_mutations"
    ):
        body = json.loads(payload)
        fields = PAYLOAD_FIELDS[entity]
        assert list(body) == [name for name in fields if name in body], (entity, list(body))
        assert (source, op) == ("local", "upsert")
        if entity == "session":
            assert key == body["id"] and body["directory"]
        else:
            assert key == body["sync_id"] and HEX_ID[entity].match(key), key
        assert body["project"] == project
        assert TIME_TEXT.match(occurred) and occurred <= reference
        assert acked is None or (TIME_TEXT.match(acked) and occurred <= acked <= reference)
    stored = db.execute("SELECT sync_id, revision_count, content, project FROM observations").fetchall()
    latest = {
        row[0]: json.loads(row[1])
        for row in db.execute(
            "SELECT entity_key, payload FROM sync_mutations WHERE entity = 'observation' AND target_key = 'cloud'"
            " ORDER BY seq"
        )
    }
    for sync_id, revisions, content, project in stored:
        assert (latest[sync_id]["revision_count"], latest[sync_id]["content"]) == (revisions, content)
        assert latest[sync_id]["project"] == project
    bounds = db.execute(
        "SELECT min(started_at), max(started_at) FROM sessions UNION ALL SELECT min(created_at), max(created_at)"
        " FROM user_prompts"
    ).fetchall()
    for earliest, latest_time in bounds:
        assert earliest >= "2026-06-05" and latest_time <= reference


# ── determinism ──────────────────────────────────────────────────────────────


@pytest.mark.engram
def test_same_seed_same_rows_other_seed_other_rows(engram_bin: Path, tmp_path: Path) -> None:
    small = DeploymentSpec().scaled(0.01)
    first = generate(small, 3, tmp_path / "a.db", engram_bin, with_digest=True)
    again = generate(small, 3, tmp_path / "b.db", engram_bin, with_digest=True)
    other = generate(small, 4, tmp_path / "c.db", engram_bin, with_digest=True)
    assert first.digest == again.digest == canonical_digest(tmp_path / "b.db")
    assert other.digest != first.digest
    dumps = ["\n".join(sqlite3.connect(tmp_path / name).iterdump()) for name in ("a.db", "b.db")]
    assert dumps[0] == dumps[1]
    assert first.phantom_keys != other.phantom_keys


@pytest.mark.engram
def test_scale_one_digest_is_stable(deployment: DeploymentSummary, engram_bin: Path, tmp_path: Path) -> None:
    again = generate(DeploymentSpec(), 7, tmp_path / "engram.db", engram_bin, with_digest=True)
    assert again.digest == deployment.digest
    # Pinned across processes and machines (hash randomization, set order): a deliberate change to the
    # generator updates this value; anything else changing it is a determinism bug.
    assert deployment.digest == SEED_7_DIGEST
    assert again.model_dump(exclude={"path", "seconds"}) == deployment.model_dump(exclude={"path", "seconds"})


# ── the real engram opens it ─────────────────────────────────────────────────


@pytest.mark.engram
def test_engram_doctor_and_stats_run_on_the_deployment(
    deployment: DeploymentSummary, engram_bin: Path, tmp_path: Path
) -> None:
    world = engram_world(engram_bin, tmp_path, Path(deployment.path))
    doctor = world.run(["doctor", "--json"])
    assert doctor.returncode == 0, meaningful_stderr(doctor.stderr)
    report = json.loads(doctor.stdout)
    assert report["status"] == "ok"
    evidence = {check["check_id"]: check["evidence"] for check in report["checks"]}
    assert evidence["sync_mutation_required_fields"] == {"pending_mutations_evaluated": 892}
    assert evidence["session_project_directory_mismatch"] == {"sessions_evaluated": 4799}
    stats = world.run(["stats"])
    assert stats.returncode == 0, meaningful_stderr(stats.stderr)
    assert "Sessions:     4799" in stats.stdout
    assert "Observations: 1132" in stats.stdout
    assert "Prompts:      1188" in stats.stdout


@pytest.mark.engram
def test_a_tiny_deployment_keeps_every_key_and_engram_opens_it(engram_bin: Path, tmp_path: Path) -> None:
    summary = generate(DeploymentSpec().scaled(0.01), 11, tmp_path / "engram.db", engram_bin)
    assert (len(summary.enrolled_projects), len(summary.phantom_keys)) == (10, 35)
    assert summary.mutation_rows < 200 and summary.digest is None
    connection = sqlite3.connect(tmp_path / "engram.db")
    assert one(connection, "SELECT count(*) FROM sync_state") == 1 + 10 + 35 + 1
    assert (
        one(
            connection,
            "SELECT count(DISTINCT project) FROM sync_mutations WHERE acked_at IS NULL AND target_key = 'cloud'",
        )
        == 35
    )
    connection.close()
    world = engram_world(engram_bin, tmp_path / "world", tmp_path / "engram.db")
    doctor = world.run(["doctor", "--json"])
    assert doctor.returncode == 0, meaningful_stderr(doctor.stderr)
    assert json.loads(doctor.stdout)["status"] == "ok"


# ── the command ──────────────────────────────────────────────────────────────


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "engram-harness"
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False)


@pytest.mark.engram
def test_command_prints_the_summary_and_refuses_to_overwrite(engram_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "engram.db"
    made = harness(
        "make-deployment",
        "--scale",
        "0.01",
        "--seed",
        "5",
        "--out",
        str(out),
        "--engram",
        str(engram_bin),
        "--digest",
    )
    assert made.returncode == 0, made.stderr
    summary = DeploymentSummary.model_validate_json(made.stdout)
    assert (summary.seed, summary.scale, summary.path) == (5, 0.01, str(out))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["engram.db"]
    assert summary.digest == canonical_digest(out)
    again = harness("make-deployment", "--scale", "0.01", "--out", str(out), "--engram", str(engram_bin))
    assert again.returncode == 1
    assert again.stderr.strip() == f"Error: {out}: already exists; remove it or choose another --out"


@pytest.mark.unit
def test_command_rejects_a_bad_scale_and_a_missing_directory(tmp_path: Path) -> None:
    bad = harness("make-deployment", "--scale", "0", "--out", str(tmp_path / "x.db"))
    assert bad.returncode == 3
    assert "Invalid value for '--scale': 0.0 is not in the range x>0." in bad.stderr
    fake_binary = tmp_path / "engram"
    fake_binary.write_text("")
    nowhere = harness("make-deployment", "--out", str(tmp_path / "no" / "x.db"), "--engram", str(fake_binary))
    assert nowhere.returncode == 1
    assert nowhere.stderr.strip() == f"Error: {tmp_path / 'no'}: no such directory for --out"
    assert not (tmp_path / "no").exists()


@pytest.mark.engram
def test_now_ends_the_history_at_the_current_time(engram_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "engram.db"
    before = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    made = harness(
        "make-deployment", "--scale", "0.01", "--now", "--out", str(out), "--engram", str(engram_bin)
    )
    assert made.returncode == 0, made.stderr
    reference = datetime.strptime(json.loads(made.stdout)["reference_time"], "%Y-%m-%d %H:%M:%S")
    assert before <= reference <= datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=1)
    connection = sqlite3.connect(out)
    earliest, latest = connection.execute(
        "SELECT min(occurred_at), max(occurred_at) FROM sync_mutations"
    ).fetchone()
    connection.close()
    assert (
        (reference - timedelta(days=92)).strftime("%Y-%m-%d %H:%M:%S") <= earliest <= latest <= str(reference)
    )


@pytest.mark.engram
def test_a_workspace_holds_real_repositories_and_engram_agrees_with_them(
    engram_bin: Path, tmp_path: Path
) -> None:
    workspace = tmp_path / "machine"
    workspace.mkdir()
    summary = generate(
        DeploymentSpec().scaled(0.01), 2, tmp_path / "engram.db", engram_bin, workspace=workspace
    )
    code = workspace.resolve() / "home" / summary.home_key / "code"
    repositories = sorted(path.name for path in code.iterdir() if (path / ".git").is_dir())
    assert repositories == sorted(
        [*summary.enrolled_projects, *summary.phantom_keys[10:], summary.forbidden_key]
    )
    assert Path(summary.designated_directory).is_dir()
    assert not (Path(summary.designated_directory) / ".git").exists()
    world = engram_world(engram_bin, tmp_path / "world", tmp_path / "engram.db")
    doctor = world.run(["doctor", "--json"])
    assert doctor.returncode == 0, meaningful_stderr(doctor.stderr)
    checks = {check["check_id"]: check["result"] for check in json.loads(doctor.stdout)["checks"]}
    assert checks["session_project_directory_mismatch"] == "ok"


@pytest.mark.unit
def test_a_workspace_inside_a_repository_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "inner").mkdir()
    fake_binary = tmp_path / "engram"
    fake_binary.write_text("")
    with pytest.raises(
        DeploymentError, match=r"inner: inside the git repository .*; --workspace must be outside"
    ):
        generate(DeploymentSpec(), 0, tmp_path / "x.db", fake_binary, workspace=tmp_path / "inner")
    assert not (tmp_path / "x.db").exists()
