"""Benchmark of reading the memories engram v2.0.0-rc.12+/v3 never journals: `python -m bench.unjournaled`.

On those generations the inbox tripwires count live observations of unenrolled projects
(canary.inbox.select_unjournaled_memories), kept in a cursor of their own (they move no journal seq, so the
journal's cursor cannot keep them). The database is the rc.12+ fixture (tests/fixtures/engram_schemas/v2-rc12.sql,
predicted from source) filled with N SIMULATED memories of 50 unenrolled projects in 200 sessions, plus as
many memories of an enrolled project (which the SQL must leave out). Measured: the library read (median of
--rounds), `engram-canary check --full` in process, and `check` of the unchanged file through the
memories cursor (canary.inbox_cursor.unjournaled_inputs), per N. The results go to bench/results/.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "unjournaled.json"


def build(path: Path, memories: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from engram_schemas.builder import V2_RC12
    from engram_schemas.builder import build as build_fixture

    build_fixture(V2_RC12, path)
    with sqlite3.connect(path) as connection:
        connection.executemany(
            "INSERT INTO sessions (id, project, directory, started_at) VALUES (?, ?, ?, '2026-11-20 00:00:00')",
            [(f"s{i}", f"p{i % 50}", f"/home/u/p{i % 50}") for i in range(200)],
        )
        rows = [(f"o{i}", f"s{i % 200}", f"p{i % 200 % 50}") for i in range(memories)]
        rows += [(f"e{i}", "sess-enrolled-app", "enrolled-app") for i in range(memories)]
        connection.executemany(
            "INSERT INTO observations (sync_id, session_id, type, title, content, project, created_at, "
            "updated_at) VALUES (?, ?, 'decision', 't', 'some content', ?, '2026-11-20 00:00:00', '')",
            rows,
        )


def measure(memories: int, rounds: int) -> dict[str, object]:
    from engram_sync_kit.canary.cli import cli
    from engram_sync_kit.canary.db import EngramDb
    from engram_sync_kit.canary.derive import AliasMap
    from engram_sync_kit.canary.inbox.selection import select_unjournaled_memories

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "engram.db"
        build(path, memories)
        library, whole, cached, found = [], [], [], 0
        for _ in range(rounds):
            with EngramDb.open(path) as db:
                started = time.perf_counter()
                with db.read_transaction():
                    found = len(select_unjournaled_memories(db, AliasMap()))
                library.append(time.perf_counter() - started)
            started = time.perf_counter()
            CliRunner().invoke(
                cli, ["check", "--db", str(path), "--no-baseline", "--format", "json", "--full"]
            )
            whole.append(time.perf_counter() - started)
            started = time.perf_counter()
            CliRunner().invoke(cli, ["check", "--db", str(path), "--no-baseline", "--format", "json"])
            cached.append(time.perf_counter() - started)
    return {
        "memories": memories,
        "found": found,
        "library_median_s": round(statistics.median(library), 3),
        "check_full_median_s": round(statistics.median(whole), 3),
        "check_unchanged_median_s": round(statistics.median(cached), 3),
    }


@click.command()
@click.option("--memories", "sizes", multiple=True, type=int, default=(10_000, 100_000), show_default=True)
@click.option("--rounds", default=3, show_default=True)
def main(sizes: tuple[int, ...], rounds: int) -> None:
    results = {
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "runs": [measure(size, rounds) for size in sizes],
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    click.echo(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
