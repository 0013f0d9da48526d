"""Triage is safe on a live database: no lost engram write, no SQLITE_BUSY, atomic under SIGKILL."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from inbox_support import (
    canary,
    canary_env,
    db_digest,
    engram_ok,
    engram_serve,
    query,
    save,
)

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

TRIAGE_RUNS = (
    ("inbox", "claim", "--project", "key-one", "--as", "main-proj", "--apply"),
    ("inbox", "drop", "--project", "key-two", "--apply"),
    ("inbox", "claim", "--project", "key-three", "--as", "main-proj", "--apply"),
    ("inbox", "drop", "--project", "key-four", "--noise", "--apply"),
    ("cleanup-phantoms", "--apply"),
)


def seed_keys(world: EngramEnvironment) -> None:
    for key in ("key-one", "key-two", "key-three", "key-four", "gone-key"):
        for number in range(3):
            save(world, key, f"{key} {number}")
    engram_ok(world, "cloud", "enroll", "main-proj")
    # a phantom for cleanup-phantoms: a key whose rows were all dropped
    assert canary(world, "inbox", "drop", "--project", "gone-key", "--apply").returncode == 0


def integrity(db: Path) -> str:
    return str(query(db, "PRAGMA integrity_check")[0][0])


def test_triage_while_engram_serve_writes_loses_no_write(engram_world: EngramEnvironment) -> None:
    world = engram_world
    seed_keys(world)
    saved: list[int] = []
    stop = threading.Event()
    with engram_serve(world) as server:
        server.post("/sessions", {"id": "writer", "project": "writer-key", "directory": str(world.home)})

        def write_forever() -> None:
            number = 0
            while not stop.is_set():
                body = server.post(
                    "/observations",
                    {
                        "session_id": "writer",
                        "type": "manual",
                        "title": f"w{number}",
                        "content": f"c{number}",
                    },
                )
                if isinstance(body, dict) and "id" in body:
                    saved.append(int(body["id"]))
                number += 1

        writer = threading.Thread(target=write_forever, daemon=True)
        writer.start()
        try:
            eventually(
                lambda: True if len(saved) >= 20 else None,
                timeout=30,
                what="engram writes before triage",
                error=AssertionError,
            )
            for args in TRIAGE_RUNS:
                result = canary(world, *args)
                assert result.returncode == 0, f"{args}: {result.stderr}"
            started = len(saved)
            eventually(
                lambda: True if len(saved) >= started + 20 else None,
                timeout=30,
                what="writes after triage",
                error=AssertionError,
            )
        finally:
            stop.set()
            writer.join(timeout=30)
        statuses = list(server.statuses)
        server_failures = list(server.failures)
        log = server.log_text()
    assert statuses and all(200 <= status < 300 for status in statuses), server_failures
    assert "database is locked" not in log and "SQLITE_BUSY" not in log
    db = world.db_path
    stored = {row[0] for row in query(db, "SELECT id FROM observations WHERE session_id = 'writer'")}
    assert stored == set(saved)
    journaled = query(
        db, "SELECT COUNT(*) FROM sync_mutations WHERE entity = 'observation' AND project = 'writer-key'"
    )[0][0]
    assert journaled == len(saved)
    # claim copies memories only by default: 3 observations each of key-one and key-three, and the session
    # each key's memories reference
    assert query(
        db,
        "SELECT entity, COUNT(*) FROM sync_mutations WHERE project = 'main-proj' AND acked_at IS NULL "
        "GROUP BY entity ORDER BY entity",
    ) == [("observation", 6), ("session", 2)]
    assert integrity(db) == "ok"


@pytest.mark.parametrize(
    "args",
    [
        ("inbox", "claim", "--project", "key-one", "--as", "main-proj", "--apply"),
        ("inbox", "drop", "--project", "key-two", "--apply"),
        ("cleanup-phantoms", "--apply"),
    ],
    ids=["claim", "drop", "cleanup-phantoms"],
)
def test_sigkill_in_the_middle_of_apply_leaves_the_database_untouched(
    engram_world: EngramEnvironment, args: tuple[str, ...]
) -> None:
    world = engram_world
    seed_keys(world)
    db = world.db_path
    before = db_digest(db)
    marker = world.root / "paused"
    # The launcher replaces canary.triage.pause_midway: the process waits there while marker exists.
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("pause_midway_launcher.py")), str(marker), *args],
        env=canary_env(world),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(
            lambda: True if marker.exists() else None,
            timeout=60,
            what="the triage to pause midway",
            error=AssertionError,
        )
        assert int(marker.read_text()) == process.pid
        # paused inside BEGIN IMMEDIATE: it holds the write lock, and nothing is visible yet
        probe = sqlite3.connect(str(db), timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                probe.execute("BEGIN IMMEDIATE")
        finally:
            probe.close()
        assert db_digest(db) == before
        process.kill()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -9
    assert db_digest(db) == before
    assert integrity(db) == "ok"
    assert list(
        (db.parent / "engram-canary-backups").glob(f"*.{args[1] if args[0] == 'inbox' else args[0]}.db")
    )
    # the lock died with the process; the same command now applies in full
    again = canary(world, *args)
    assert again.returncode == 0, again.stderr
    assert db_digest(db) != before
    assert integrity(db) == "ok"
