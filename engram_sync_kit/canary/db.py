"""Read-only access to a live engram database, the way a careful operator reads it.

URI mode=ro (never immutable=1: engram keeps writing through its WAL), a busy timeout, and short
read transactions. Columns are discovered with PRAGMA table_info so v1.x, v2 and v3 files all work.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.engram_contract.read_only import read_only_uri

BUSY_TIMEOUT_MS = 5000
# One value that is not valid UTF-8 must not fail a whole read: it comes back with U+FFFD in place of
# the bad bytes (C speed, no Python call per value). Readers that must know, such as the payloads the
# inbox offers to triage, read the bytes (CAST(... AS BLOB)) and decode them themselves.
LENIENT_TEXT = functools.partial(str, encoding="utf-8", errors="replace")
REQUIRED_TABLES = ("sync_state", "sync_mutations")
# distinct_stored_values: index lookups, one per value, up to this many values; then one ordered scan.
SKIP_SCAN_STEPS = 64


class DatabaseUnavailable(CanaryError):
    """The database cannot be opened, or it is not an engram database."""


def default_db_path() -> Path:
    """--db, else $ENGRAM_DATA_DIR/engram.db, else ~/.engram/engram.db (engram's own order)."""
    data_dir = os.environ.get("ENGRAM_DATA_DIR", "").strip()
    if data_dir:
        return Path(data_dir) / "engram.db"
    return Path.home() / ".engram" / "engram.db"


@dataclass(frozen=True)
class Schema:
    """Which tables and columns this engram version's file has, and its PRAGMA user_version (v1.20
    leaves it 0; v2/v3 stamp their schema version, 1 in v3's store.go @d4397781)."""

    columns: dict[str, frozenset[str]]
    user_version: int = 0
    cookie: int = 0  # PRAGMA schema_version: SQLite bumps it on every schema change

    def still_current(self, connection: sqlite3.Connection) -> bool:
        """True while the open file's schema is unchanged since this was discovered (one header read)."""
        return int(connection.execute("PRAGMA schema_version").fetchone()[0]) == self.cookie

    def has_table(self, table: str) -> bool:
        return table in self.columns

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, frozenset())


class SyncStateRow(NamedTuple):
    """One sync_state row: its key and the asked-for columns this file has (absent ones are left out)."""

    target_key: str
    fields: dict[str, Any]


class EngramDb:
    """One engram database as the canary reads it: the path, the read-only connection and the schema,
    discovered once when the file is opened. Open with `EngramDb.open(path)`; `with` closes it."""

    # A plain class, not a dataclass: it is imported by every one-shot `check`, whose start-up counts.
    __slots__ = ("connection", "path", "schema")

    def __init__(self, path: Path, connection: sqlite3.Connection, schema: Schema) -> None:
        self.path = path
        self.connection = connection
        self.schema = schema

    def __repr__(self) -> str:
        return f"EngramDb({str(self.path)!r}, user_version={self.schema.user_version})"

    @classmethod
    def open(cls, path: Path, known: Schema | None = None) -> EngramDb:
        """A read-only connection (never immutable=1: engram keeps writing through its WAL), or
        DatabaseUnavailable in one line when the file is missing, unreadable or not engram's. `known`:
        the schema an earlier open of the same file discovered, reused while its cookie still matches."""
        if not path.exists():
            raise DatabaseUnavailable(f"{path}: no such file (pass --db or set ENGRAM_DATA_DIR)")
        if not path.is_file():
            raise DatabaseUnavailable(f"{path}: not a regular file; expected engram's engram.db")
        uri = read_only_uri(path)
        try:
            connection = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.DatabaseError as error:
            raise DatabaseUnavailable(describe_read_error(path, error, "cannot be read as SQLite")) from error
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            connection.execute("PRAGMA query_only = 1")
            connection.text_factory = LENIENT_TEXT
            if known is not None and known.still_current(connection):
                schema = known
            else:
                schema = discover_schema(connection, path)
        except sqlite3.DatabaseError as error:
            connection.close()
            raise DatabaseUnavailable(describe_read_error(path, error, "cannot be read as SQLite")) from error
        except DatabaseUnavailable:
            connection.close()
            raise
        return cls(path=path, connection=connection, schema=schema)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def read_transaction(self) -> Iterator[sqlite3.Connection]:
        """One short, consistent snapshot; released as soon as the block ends."""
        with read_transaction(self.connection) as connection:
            yield connection

    def enrolled_projects(self) -> frozenset[str]:
        """sync_enrolled_projects as stored (engram normalizes names before it enrolls them)."""
        if not self.schema.has_table("sync_enrolled_projects"):
            return frozenset()
        rows = self.connection.execute("SELECT project FROM sync_enrolled_projects")
        return frozenset(str(row[0]) for row in rows)

    def sync_state(self, fields: Sequence[str]) -> dict[str, SyncStateRow]:
        """Every sync_state row by target key, with those of `fields` this engram version has."""
        present = [name for name in fields if self.schema.has_column("sync_state", name)]
        columns = ", ".join(["target_key", *present])
        rows: dict[str, SyncStateRow] = {}
        for key, *values in self.connection.execute(f"SELECT {columns} FROM sync_state"):
            target_key = str(readable(key))
            # readable() inlined: five calls a row are a tenth of a 10k-target check's sync_state read
            rows[target_key] = SyncStateRow(
                target_key,
                {
                    name: LENIENT_TEXT(value) if isinstance(value, bytes) else value
                    for name, value in zip(present, values, strict=True)
                },
            )
        return rows

    def last_seq(self) -> int:
        return last_seq(self.connection)

    def data_version(self) -> int:
        return data_version(self.connection)


