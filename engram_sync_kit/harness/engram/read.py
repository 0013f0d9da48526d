"""The harness's one reader of engram databases: the canary's EngramDb (read-only URI with the path
quoted, busy timeout, query_only, schema discovered), one read per open, its failures as one line."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.harness.errors import HarnessError

T = TypeVar("T")


class EngramReadError(HarnessError):
    """engram's database cannot be opened or read: missing, locked, not engram's, or a failed query."""


def read_engram(db_path: Path, read: Callable[[sqlite3.Connection], T]) -> T:
    """READ on a read-only connection to DB_PATH, closed afterwards; EngramReadError when it fails."""
    try:
        db = EngramDb.open(db_path)
    except CanaryError as error:
        raise EngramReadError(str(error)) from error
    with db:
        try:
            return read(db.connection)
        except sqlite3.Error as error:
            raise EngramReadError(f"{db_path}: {error}") from error


def read_with(db_path: Path, read: Callable[[sqlite3.Connection], T], empty: T) -> T:
    """READ on a read-only connection; EMPTY when the database is missing or unreadable."""
    try:
        return read_engram(db_path, read)
    except EngramReadError:
        return empty
