"""An engram home with many foreign targets, for the scaling benchmark and the scale tests.

The real engram v1.20 binary creates the home (`engram save`, `engram cloud enroll`, its own
migrations); the foreign targets are then a SIMULATION OF LEGACY DATA written straight into engram's
tables: per target one `cloud:<project>` sync_state row (what engram's sync layer minted for an
unenrolled project) and `rows_per_target` unacked session rows of that project on the legacy lane.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from pathlib import Path

ENROLLED_PROJECT = "alpha"


def foreign_project(number: int) -> str:
    return f"phantom-{number:05d}"


def make_home(engram: Path, root: Path) -> Path:
    """A fresh engram home under ROOT (data dir `root/data`, HOME `root/home`) made by the binary."""
    data, home = root / "data", root / "home"
    data.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    env = {"ENGRAM_DATA_DIR": str(data), "HOME": str(home), "PATH": "/usr/bin:/bin"}
    for args in (["save", "alpha note", "c", "--project", ENROLLED_PROJECT], ["cloud", "enroll", "alpha"]):
        subprocess.run([str(engram), *args], env=env, capture_output=True, check=True, timeout=60, cwd=home)
    return data / "engram.db"


def add_foreign_targets(db: Path, targets: int, rows_per_target: int = 2) -> None:
    """SIMULATION OF LEGACY DATA: TARGETS foreign `cloud:<project>` keys, each with unacked rows."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("PRAGMA busy_timeout = 30000")
        connection.execute("BEGIN IMMEDIATE")
        for number in range(targets):
            project = foreign_project(number)
            connection.execute(
                "INSERT INTO sync_state (target_key, lifecycle) VALUES (?, 'pending')", (f"cloud:{project}",)
            )
            connection.executemany(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, project) "
                "VALUES ('cloud', 'session', ?, 'upsert', ?, ?)",
                [
                    (f"s-{project}-{row}", f'{{"id":"s-{project}-{row}","project":"{project}"}}', project)
                    for row in range(rows_per_target)
                ],
            )
        connection.execute("COMMIT")
