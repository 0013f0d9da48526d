"""The one rule for a triage --apply on v2/v3 (refused in one line, nothing written, and the test ends
there), and copies of a home opened as v2/v3.

tests/engram_schemas/per_version.py sets the version per test; the v2/v3 shapes are predicted from
source (tests/engram_schemas/open_as.py), never observed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from canary_support import rows_digest
from engram_schemas.builder import V1_LINE, V2, V2_RC12, V3, V120
from engram_schemas.open_as import fixture_schema, open_as
from engram_schemas.per_version import RefusedAsPredicted, current

from engram_sync_kit.canary.schema_support import V1_LINE as NAMED_V1_LINE
from engram_sync_kit.canary.schema_support import V2 as NAMED_V2
from engram_sync_kit.canary.schema_support import V2_RC12 as NAMED_V2_RC12
from engram_sync_kit.canary.schema_support import V3 as NAMED_V3

NAMED = {
    V1_LINE: NAMED_V1_LINE.format(user_version=8),
    V2: NAMED_V2,
    V2_RC12: NAMED_V2_RC12,
    V3: NAMED_V3,
}
REFUSAL = "refusing to write: this database looks like engram "


def db_argument(args: Sequence[str]) -> Path | None:
    for position, arg in enumerate(args):
        if arg == "--db" and position + 1 < len(args):
            return Path(args[position + 1])
        if arg.startswith("--db="):
            return Path(arg.removeprefix("--db="))
    return None


def require_opened(db: Path | None) -> None:
    """On v2/v3 the file the canary reads must have been opened as that version (else the test would
    read v1.20 under a v2/v3 name)."""
    version = current()
    if version == V120 or db is None or not db.exists():
        return
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        stamped = connection.execute("PRAGMA user_version").fetchone()[0]
    assert (
        stamped == fixture_schema(version).user_version
    ), f"a {version} test reads {db}, which no {version} open has touched (user_version {stamped})"


def run_apply(
    args: Sequence[str], db: Path | None, run: Callable[[], subprocess.CompletedProcess[str]]
) -> subprocess.CompletedProcess[str]:
    """Run a canary command (on v2/v3, on a file opened as that version). On v1.20 that is all. On v2/v3
    an --apply must write nothing: the schema refusal ends the test (RefusedAsPredicted); an answer that
    comes first (nothing to do, a lock, a validation the test expects) is returned to it."""
    version = current()
    require_opened(db)
    if version == V120 or "--apply" not in args or db is None or not db.exists():
        return run()
    before = rows_digest(db)
    result = run()
    assert rows_digest(db) == before, f"--apply wrote a {version} database: {result.stdout}{result.stderr}"
    output = result.stdout + result.stderr
    if REFUSAL in output:
        lines = [line for line in output.splitlines() if line.strip()]
        assert lines == [line for line in lines if REFUSAL in line] and len(lines) == 1, output
        assert f"{REFUSAL}{NAMED[version]}" in output, output
        raise RefusedAsPredicted(lines[0])
    return result


def copies_opened_as_v2_v3(db: Path, directory: Path) -> Iterator[tuple[str, Path]]:
    """For a test whose home is too costly to build three times: a consistent copy of `db` per newer
    version (SQLite's backup API), opened as that version, each in its own directory."""
    for version in (V1_LINE, V2, V2_RC12, V3):
        copy = directory / f"as-{version}" / db.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        with (
            contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as source,
            contextlib.closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
        open_as(version, copy)
        yield version, copy
