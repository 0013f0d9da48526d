"""A backup restored with `mv` while `engram-canary watch` runs: the watcher must never undo it.

engram v1.20 checkpoints and removes its `-wal` when its last connection closes. A reader that stays
open keeps that `-wal` (and the wal-index in `-shm`) alive; after `mv backup engram.db` engram's next
open replays the old file's frames over the restored one, and rows that exist only in the backup are
gone while `integrity_check` still says ok. Every test here drives the real engram v1.20.0 binary.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from canary_support import WatchProcess

from engram_sync_kit.canary.db_files import lock_holder
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

COPY_ONLY = ("restored-only-1", "restored-only-2", "restored-only-3")


def says(text: str) -> Callable[[str], bool]:
    return lambda line: text in line


def save(world: EngramEnvironment, title: str, project: str = "notes") -> None:
    result = world.run(["save", title, "content", "--project", project])
    assert result.returncode == 0, result.stderr


def titles(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return [str(row[0]) for row in connection.execute("SELECT title FROM observations ORDER BY id")]


def backup(db: Path, copy: Path) -> None:
    """A consistent copy through SQLite's backup API (what `sqlite3 engram.db .backup` does)."""
    with (
        contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as source,
        contextlib.closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)


@contextlib.contextmanager
def watching(world: EngramEnvironment, tmp_path: Path, *extra: str) -> Iterator[WatchProcess]:
    watcher = WatchProcess(["--db", str(world.db_path), "--no-baseline", *extra], tmp_path / "xdg")
    try:
        watcher.wait_started()
        yield watcher
    finally:
        watcher.kill()


def restore_run(engram_bin: Path, root: Path, tmp_path: Path, *, watch: bool) -> list[str]:
    """One user's restore at a person's pace: a backup, a copy holding rows of its own, more work on the
    live file, `mv` the copy over engram.db, and a second later one `engram save`."""
    live = EngramEnvironment(binary=engram_bin, root=root / "live").prepare()
    copy = EngramEnvironment(binary=engram_bin, root=root / "copy").prepare()
    save(live, "before-backup")
    with contextlib.ExitStack() as stack:
        if watch:
            stack.enter_context(watching(live, root))
        backup(live.db_path, copy.db_path)
        for title in COPY_ONLY:  # engram itself writes the backup's own rows (in the copy's home)
            save(copy, title)
        save(live, "live-after-backup")
        os.replace(copy.db_path, live.db_path)
        time.sleep(1.0)
        save(live, "after-restore")
        return titles(live.db_path)


def test_a_restore_with_mv_under_watch_is_not_undone(engram_bin: Path, tmp_path: Path) -> None:
    without_watch = restore_run(engram_bin, tmp_path / "a", tmp_path, watch=False)
    under_watch = restore_run(engram_bin, tmp_path / "b", tmp_path, watch=True)

    expected = ["before-backup", *COPY_ONLY, "after-restore"]
    assert without_watch == expected  # A: the restore itself is sound
    assert under_watch == expected  # B: the same restore with the watcher running


def open_database_files(pid: int, db: Path) -> list[str]:
    """The watcher's open descriptors on engram.db, its -wal and its -shm (by /proc/PID/fd)."""
    names = {db.name, f"{db.name}-wal", f"{db.name}-shm"}
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if Path(target.removesuffix(" (deleted)")).name in names:
                found.append(target)
    return found


