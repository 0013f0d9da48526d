"""triage's private backups: a consistent 0600 copy of engram.db before every --apply, and their pruning.

The backups live next to the triage log (canary.triage_log.default_backup_dir); only triage takes them.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.errors import TriageError

# Each backup is a full copy of every memory; ten is a week of daily triage and bounded on disk.
DEFAULT_KEEP_BACKUPS = 10
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_BACKUP_STAMP = re.compile(r"(\d{8}T\d{6}\.\d{6}Z)\.[a-z-]+\.db")
_STAMP_FORMAT = "%Y%m%dT%H%M%S.%fZ"
#: Backups taken less than this apart are one series: a plan (validate suggests up to 23 commands) run
#: command by command in one sitting. The first backup of the newest series holds the state from before it.
SERIES_GAP = timedelta(hours=1)


def private_backup_dir(backup_dir: Path, *, ours: bool) -> Path:
    """The backup directory, created 0700. Our default directory is tightened to 0700 if an older
    canary left it wider; a directory the user named keeps its mode (the files in it are 0600)."""
    try:
        backup_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        if ours and stat.S_IMODE(backup_dir.stat().st_mode) & 0o077:
            backup_dir.chmod(PRIVATE_DIR_MODE)
    except OSError as error:
        raise TriageError(
            f"{backup_dir}: cannot write the backup ({error.strerror or error}); "
            "nothing was changed (set backups.dir in the config file)"
        ) from error
    return backup_dir


def backup_database(db: EngramDb, backup_dir: Path, operation: str) -> Path:
    """A consistent 0600 copy through SQLite's online backup API, named by UTC time to the microsecond.

    The file is created 0600 before SQLite opens it, so the copy is never readable by more users than
    the owner for even a moment (SQLite gives its journal the same mode as the file).
    """
    stamp = datetime.now(UTC).strftime(_STAMP_FORMAT)
    target = backup_dir / f"{db.path.stem}.{stamp}.{operation}.db"
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
        with closing(sqlite3.connect(str(target))) as destination:
            db.connection.backup(destination)
            status = destination.execute("PRAGMA quick_check").fetchone()[0]
    except (OSError, sqlite3.Error) as error:
        target.unlink(missing_ok=True)
        raise TriageError(
            f"{backup_dir}: cannot write the backup ({getattr(error, 'strerror', None) or error}); "
            "nothing was changed (set backups.dir in the config file)"
        ) from error
    if status != "ok":
        target.unlink(missing_ok=True)
        raise TriageError(f"{target}: backup failed its integrity check ({status}); nothing was changed")
    return target


def backups_of(db_path: Path, backup_dir: Path) -> list[Path]:
    """This database's backups in `backup_dir`, oldest first (the UTC stamp in the name sorts them)."""
    prefix = f"{db_path.stem}."
    found = [
        path
        for path in backup_dir.glob(f"{glob_escape(prefix)}*.db")
        if path.is_file() and _BACKUP_STAMP.fullmatch(path.name[len(prefix) :])
    ]
    return sorted(found, key=lambda path: path.name)


def glob_escape(text: str) -> str:
    return "".join(f"[{char}]" if char in "*?[" else char for char in text)


def _taken_at(backup: Path) -> datetime:
    found = _BACKUP_STAMP.search(backup.name)
    assert found is not None  # backups_of lists only names that match
    return datetime.strptime(found.group(1), _STAMP_FORMAT).replace(tzinfo=UTC)


def series_start(backups: list[Path]) -> Path | None:
    """The first backup of the newest series in BACKUPS (oldest first): the state from before a plan."""
    if not backups:
        return None
    start = len(backups) - 1
    while start > 0 and _taken_at(backups[start]) - _taken_at(backups[start - 1]) < SERIES_GAP:
        start -= 1
    return backups[start]


def prune_backups(db_path: Path, backup_dir: Path, keep: int) -> list[Path]:
    """Delete all but the `keep` newest backups of this database and the first of their newest series
    (so a plan of more than `keep` commands can still be undone whole); returns the deleted paths."""
    existing = backups_of(db_path, backup_dir)
    first = series_start(existing)
    old = [path for path in existing[: max(0, len(existing) - keep)] if path != first]
    pruned: list[Path] = []
    for path in old:
        try:
            path.unlink()
        except OSError:
            continue
        pruned.append(path)
    return pruned
