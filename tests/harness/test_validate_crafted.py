"""validate's own reads of a crafted engram file (issue 35, items 6 and 9): a generated column it never
asked for, and BLOBs where engram writes text.

The home is made by the real engram v1.20 binary; the crafted parts are a SIMULATION OF LEGACY DATA (an
attacker's or a damaged file), written straight into engram's tables.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from engram_sync_kit.harness.deployment.many_targets import add_foreign_targets, make_home
from engram_sync_kit.harness.validate import _sync_state_cloud, foreign_targets

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
