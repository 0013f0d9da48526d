"""How the kit opens a SQLite file it must not write: one URI, with the path percent-quoted.

`file:PATH?mode=ro` with PATH as it stands breaks on a directory named with `?` or `#` (the rest of the
path becomes the query or the fragment) and on `%` (read as an escape): SQLite then opens another file, or
none. Never `immutable=1`: engram keeps writing through its WAL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote


def read_only_uri(path: Path) -> str:
    """The `file:` URI that opens PATH (made absolute) read-only."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


def connect_read_only(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A plain read-only connection to any SQLite file; engram's own database is read through the
    canary's EngramDb (schema discovered, query_only), which builds its URI here too."""
    return sqlite3.connect(read_only_uri(path), uri=True, timeout=timeout)
