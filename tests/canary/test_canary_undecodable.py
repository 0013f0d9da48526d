"""One sync_mutations row whose payload is not valid UTF-8 must not blind the monitor: check, inbox and
watch name its seq as a finding and carry on with every other row."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest
from canary_support import WatchProcess, run_canary

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

BAD_PAYLOAD = b'{"sync_id":"obs-bad","title":"caf\xe9 \xff\xfe","project":"alpha"}'


@pytest.fixture
def home(engram_world: EngramEnvironment) -> tuple[EngramEnvironment, int]:
    """alpha (not enrolled: its rows are inbox rows) with three memories, beta enrolled; then one of
    alpha's payloads is made invalid UTF-8 (SIMULATION OF LEGACY DATA: engram v1.20 itself writes
    payloads with json.Marshal, which replaces invalid bytes; another writer or a damaged file does not)."""
    for number in range(3):
        result = engram_world.run(["save", f"alpha note {number}", "c", "--project", "alpha"])
        assert result.returncode == 0, result.stderr
    assert engram_world.run(["save", "beta note", "c", "--project", "beta"]).returncode == 0
    assert engram_world.run(["cloud", "enroll", "beta"]).returncode == 0
    with contextlib.closing(sqlite3.connect(engram_world.db_path, isolation_level=None)) as connection:
        (seq,) = connection.execute(
            "SELECT seq FROM sync_mutations WHERE entity = 'observation' AND project = 'alpha' "
            "ORDER BY seq LIMIT 1 OFFSET 1"
        ).fetchone()
        connection.execute(
            "UPDATE sync_mutations SET payload = CAST(? AS TEXT) WHERE seq = ?", (BAD_PAYLOAD, seq)
        )
    return engram_world, int(seq)


def test_check_names_the_row_and_checks_the_rest(home: tuple[EngramEnvironment, int], tmp_path: Path) -> None:
    world, seq = home
    checked = run_canary(["check", "--db", str(world.db_path)], tmp_path / "xdg")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.startswith("ENGRAM-CANARY WARNING - "), checked.stdout
    assert (
        f"[NEW] warning undecodable_payload: 1 sync_mutations row has a payload that is not valid UTF-8 "
        f"(seq {seq}); left out of the inbox and its triage" in checked.stdout
    ), checked.stdout
    assert "foreign_sync_target: sync target cloud:alpha" in checked.stdout  # the rest is still checked
    assert checked.stderr == ""

    as_json = run_canary(["check", "--db", str(world.db_path), "--format", "json"], tmp_path / "xdg")
    document = json.loads(as_json.stdout)
    (finding,) = (f for f in document["findings"] if f["check"] == "undecodable_payload")
    assert finding["evidence"] == {"count": 1, "seqs": [seq], "first_seq": seq, "last_seq": seq}
    assert document["summary"]["inbox_keys"]["alpha"]["memories"] == 2  # the other two memories
    assert document["summary"]["undecodable_payloads"] == 1


def test_inbox_list_and_show_name_the_row_and_list_the_rest(
    home: tuple[EngramEnvironment, int], tmp_path: Path
) -> None:
    world, seq = home
    note = (
        f"note: 1 inbox row left out, its payload is not valid UTF-8 (seq {seq}); "
        "`engram-canary check` reports it as undecodable_payload"
    )
    listed = run_canary(["inbox", "list", "--db", str(world.db_path)], tmp_path / "xdg")
    assert listed.returncode == 0, listed.stderr
    assert "alpha" in listed.stdout
    assert listed.stdout.rstrip("\n").splitlines()[-1] == note, listed.stdout
    shown = run_canary(["inbox", "show", "alpha", "--db", str(world.db_path)], tmp_path / "xdg")
    assert shown.returncode == 0, shown.stderr
    assert "alpha note 0" in shown.stdout and "alpha note 2" in shown.stdout
    assert "alpha note 1" not in shown.stdout
    assert shown.stdout.rstrip("\n").splitlines()[-1] == note, shown.stdout
    as_json = run_canary(["inbox", "list", "--db", str(world.db_path), "--format", "json"], tmp_path / "xdg")
    assert as_json.returncode == 0, as_json.stderr
    assert {entry["key"] for entry in json.loads(as_json.stdout)} >= {"alpha"}
    assert as_json.stderr.rstrip("\n") == note


def test_watch_reports_what_check_reports(home: tuple[EngramEnvironment, int], tmp_path: Path) -> None:
    world, seq = home
    watcher = WatchProcess(["--db", str(world.db_path), "--no-baseline"], tmp_path / "xdg")
    try:
        watcher.wait_started()
        line = watcher.wait_for(lambda text: "undecodable_payload" in text, what="the finding")
    finally:
        assert watcher.stop() == 0
    assert line == (
        f"engram-canary WARNING: undecodable_payload 1 sync_mutations row has a payload that is not valid "
        f"UTF-8 (seq {seq}); left out of the inbox and its triage db={world.db_path}"
    )
    assert watcher.matching(lambda text: "UNKNOWN" in text) == []


def test_the_cursor_reads_each_row_once_and_a_restored_file_from_the_start(
    home: tuple[EngramEnvironment, int], tmp_path: Path
) -> None:
    world, seq = home

    def named() -> list[int]:
        done = run_canary(["check", "--db", str(world.db_path), "--format", "json"], tmp_path / "xdg")
        found = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "undecodable_payload"]
        return list(found[0]["evidence"]["seqs"]) if found else []

    assert named() == [seq]
    assert named() == [seq]  # from the cursor: the same answer
    restored = tmp_path / "restored.db"
    with (
        contextlib.closing(sqlite3.connect(f"file:{world.db_path}?mode=ro", uri=True)) as source,
        contextlib.closing(sqlite3.connect(restored, isolation_level=None)) as target,
    ):
        source.backup(target)
        # SIMULATION OF LEGACY DATA: the restored copy has one more bad payload, below the cursor's seq.
        target.execute("UPDATE sync_mutations SET payload = CAST(? AS TEXT) WHERE seq = 1", (BAD_PAYLOAD,))
    restored.replace(world.db_path)
    assert named() == [1, seq]
