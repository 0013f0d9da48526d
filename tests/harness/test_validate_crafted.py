"""validate's own reads of a crafted engram file (issue 35, items 6 and 9): a generated column it never
asked for, and BLOBs where engram writes text.

The home is made by the real engram v1.20 binary; the crafted parts are a SIMULATION OF LEGACY DATA (an
attacker's or a damaged file), written straight into engram's tables.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.harness.deployment.many_targets import add_foreign_targets, make_home
from engram_sync_kit.harness.validate.run import _sync_state_cloud, foreign_targets

pytestmark = pytest.mark.engram


@pytest.fixture
def home(engram_bin: Path, tmp_path: Path) -> Path:
    db = make_home(engram_bin, tmp_path / "world")
    add_foreign_targets(db, 2)  # SIMULATION OF LEGACY DATA
    return db


def _craft(db: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        for sql in statements:
            connection.execute(sql)


def test_the_legacy_lanes_state_is_read_without_computing_a_crafted_generated_column(home: Path) -> None:
    """Failed first: `SELECT *` computed the crafted column, whose overflow lost engram's last_error."""
    _craft(
        home,
        "UPDATE sync_state SET last_error = 'push refused: 403' WHERE target_key = 'cloud'",
        # A virtual column is computed only when read: this one raises "integer overflow" when it is.
        "ALTER TABLE sync_state ADD COLUMN crafted GENERATED ALWAYS AS (abs(-9223372036854775808)) VIRTUAL",
    )
    assert _sync_state_cloud(home).last_error == "push refused: 403"


def test_a_crafted_generated_column_in_place_of_last_error_is_not_computed(home: Path) -> None:
    _craft(
        home,
        "ALTER TABLE sync_state RENAME COLUMN last_error TO last_error_was",
        "ALTER TABLE sync_state ADD COLUMN last_error GENERATED ALWAYS AS (abs(-9223372036854775808)) VIRTUAL",
    )
    assert _sync_state_cloud(home).last_error is None


def test_blobs_in_sync_state_read_as_text(home: Path) -> None:
    """Failed first: the last error read as "b'\\xff\\xfe'", the Python spelling of the bytes."""
    _craft(
        home,
        "UPDATE sync_state SET last_error = x'fffe' WHERE target_key = 'cloud'",
        "UPDATE sync_state SET lifecycle = x'00ff', updated_at = x'32' WHERE target_key = 'cloud:phantom-00001'",
    )
    assert _sync_state_cloud(home).last_error == "\ufffd\ufffd"
    by_key = {target.target_key: target for target in foreign_targets(home)}
    assert by_key["cloud:phantom-00001"].lifecycle == "\x00\ufffd"
    assert by_key["cloud:phantom-00001"].updated_at == "2"


def test_validate_runs_to_its_report_on_a_file_with_every_odd_row(
    home: Path, tmp_path: Path, engram_bin: Path
) -> None:
    """The whole rehearsal, the real engram serving its copy, on a file with a key and a project that are
    not valid UTF-8 (the skip-scan hung forever), BLOBs in sync_state (a traceback) and an acked seq past
    2^40 (a 137 GB bitmap). SIMULATION OF LEGACY DATA, all of it. Failed first: killed at the timeout."""
    _craft(
        home,
        "INSERT INTO sync_state (target_key) VALUES (CAST(x'636c6f75643a6361668ff0ff' AS TEXT))",
        "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) VALUES "
        "(CAST(x'636c6f75643a6361668ff0ff' AS TEXT), 'session', 's-bad', 'upsert', '{}', CAST(x'61fe' AS TEXT))",
        "UPDATE sync_state SET lifecycle = x'00ff' WHERE target_key = 'cloud:phantom-00001'",
        "INSERT INTO sync_mutations (seq, target_key, entity, entity_key, op, payload, project, acked_at) VALUES "
        "(1099511627776, 'cloud', 'session', 's-far', 'upsert', '{}', 'alpha', '2026-01-01 00:00:00')",
    )
    report = tmp_path / "report.json"
    aliases = tmp_path / "aliases.yaml"
    aliases.write_text("")
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "engram-harness"),
            "validate",
            "--db",
            str(home),
            "--engram",
            str(engram_bin),
            "--ticks",
            "1",
            "--no-what-if",
            "--no-doctor",
            "--aliases",
            str(aliases),
            "--json",
            str(report),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert report.exists(), done.stdout + done.stderr
    document = json.loads(report.read_text())
    keys = {target["target_key"] for target in document["current"]["foreign_targets_before"]}
    assert "cloud:caf\ufffd\ufffd\ufffd" in keys and "cloud:phantom-00001" in keys, keys