def test_engram_removes_its_wal_after_each_save_under_watch(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """engram's last close checkpoints and removes the -wal; the watcher reads each commit without being
    inside the file at that moment, and holds nothing between checks."""
    save(engram_world, "seed")
    wal = engram_world.db_path.with_name("engram.db-wal")
    with watching(engram_world, tmp_path) as watcher:
        for number in range(12):
            save(engram_world, f"note {number}", project=f"side{number % 3}")
            left = wal.stat().st_size if wal.exists() else 0
            assert left == 0, f"save {number}: engram.db-wal kept {left} bytes"
        for key in ("cloud:side0", "cloud:side1", "cloud:side2"):
            watcher.wait_for(says(f" {key} "), what=key)
        time.sleep(0.3)
        assert open_database_files(watcher.process.pid, engram_world.db_path) == []


def connection_files(pid: int, db: Path) -> list[str]:
    """The -wal and -shm of a SQLite connection that process `pid` has open, or []. A connection has both
    open; the watcher's lock probe opens engram.db alone, and its fingerprint reads -shm alone."""
    names = [name for name in open_database_files(pid, db) if name.endswith(("-wal", "-shm"))]
    return names if {name[-4:] for name in names} == {"-wal", "-shm"} else []


def slow_save_with_the_watcher_inside(world: EngramEnvironment, watcher_pid: int, title: str) -> bool:
    """An `engram save` that a loaded machine slows down (frozen with SIGSTOP once it has written to its
    SQLite lock), and a watcher that is slow too: if the watcher opens the file while the save is frozen, it is
    frozen in turn, inside the file, until the save has closed. True when that happened."""
    process = subprocess.Popen(
        [str(world.binary), "save", title, "content", "--project", "slow"],
        cwd=world.home,
        env=world.env(None),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    caught = False
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        if lock_holder(world.db_path) == process.pid:
            os.kill(process.pid, signal.SIGSTOP)
            # A read the watcher began before the save took its lock is allowed to finish first.
            eventually(
                lambda: not connection_files(watcher_pid, world.db_path) or None,
                timeout=5,
                what="the watcher's read from before the save",
                error=AssertionError,
            )
            frozen_until = time.monotonic() + 1.5
            while not caught and time.monotonic() < frozen_until:
                if connection_files(watcher_pid, world.db_path):
                    os.kill(watcher_pid, signal.SIGSTOP)
                    caught = bool(connection_files(watcher_pid, world.db_path))
                    if not caught:
                        os.kill(watcher_pid, signal.SIGCONT)
            os.kill(process.pid, signal.SIGCONT)
            break
        time.sleep(0.0005)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        if caught:
            os.kill(watcher_pid, signal.SIGCONT)
    assert process.returncode == 0, stderr
    return caught


def test_a_save_slowed_by_a_loaded_machine_still_removes_its_wal_under_watch(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """A short-lived engram command is waited for even when it stays in the file for a second or more
    (CI's two busy cores did that): the watcher is never inside the file when the save closes."""
    save(engram_world, "seed")
    wal = engram_world.db_path.with_name("engram.db-wal")
    with watching(engram_world, tmp_path) as watcher:
        for number in range(2):
            caught = slow_save_with_the_watcher_inside(engram_world, watcher.process.pid, f"slow {number}")
            left = wal.stat().st_size if wal.exists() else 0
            assert (caught, left) == (False, 0), f"slow save {number}: engram.db-wal kept {left} bytes"
        watcher.wait_for(says(" cloud:slow "), what="cloud:slow")


def test_a_target_saved_after_vacuum_and_mv_is_alerted_promptly(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    save(engram_world, "seed", project="seed")
    assert engram_world.run(["cloud", "enroll", "seed"]).returncode == 0
    compacted = tmp_path / "compacted.db"
    with watching(engram_world, tmp_path, "--full-every", "600") as watcher:
        with contextlib.closing(
            sqlite3.connect(f"file:{engram_world.db_path}?mode=ro", uri=True)
        ) as connection:
            connection.execute("VACUUM INTO ?", (str(compacted),))
        os.replace(compacted, engram_world.db_path)
        watcher.wait_for(lambda line: " was replaced; reading the new file" in line, what="the replace")
        time.sleep(1.0)
        started = time.monotonic()
        save(engram_world, "after the compaction", project="stray")
        watcher.wait_for(
            lambda line: "NEW foreign sync target cloud:stray " in line, what="the alert", timeout=10
        )
        assert time.monotonic() - started < 5
    assert "after the compaction" in titles(engram_world.db_path)


def test_a_replace_during_a_check_releases_the_old_file_within_100_ms(
    engram_world: EngramEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full check is in a long read (seconds) when the file is replaced: the watcher lets go of the old file at
    once (the read is aborted), then reads the new one from scratch."""
    from engram_sync_kit.canary import watch as watch_module
    from engram_sync_kit.canary.checks import check_snapshot
    from engram_sync_kit.canary.config import CanaryConfig

    save(engram_world, "seed", project="seed")
    replacement = tmp_path / "replacement.db"
    backup(engram_world.db_path, replacement)
    real_check = check_snapshot
    in_long_read = threading.Event()
    checked: list[int] = []

    def check_with_a_long_read(db: Any, *args: Any, **kwargs: Any) -> Any:
        checked.append(os.stat(db.path).st_ino)
        if len(checked) == 2:  # the first re-check: a read of a few seconds
            in_long_read.set()
            db.connection.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000000) "
                "SELECT count(*) FROM c"
            ).fetchone()
        return real_check(db, *args, **kwargs)

    monkeypatch.setattr(watch_module, "check_snapshot", check_with_a_long_read)
    config = CanaryConfig.model_validate({"watch": {"full_recheck_seconds": 0.2}})
    stream = io.StringIO()
    watcher = watch_module.Watcher(
        watch_module.WatchOptions(db_path=engram_world.db_path, config=config, baseline=None, stream=stream)
    )
    runner = threading.Thread(target=watcher.run, name="watch-under-test")
    runner.start()
    try:
        assert in_long_read.wait(timeout=20)
        os.replace(replacement, engram_world.db_path)
        replaced_at = time.monotonic()
        while any(
            " (deleted)" in target for target in open_database_files(os.getpid(), engram_world.db_path)
        ):
            assert time.monotonic() - replaced_at < 5, "the old file is still open"
            time.sleep(0.002)
        released = time.monotonic() - replaced_at
        deadline = time.monotonic() + 20
        while len(checked) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watcher.stop()
        runner.join(timeout=20)
    assert released < 0.1, f"released the old file after {released * 1000:.0f} ms"
    assert checked[2] == os.stat(engram_world.db_path).st_ino  # then read the new file
    assert f"{engram_world.db_path} was replaced; reading the new file" in stream.getvalue()
    assert "UNKNOWN" not in stream.getvalue()


def test_a_restore_while_another_reader_keeps_the_wal_is_warned_about(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    """A restore made while some process is still inside the file (engram serve, an MCP session; here a
    plain reader): engram's close cannot checkpoint, its -wal stays next to the restored file, and the
    watcher says what engram's next open would do with it."""
    db = engram_world.db_path
    save(engram_world, "seed")
    copy = tmp_path / "copy.db"
    backup(db, copy)
    wal = db.with_name("engram.db-wal")
    with (
        watching(engram_world, tmp_path) as watcher,
        contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as inside,
    ):
        inside.execute("SELECT count(*) FROM sync_state").fetchone()
        save(engram_world, "written while another process is inside")
        frames = wal.stat().st_size - 32
        assert frames > 0
        os.replace(copy, db)
        line = watcher.wait_for(says(" bytes of frames written before "), what="the warning")
    assert line == (
        f"engram-canary WARNING: {wal} holds {frames} bytes of frames written before engram.db was replaced; "
        "unless it was restored with the file, engram's next open replays them over it: stop engram and move "
        "engram.db-wal and engram.db-shm aside (docs/canary.md, restoring a backup)"
    )


def test_the_documented_settle_step_removes_a_leftover_wal(engram_world: EngramEnvironment) -> None:
    """docs/canary.md, restoring a backup, step 2: with nothing else inside the file, `engram stats` closes
    it last, so its close checkpoints and removes a -wal another reader had kept."""
    db = engram_world.db_path
    save(engram_world, "seed")
    wal = db.with_name("engram.db-wal")
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as inside:
        inside.execute("SELECT count(*) FROM sync_state").fetchone()
        save(engram_world, "written while another process is inside")
    assert wal.stat().st_size > 32  # left behind
    assert engram_world.run(["stats"]).returncode == 0
    assert not wal.exists()
    assert "written while another process is inside" in titles(db)
