"""The canonical digest of a deployment: proof that the same spec and seed give the same rows."""

from __future__ import annotations

import hashlib
from pathlib import Path

from engram_sync_kit.engram_contract.read_only import connect_read_only


def canonical_digest(db_path: Path) -> str:
    """sha256 over every row of every engram table (FTS indexes excluded: they derive from the rows)."""
    digest = hashlib.sha256()
    connection = connect_read_only(db_path)
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%' ORDER BY name"
            )
        ]
        for table in tables:
            digest.update(f"\x00table {table}\x00".encode())
            quoted = '"' + table.replace('"', '""') + '"'
            for row in connection.execute(f"SELECT * FROM {quoted} ORDER BY 1, 2"):
                digest.update(repr(row).encode())
    finally:
        connection.close()
    return digest.hexdigest()
