"""`engram-canary check` and `baseline` against databases written by the real engram v1.20 binary."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from canary_support import rows_digest, run_canary

from engram_sync_kit.canary.report import TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


def save(world: EngramEnvironment, cwd: Path, project: str | None, title: str = "note") -> None:
    args = ["save", title, f"content of {title}"]
    if project is not None:
        args += ["--project", project]
    result = world.run(args, cwd=cwd)
    assert result.returncode == 0, result.stderr


def enroll(world: EngramEnvironment, project: str) -> None:
    result = world.run(["cloud", "enroll", project])
    assert result.returncode == 0, result.stderr


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    directory = tmp_path / "scratch"
    directory.mkdir()
    return directory


def check_json(world: EngramEnvironment, config_home: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_canary(["check", "--db", str(world.db_path), "--format", "json", *extra], config_home)
    return result.returncode, json.loads(result.stdout)


def test_unenrolled_save_is_a_foreign_sync_target_with_evidence(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 1
    assert document["schema"] == "engram-canary/check/v1"
    assert document["status"] == "warning"
    assert document["allowed_targets"] == ["cloud", "cloud:inbox", "local"]
    findings = document["findings"]
    assert isinstance(findings, list) and len(findings) == 1
    finding = findings[0]
    assert finding["check"] == "foreign_sync_target"
    assert finding["severity"] == "warning"
    assert finding["target_key"] == "cloud:scratch"
    assert finding["new"] is True
    evidence = finding["evidence"]
    assert evidence["lifecycle"] == "pending"
    assert evidence["last_enqueued_seq"] == 2
    assert evidence["updated_at"]
    # v1.20 journals the rows in the legacy lane; they are counted through their project column.
    assert evidence["unacked_rows"] == 0
    assert evidence["projects"] == ["scratch"]
    assert evidence["project_unacked_rows"] == 2
    assert evidence["project_unacked_by_lane"] == {"cloud": 2}


def test_enrolled_project_target_is_allowed(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")
    enroll(engram_world, "scratch")

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 0
    assert document["status"] == "ok"
    assert document["findings"] == []
    assert "cloud:scratch" in document["allowed_targets"]
    assert document["summary"]["enrolled_projects"] == ["scratch"]


def test_enrolled_name_is_normalized_like_engram(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "My--Proj")
    enroll(engram_world, "My--Proj")

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert (code, document["findings"]) == (0, [])


def test_text_output_follows_the_plugin_convention(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")

    result = run_canary(["check", "--db", str(engram_world.db_path)], tmp_path / "xdg")

    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert lines[0] == (
        "ENGRAM-CANARY WARNING - 1 foreign sync target (1 new) | foreign_targets=1;1;;0 "
        "new_foreign_targets=1;1;10;0 unacked_rows=2;;;0 allowed_targets=3;;;0"
    )
    assert lines[1].startswith("[NEW] warning foreign_sync_target: sync target cloud:scratch")


def test_config_extra_allowed_key(engram_world: EngramEnvironment, scratch: Path, tmp_path: Path) -> None:
    save(engram_world, scratch, "scratch")
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"  # the default location
    config.parent.mkdir(parents=True)
    config.write_text("allowed_targets:\n  - cloud:scratch\n")

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 0
    assert "cloud:scratch" in document["allowed_targets"]


def test_baseline_silences_known_targets_only(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    config_home = tmp_path / "xdg"
    save(engram_world, scratch, "scratch")

    recorded = run_canary(["baseline", "--db", str(engram_world.db_path)], config_home)
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.startswith("acknowledged 1 findings for ")
    assert recorded.stdout.splitlines()[1] == "  foreign_sync_target cloud:scratch (2 rows)"
    baseline_file = config_home / "engram-canary" / "baseline.json"
    stored = json.loads(baseline_file.read_text())
    assert stored["schema"] == "engram-canary/baseline/v2"
    acknowledgements = stored["databases"][str(engram_world.db_path.resolve())]["acknowledgements"]
    assert [(a["check"], a["target_key"], a["size"]) for a in acknowledgements] == [
        ("foreign_sync_target", "cloud:scratch", 2)
    ]

    code, document = check_json(engram_world, config_home)
    assert code == 0
    assert document["status"] == "ok"
    assert [(f["target_key"], f["new"]) for f in document["findings"]] == [("cloud:scratch", False)]

    save(engram_world, scratch, "another")
    code, document = check_json(engram_world, config_home)
    assert code == 1
    assert sorted((f["target_key"], f["new"]) for f in document["findings"]) == [
        ("cloud:another", True),
        ("cloud:scratch", False),
    ]
    assert document["summary"]["new_foreign_targets"] == 1

    code, document = check_json(engram_world, config_home, "--no-baseline")
    assert code == 1
    assert all(f["new"] for f in document["findings"])


def test_many_new_targets_are_critical(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"  # the default location
    config.parent.mkdir(parents=True)
    config.write_text("thresholds:\n  critical_new_foreign_targets: 2\n")
    save(engram_world, scratch, "one")
    save(engram_world, scratch, "two")

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert (code, document["status"]) == (2, "critical")


@pytest.mark.parametrize(("threshold", "severity", "code"), [(2, "critical", 2), (3, "warning", 1)])
def test_a_foreign_target_is_critical_from_exactly_its_threshold_of_rows(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path, threshold: int, severity: str, code: int
) -> None:
    save(engram_world, scratch, "scratch")  # two unacked rows: the session and the observation
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"  # the default location
    config.parent.mkdir(parents=True)
    config.write_text(f"thresholds:\n  critical_unacked_rows: {threshold}\n")

    exit_code, document = check_json(engram_world, tmp_path / "xdg")

    [finding] = document["findings"]
    assert (finding["check"], finding["size"], finding["severity"]) == ("foreign_sync_target", 2, severity)
    assert (exit_code, document["status"]) == (code, severity)


def test_check_never_changes_the_database(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")
    save(engram_world, scratch, None, "unscoped")
    before = rows_digest(engram_world.db_path)
    db_bytes = engram_world.db_path.read_bytes()

    for args in (["check"], ["check", "--format", "json"], ["baseline"], ["check", "--no-baseline"]):
        run_canary([*args, "--db", str(engram_world.db_path)], tmp_path / "xdg")

    assert rows_digest(engram_world.db_path) == before
    assert engram_world.db_path.read_bytes() == db_bytes


def test_prometheus_textfile(engram_world: EngramEnvironment, scratch: Path, tmp_path: Path) -> None:
    save(engram_world, scratch, "scratch")
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()

    result = run_canary(
        ["check", "--db", str(engram_world.db_path), "--textfile-dir", str(textfiles)], tmp_path / "xdg"
    )

    assert result.returncode == 1
    db = str(engram_world.db_path)
    assert [path.name for path in textfiles.iterdir()] == [textfile_name(TEXTFILE_PREFIX, db)]
    text = (textfiles / textfile_name(TEXTFILE_PREFIX, db)).read_text()
    assert f'engram_canary_status{{db="{db}"}} 1.0' in text
    assert f'engram_canary_new_foreign_targets{{db="{db}"}} 1.0' in text
    assert (
        f'engram_canary_foreign_target_unacked_rows{{check="foreign_sync_target",db="{db}",new="true",'
        f'target_key="cloud:scratch"}} 2.0'
    ) in text


def test_mutation_rows_outside_the_space_are_findings(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "seed")
    enroll(engram_world, "seed")
    # Simulates legacy data: engram v1.20 itself journals into 'cloud' only, older or newer builds
    # (and chunk imports) may leave rows under a per-key target.
    connection = sqlite3.connect(engram_world.db_path)
    with connection:
        connection.execute("INSERT INTO sync_state (target_key) VALUES ('cloud:legacy')")
        connection.executemany(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project, acked_at) "
            "VALUES ('cloud:legacy', 'observation', ?, 'upsert', '{}', 'legacy', ?)",
            [("obs-1", None), ("obs-2", None), ("obs-3", "2026-09-01 00:00:00")],
        )
    connection.close()

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 1
    by_check = {f["check"]: f for f in document["findings"]}
    assert sorted(by_check) == ["foreign_mutation_target", "foreign_sync_target"]
    mutation = by_check["foreign_mutation_target"]
    assert mutation["target_key"] == "cloud:legacy"
    evidence = mutation["evidence"]
    assert (evidence["rows"], evidence["unacked_rows"], evidence["in_sync_state"]) == (3, 2, True)
    assert evidence["last_seq"] - evidence["first_seq"] == 2
    assert by_check["foreign_sync_target"]["evidence"]["unacked_rows"] == 2
    assert document["summary"]["foreign_targets"] == 1


def test_mutation_rows_on_a_target_without_a_sync_state_row_say_so(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "seed")
    enroll(engram_world, "seed")
    # Simulates legacy data: a row journaled under a per-key target that never got a sync_state row.
    connection = sqlite3.connect(engram_world.db_path)
    with connection:
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
            "VALUES ('cloud:orphan', 'observation', 'obs-1', 'upsert', '{}', 'orphan')"
        )
    connection.close()

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 1
    [finding] = document["findings"]
    assert (finding["check"], finding["target_key"]) == ("foreign_mutation_target", "cloud:orphan")
    evidence = finding["evidence"]
    assert (evidence["rows"], evidence["unacked_rows"], evidence["in_sync_state"]) == (1, 1, False)


def test_json_document_keys_are_stable(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")

    _, document = check_json(engram_world, tmp_path / "xdg")

    assert sorted(document) == [
        "allowed_targets",
        "checked_at",
        "db",
        "error",
        "findings",
        "schema",
        "status",
        "summary",
    ]
    assert sorted(document["findings"][0]) == [
        "acknowledgement",
        "check",
        "evidence",
        "key",
        "message",
        "new",
        "realarm",
        "severity",
        "size",
        "target_key",
    ]
    assert str(document["checked_at"]).endswith("Z")


def test_older_schema_without_project_column_still_checks(
    engram_world: EngramEnvironment, scratch: Path, tmp_path: Path
) -> None:
    save(engram_world, scratch, "scratch")
    # Simulates legacy data: an older engram file whose sync_mutations has no project column and
    # whose database knows no enrollments yet.
    connection = sqlite3.connect(engram_world.db_path)
    with connection:
        connection.execute("DROP INDEX idx_sync_mutations_project")
        connection.execute("ALTER TABLE sync_mutations DROP COLUMN project")
        connection.execute("DROP TABLE sync_enrolled_projects")
    connection.close()

    code, document = check_json(engram_world, tmp_path / "xdg")

    assert code == 1
    [finding] = document["findings"]
    assert finding["target_key"] == "cloud:scratch"
    assert finding["evidence"]["unacked_rows"] == 0
    assert "project_unacked_rows" not in finding["evidence"]
    assert document["summary"]["enrolled_projects"] == []
