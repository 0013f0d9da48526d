"""engram v2.0.0-rc.12+ and v3 journal no save of an unenrolled project (PR #1157; predicted from
enqueueSyncMutationWithSourceTx, internal/store/store.go @d4397781), so the canary answers "which memories
will never sync" from the memories themselves: live observations of unenrolled projects, with their
ages, under the inbox tripwires (7 days; unsorted growth). Every row written here SIMULATES what such an
engram leaves (a save is an observations row and nothing in sync_mutations); no such binary builds here.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engram_schemas.builder import ENROLLED, PHANTOM_TARGET, STRAY, V2, V2_RC12, V3, V120, build

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.canary.config import CanaryConfig
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.inbox import cursor as inbox_cursor
from engram_sync_kit.canary.inbox.cursor import cursor_tripwire_findings
from engram_sync_kit.canary.inbox.selection import select_unjournaled_memories, tripwire_findings

DOCTOR_REPAIR = "engram doctor repair --check sync_target_closed_space"


def check_json(db: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["check", "--db", str(db), "--format", "json", "--no-baseline"])
    return dict(json.loads(result.output))


def save_unenrolled(db: Path, project: str, count: int, *, age: timedelta, directory: str) -> None:
    """SIMULATED rc.12+ saves: a session and observations of an unenrolled project, no journal row."""
    created = (datetime.now(UTC) - age).strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.closing(sqlite3.connect(db)) as connection:
        session = f"sess-{project}-{count}"
        connection.execute(
            "INSERT INTO sessions (id, project, directory, started_at) VALUES (?, ?, ?, ?)",
            (session, project, directory, created),
        )
        for index in range(count):
            connection.execute(
                "INSERT INTO observations (sync_id, session_id, type, title, content, project, created_at, "
                "updated_at) VALUES (?, ?, 'decision', 't', 'c', ?, ?, ?)",
                (f"obs-{project}-{count}-{index}", session, project, created, created),
            )
        connection.commit()


@pytest.fixture
def fresh_rc12(tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    build(V2_RC12, path)
    return path


def test_the_journal_holds_nothing_of_the_unenrolled_project(fresh_rc12: Path) -> None:
    with contextlib.closing(sqlite3.connect(fresh_rc12)) as connection:
        journaled = connection.execute("SELECT count(*) FROM sync_mutations WHERE project = ?", (STRAY,))
        assert journaled.fetchone()[0] == 0


def test_an_old_memory_of_an_unenrolled_project_trips_the_7_day_wire(fresh_rc12: Path) -> None:
    # A designated project (not its directory's name) gets an inbox key of its own (design, Stage A).
    save_unenrolled(
        fresh_rc12, "team-notes", 2, age=timedelta(days=7, minutes=5), directory="/home/u/elsewhere"
    )
    result = check_json(fresh_rc12)
    (aged,) = (f for f in result["findings"] if f["check"] == "inbox_age")
    assert (aged["key"], aged["size"], aged["evidence"]["threshold_days"]) == ("team-notes", 2, 7.0), aged
    assert aged["message"].startswith(
        "inbox key 'team-notes' has waited 7.0 days (> 7): 2 memories never delivered"
    )
    assert result["summary"]["inbox_keys"]["team-notes"]["memories"] == 2


def test_a_memory_younger_than_7_days_trips_nothing(fresh_rc12: Path) -> None:
    save_unenrolled(
        fresh_rc12, "team-notes", 2, age=timedelta(days=6, hours=23), directory="/home/u/elsewhere"
    )
    result = check_json(fresh_rc12)
    assert not [f for f in result["findings"] if f["check"] == "inbox_age"]
    assert result["summary"]["inbox_keys"]["team-notes"]["memories"] == 2


def test_unsorted_growth_is_counted_from_memories(fresh_rc12: Path) -> None:
    save_unenrolled(fresh_rc12, "scratch", 101, age=timedelta(days=1), directory="/tmp/scratch")
    result = check_json(fresh_rc12)
    (growth,) = (f for f in result["findings"] if f["check"] == "unsorted_growth")
    assert growth["size"] == 101 and growth["evidence"]["threshold_rows"] == 100, growth


def test_100_new_unsorted_memories_are_not_growth(fresh_rc12: Path) -> None:
    save_unenrolled(fresh_rc12, "scratch", 100, age=timedelta(days=1), directory="/tmp/scratch")
    assert not [f for f in check_json(fresh_rc12)["findings"] if f["check"] == "unsorted_growth"]


def test_enrolled_and_deleted_memories_are_not_inbox_debt(fresh_rc12: Path) -> None:
    with contextlib.closing(sqlite3.connect(fresh_rc12)) as connection:
        connection.execute(
            "UPDATE observations SET deleted_at = '2026-11-02 00:00:00' WHERE project = ?", (STRAY,)
        )
        connection.commit()
    result = CliRunner().invoke(cli, ["inbox", "list", "--db", str(fresh_rc12), "--format", "json"])
    assert json.loads(result.output) == [], result.output
    assert ENROLLED not in result.output


def test_the_cursor_and_a_full_read_agree_and_see_a_new_memory_at_once(fresh_rc12: Path) -> None:
    config = CanaryConfig()
    with EngramDb.open(fresh_rc12) as db:
        first, _ = cursor_tripwire_findings(db, config)
        assert [f.model_dump() for f in first] == [
            f.model_dump() for f in tripwire_findings(db, config.inbox)
        ]
    # A save on rc.12+ moves no journal seq, so the cursor must not hide it.
    save_unenrolled(fresh_rc12, "scratch", 101, age=timedelta(hours=1), directory="/tmp/scratch")
    with EngramDb.open(fresh_rc12) as db:
        second, _ = cursor_tripwire_findings(db, config)
        assert "unsorted_growth" in {f.check for f in second}
        assert [f.model_dump() for f in second] == [
            f.model_dump() for f in tripwire_findings(db, config.inbox)
        ]


@pytest.mark.parametrize("version", [V120, V2])
def test_where_every_save_is_journaled_the_journal_answers_alone(version: str, tmp_path: Path) -> None:
    """v1.20 (observed) and rc.11 journal every save: a memory without a journal row there is not read as
    inbox debt (after a v1.20 `inbox drop` acks its rows, it must stay dropped)."""
    path = tmp_path / "engram.db"
    build(version, path)
    save_unenrolled(path, "scratch", 101, age=timedelta(days=1), directory="/tmp/scratch")
    assert not [f for f in check_json(path)["findings"] if f["check"] == "unsorted_growth"]


def test_a_memory_with_a_legacy_journal_row_is_counted_once(tmp_path: Path) -> None:
    """v3's fill keeps the stray project's journal rows from before the upgrade: one memory, one count."""
    path = tmp_path / "engram.db"
    build(V3, path)
    result = CliRunner().invoke(cli, ["inbox", "list", "--db", str(path), "--format", "json"])
    assert [(entry["count"], entry["telemetry"]) for entry in json.loads(result.output)] == [(1, 2)]


@pytest.mark.parametrize("version", [V2_RC12, V3])
def test_a_foreign_target_on_rc12_is_a_legacy_row_with_engrams_own_repair(
    version: str, tmp_path: Path
) -> None:
    path = tmp_path / "engram.db"
    build(version, path)
    (phantom,) = (f for f in check_json(path)["findings"] if f["target_key"] == PHANTOM_TARGET)
    assert "this target is a legacy row from before the upgrade" in phantom["evidence"]["note"]
    assert phantom["evidence"]["repair"].startswith(DOCTOR_REPAIR), phantom["evidence"]


@pytest.mark.parametrize("version", [V120, V2])
def test_before_rc12_a_foreign_target_names_no_doctor_repair(version: str, tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    build(version, path)
    (phantom,) = (f for f in check_json(path)["findings"] if f["target_key"] == PHANTOM_TARGET)
    assert "repair" not in phantom["evidence"]
    assert "legacy row from before the upgrade" not in phantom["evidence"]["note"]


def test_triage_cannot_drop_a_memory_engram_never_journaled(fresh_rc12: Path) -> None:
    key = json.loads(
        CliRunner().invoke(cli, ["inbox", "list", "--db", str(fresh_rc12), "--format", "json"]).output
    )
    for args in (["drop"], ["claim", "--as", ENROLLED]):
        result = CliRunner().invoke(
            cli, ["inbox", args[0], "--db", str(fresh_rc12), "--project", key[0]["key"], *args[1:]]
        )
        assert result.exit_code == 3 and result.output.count("\n") == 1, result.output
        assert "1 memories engram never journaled" in result.output, result.output
        assert "nothing to claim or drop; enroll the project to send them" in result.output, result.output


def test_inbox_show_prints_a_memory_engram_never_journaled(fresh_rc12: Path) -> None:
    result = CliRunner().invoke(cli, ["inbox", "show", "unsorted", "--db", str(fresh_rc12)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "inbox key 'unsorted': 1 memories waiting",
        "       0  2026-11-01 10:00:00  decision     title stray-dir",
        "          content",
        "          cwd /home/u/stray-dir",
    ]


def test_odd_memories_are_read_in_one_piece(fresh_rc12: Path) -> None:
    """BLOB ids and project, bad UTF-8, a 5 MB content and an unparsable date: listed, never a traceback."""
    with contextlib.closing(sqlite3.connect(fresh_rc12)) as connection:
        insert = (
            "INSERT INTO observations (sync_id, session_id, type, title, content, project, created_at, updated_at) "
            "VALUES (?, ?, 'decision', ?, ?, ?, ?, '')"
        )
        connection.execute(
            insert, ("obs-bad", "sess-stray-dir", b"\xffA", b"\xc3", b"note\xff", "not a date")
        )
        connection.execute(insert, (b"\x01\x02", "no-such-session", "t", "c", b"blob", "2026-11-01"))
        connection.execute(insert, ("obs-huge", "sess-stray-dir", "t", "x" * 5_000_000, STRAY, "2026-11-01"))
        connection.commit()
    listed = CliRunner().invoke(cli, ["inbox", "list", "--db", str(fresh_rc12), "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert sum(entry["count"] for entry in json.loads(listed.output)) == 4
    shown = CliRunner().invoke(cli, ["inbox", "show", "unsorted", "--db", str(fresh_rc12)])
    assert shown.exit_code == 0 and "\ufffdA" in shown.output, shown.output
    assert max(len(line) for line in shown.output.splitlines()) < 200
    assert check_json(fresh_rc12)["status"] == "warning"


def test_the_memories_are_kept_in_a_cursor_until_a_save_a_delete_or_an_enrollment(
    fresh_rc12: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = select_unjournaled_memories

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_cursor, "select_unjournaled_memories", counted)  # the name inbox_cursor calls
    config = CanaryConfig()

    def aged_keys() -> set[str]:
        with EngramDb.open(fresh_rc12) as db:
            findings, _ = cursor_tripwire_findings(db, config)
        return {str(f.key) for f in findings if f.check == "inbox_age"}

    save_unenrolled(fresh_rc12, "team-notes", 2, age=timedelta(days=9), directory="/home/u/elsewhere")
    assert (aged_keys(), len(reads)) == ({"team-notes"}, 1)
    assert (aged_keys(), len(reads)) == ({"team-notes"}, 1)  # unchanged: the cursor answers
    with contextlib.closing(sqlite3.connect(fresh_rc12)) as connection:
        connection.execute(
            "UPDATE observations SET deleted_at = datetime('now') WHERE project = 'team-notes'"
        )
        connection.commit()
    assert (aged_keys(), len(reads)) == (set(), 2)
    save_unenrolled(fresh_rc12, "team-notes", 3, age=timedelta(days=9), directory="/home/u/elsewhere")
    assert (aged_keys(), len(reads)) == ({"team-notes"}, 3)
    with contextlib.closing(sqlite3.connect(fresh_rc12)) as connection:
        connection.execute("INSERT INTO sync_enrolled_projects (project) VALUES ('team-notes')")
        connection.commit()
    assert (aged_keys(), len(reads)) == (set(), 4)
