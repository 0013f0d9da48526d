"""The key map: Stage A's answers as a file (`inbox export-keys`, --key-map) and the ones the canary
remembers in its state dir. File I/O only; the inbox's selection reads and writes it through here."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from engram_sync_kit.canary.config import state_file_for
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.derive import CandidateSource, normalize_cwd
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.targets import normalize_project
from engram_sync_kit.canary.text import utc_iso
from engram_sync_kit.engram_contract.files import atomic_write

KEY_MAP_SCHEMA = "engram-canary/key-map/v1"


class KeyMapError(CanaryError):
    """A --key-map file cannot be read or is not an export of `inbox export-keys`."""


def remembered_keys_path(db: EngramDb) -> Path | None:
    """Where Stage A answers for this database are remembered (the canary's state dir), named by the
    file SQLite opened (its absolute path)."""
    for _, name, filename in db.connection.execute("PRAGMA database_list"):
        if name == "main" and filename:
            return state_file_for(Path(filename), "stage-a")
    return None


def read_key_entries(path: Path) -> dict[tuple[str, str], tuple[str | None, str]]:
    """The remembered answers; an unreadable memory is only a lost hint, never an error."""
    try:
        return load_key_map(path) if path.exists() else {}
    except (OSError, KeyMapError):
        return {}


def write_key_entries(path: Path, entries: Mapping[tuple[str, str], tuple[str | None, str]]) -> None:
    document = {
        "schema": KEY_MAP_SCHEMA,
        "exported_at": utc_iso(datetime.now(UTC)),
        "entries": [
            {"cwd": cwd, "project": project, "key": key, "source": source}
            for (cwd, project), (key, source) in sorted(entries.items())
        ],
    }
    # The state dir is a cache of hints: a read-only home must not break a check.
    with contextlib.suppress(OSError):
        atomic_write(path, json.dumps(document, indent=1, ensure_ascii=False))


def load_key_map(path: Path) -> dict[tuple[str, str], tuple[str | None, str]]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise KeyMapError(f"--key-map {path}: cannot read ({str(error).splitlines()[0]})") from error
    if not isinstance(document, dict) or document.get("schema") != KEY_MAP_SCHEMA:
        raise KeyMapError(
            f"--key-map {path}: not an export of `engram-canary inbox export-keys` ({KEY_MAP_SCHEMA})"
        )
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise KeyMapError(f"--key-map {path}: 'entries' must be a list")
    recorded: dict[tuple[str, str], tuple[str | None, str]] = {}
    for number, entry in enumerate(entries):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("cwd"), str)
            and isinstance(entry.get("project"), str)
            and (entry.get("key") is None or isinstance(entry.get("key"), str))
            and entry.get("source") in {source.value for source in CandidateSource}
        ):
            raise KeyMapError(f"--key-map {path}: entry {number} is not {{cwd, project, key, source}}")
        recorded[(normalize_cwd(entry["cwd"]), normalize_project(entry["project"]))] = (
            entry["key"],
            entry["source"],
        )
    return recorded
