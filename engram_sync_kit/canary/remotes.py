"""Which per-project remotes engram is configured with: the live `cloud@<id>` keys, read from cloud.json
next to the database (read-only; the tokens are hashed into ids and never kept or printed).

Mirrors engram's LiveCloudRemoteStateKeys and its doctor (predicted from source, docs/version-reach.md):
a missing cloud.json means no remotes, so every `cloud@` row is an orphan; an unreadable one means the
remotes are unknown, so no `cloud@<12 hex>` row is called foreign.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.text import printable
from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_loads
from engram_sync_kit.engram_contract.remotes import CLOUD_CONFIG_FILE, remote_state_key

MAX_CLOUD_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class RemoteStateKeys:
    """`live` is None when cloud.json could not be read (then the remotes are unknown)."""

    live: frozenset[str] | None
    cloud_json: str  # "read", "absent" or "unreadable: <why>"

    def summary(self) -> dict[str, Any]:
        return {"cloud_json": self.cloud_json, "live": sorted(self.live or ())}


NO_REMOTES = RemoteStateKeys(frozenset(), "absent")
_cache: dict[Path, tuple[tuple[int, int, int], RemoteStateKeys]] = {}


class _Unreadable(Exception):
    pass


def database_file(connection: sqlite3.Connection) -> Path | None:
    for _, name, file in connection.execute("PRAGMA database_list"):
        if name == "main" and file:
            return Path(str(file))
    return None


def remote_state_keys(connection: sqlite3.Connection) -> RemoteStateKeys:
    """The remotes of the engram data directory that holds this connection's database."""
    db = database_file(connection)
    return NO_REMOTES if db is None else remote_state_keys_in(db.parent)


def remote_state_keys_in(data_dir: Path) -> RemoteStateKeys:
    path = data_dir / CLOUD_CONFIG_FILE
    try:
        stat = path.stat()
    except FileNotFoundError:
        return NO_REMOTES
    except OSError as error:
        return RemoteStateKeys(None, f"unreadable: {printable(error.strerror or str(error))}")
    signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _cache.get(path)
    if cached is not None and cached[0] == signature:
        return cached[1]
    result = _read(path)
    _cache[path] = (signature, result)
    return result


def _read(path: Path) -> RemoteStateKeys:
    try:
        with open(path, "rb", opener=_no_follow_fifo) as handle:
            data = handle.read(MAX_CLOUD_CONFIG_BYTES + 1)
        if len(data) > MAX_CLOUD_CONFIG_BYTES:
            raise _Unreadable("larger than 1 MiB")
        try:
            document = go_loads(data.decode("utf-8", "replace"))
        except (ValueError, ContractError) as error:
            raise _Unreadable(f"not JSON ({error})") from None
        return RemoteStateKeys(frozenset(_live_keys(document)), "read")
    except _Unreadable as why:
        return RemoteStateKeys(None, f"unreadable: {printable(str(why))}")
    except OSError as error:
        return RemoteStateKeys(None, f"unreadable: {printable(error.strerror or str(error))}")


def _no_follow_fifo(file: str, flags: int) -> int:
    # A FIFO or device in place of cloud.json must not block the check.
    return os.open(file, flags | os.O_NONBLOCK)


def _field(document: dict[str, Any], name: str) -> Any:
    """Go's struct decoding: every key that names the field (case-insensitively) sets it in turn, so the
    last one wins."""
    value = None
    for key, item in document.items():
        if key.casefold() == name:
            value = item
    return value


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Unreadable(f"{what} is not a string")
    return value


def _live_keys(document: Any) -> set[str]:
    """Config{ServerURL, Token, Projects map[string]ProjectRemote} as encoding/json would decode it;
    the JSON names `projects`, `server_url` and `token` are assumed (the stored cloudconfig.go that
    holds Projects was not found; its Config uses `server_url` and `token`)."""
    if document is None:
        return set()
    if not isinstance(document, dict):
        raise _Unreadable("not a JSON object")
    projects = _field(document, "projects")
    if projects is None:
        return set()
    if not isinstance(projects, dict):
        raise _Unreadable("projects is not an object")
    keys: set[str] = set()
    for name, override in projects.items():
        if override is None:
            continue
        if not isinstance(override, dict):
            raise _Unreadable(f"projects[{name!r}] is not an object")
        server_url = _string(_field(override, "server_url"), f"projects[{name!r}].server_url")
        token = _string(_field(override, "token"), f"projects[{name!r}].token")
        if server_url.strip():
            keys.add(remote_state_key(server_url, token))
    return keys