def readable(value: object) -> object:
    """A column value as a report can carry it: a BLOB where engram writes text or numbers (a damaged
    file, another writer) reads as lenient text, never bytes that no JSON document can hold."""
    return LENIENT_TEXT(value) if isinstance(value, bytes) else value


def readable_int(value: object) -> int:
    """An integer column's value; 0 for anything that is not an integer (a BLOB, text, a real)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def open_read_only(path: Path) -> sqlite3.Connection:
    """The bare connection of `EngramDb.open`, for a reader that needs no schema; the caller closes it."""
    return EngramDb.open(path).connection


def describe_read_error(path: Path, error: sqlite3.Error, otherwise: str) -> str:
    """One line a user can act on: a lock and a read-only directory say so; anything else is `otherwise`."""
    text = str(error)
    if "locked" in text or "busy" in text:
        return (
            f"{path}: locked by another connection (still busy after {BUSY_TIMEOUT_MS / 1000:g} s); try again"
        )
    if "readonly" in text and not os.access(path.parent, os.W_OK):
        return (
            f"{path}: the directory {path.parent} is read-only for this user, and a reader of a WAL database "
            f"must create {path.name}-shm there; make it writable for this user or check a copy"
        )
    return f"{path}: {otherwise} ({text})"


def discover_schema(connection: sqlite3.Connection, path: Path) -> Schema:
    tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    missing = [table for table in REQUIRED_TABLES if table not in tables]
    if missing:
        raise DatabaseUnavailable(
            f"{path}: not an engram database with cloud sync (missing table {', '.join(missing)})"
        )
    columns = {table: table_columns(connection, table) for table in tables}
    user_version = int(connection.execute("PRAGMA user_version").fetchone()[0])
    cookie = int(connection.execute("PRAGMA schema_version").fetchone()[0])
    return Schema(columns=columns, user_version=user_version, cookie=cookie)


def table_columns(connection: sqlite3.Connection, table: str) -> frozenset[str]:
    """The table's columns; none for a virtual table whose module this SQLite lacks (a newer engram may
    add one, e.g. for embeddings), since the canary never reads those tables."""
    try:
        return frozenset(
            row[1] for row in connection.execute(f"PRAGMA table_info({quote_identifier(table)})")
        )
    except sqlite3.OperationalError as error:
        if "no such module" in str(error):
            return frozenset()
        raise


def last_seq(connection: sqlite3.Connection) -> int:
    """The journal's high-water mark (0 for an empty journal)."""
    row = connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def distinct_values(connection: sqlite3.Connection, column: str) -> set[str]:
    """Distinct values of an indexed sync_mutations column by skip-scan: one index seek per value."""
    return set(distinct_stored_values(connection, column))


def distinct_stored_values(
    connection: sqlite3.Connection, column: str, *, skip_steps: int = SKIP_SCAN_STEPS
) -> dict[str, bytes]:
    """Each distinct value of an indexed sync_mutations column as the canary reads it, with its stored
    bytes (bind them as `CAST(? AS TEXT)` to find its rows).

    Text values by skip-scan, which steps by the stored bytes: a value that is not valid UTF-8 reads back
    with U+FFFD, which sorts below the bytes \xf0-\xff, so stepping past the decoded value would find the
    same row again, forever. Past `skip_steps` values, one ordered scan of the index finds the rest (10k
    values: 10k queries otherwise). Values of another type (a BLOB or a number another writer left) sort
    apart from text and are read in one pass each: stepping over them by a text bound never ends."""
    values: dict[str, bytes] = {}
    text_only = f"typeof({column}) = 'text'"
    statement = f"SELECT CAST(min({column}) AS BLOB) FROM sync_mutations WHERE {text_only}"
    row = connection.execute(statement).fetchone()
    steps = 0
    while row is not None and row[0] is not None:
        stored = bytes(row[0])
        values.setdefault(LENIENT_TEXT(stored), stored)
        steps += 1
        if steps >= skip_steps:
            for (rest,) in connection.execute(
                f"SELECT CAST({column} AS BLOB) FROM sync_mutations "
                f"WHERE {column} > CAST(? AS TEXT) AND {text_only} GROUP BY {column} ORDER BY {column}",
                (stored,),
            ):
                values.setdefault(LENIENT_TEXT(bytes(rest)), bytes(rest))
            break
        row = connection.execute(f"{statement} AND {column} > CAST(? AS TEXT)", (stored,)).fetchone()
    # Numbers sort below every text, BLOBs above: each range is read once, by the index.
    for bound in (f"{column} < ''", f"{column} >= x''"):
        for (other,) in connection.execute(
            f"SELECT DISTINCT CAST({column} AS BLOB) FROM sync_mutations WHERE {bound}"
        ):
            values.setdefault(LENIENT_TEXT(bytes(other)), bytes(other))
    return values


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def read_transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One short, consistent snapshot; released as soon as the block ends."""
    connection.execute("BEGIN")
    try:
        yield connection
    finally:
        connection.execute("COMMIT")


def data_version(connection: sqlite3.Connection) -> int:
    """Changes whenever another connection commits; cheap confirmation that a file event was a write."""
    row = connection.execute("PRAGMA data_version").fetchone()
    return int(row[0])
