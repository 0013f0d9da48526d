"""The sync_state keys of engram's per-project remotes (predicted from source; no v2 binary builds here).

A v2-module engram newer than the commits docs/version-reach.md lists can route a project to a remote
of its own (cloud.json `projects`). The worker of such a remote journals and acks on `cloud` as before,
but keeps its lease, pull cursor, pulled and deferred rows and status under `cloud@<RemoteID>`
(internal/cloudconfig: RemoteStateKeyPrefix, RemoteID, StateKey; index file id 71421280347).
"""

from __future__ import annotations

import hashlib
import re
from typing import Final
from urllib.parse import urlsplit

REMOTE_STATE_KEY_PREFIX: Final = "cloud@"
CLOUD_CONFIG_FILE: Final = "cloud.json"  # cloudconfig.Path: <data dir>/cloud.json
REMOTE_ID_LENGTH: Final = 12
_REMOTE_STATE_KEY = re.compile(rf"{re.escape(REMOTE_STATE_KEY_PREFIX)}[0-9a-f]{{{REMOTE_ID_LENGTH}}}")


def normalize_server_url(raw: str) -> str:
    """engram's normalizeServerURL: trim; when the URL has a host, lowercase its scheme and host; then
    drop trailing slashes. (Go re-serializes the parsed URL; for a URL whose path and query need no
    escaping, as `engram cloud` stores them after validation, that is the text itself.)"""
    value = raw.strip()
    try:
        parts = urlsplit(value)
    except ValueError:
        return value.rstrip("/")
    userinfo, at, host = parts.netloc.rpartition("@")
    if host:
        rebuilt = f"{parts.scheme.lower()}:" if parts.scheme else ""
        rebuilt += f"//{userinfo}{at}{host.lower()}{parts.path}"
        rebuilt += f"?{parts.query}" if parts.query else ""
        rebuilt += f"#{parts.fragment}" if parts.fragment else ""
        value = rebuilt
    return value.rstrip("/")


def remote_id(server_url: str, token: str) -> str:
    """engram's RemoteID: the first 12 hex digits of sha256(normalized URL, NUL, trimmed token)."""
    material = f"{normalize_server_url(server_url)}\x00{token.strip()}"
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:REMOTE_ID_LENGTH]


def remote_state_key(server_url: str, token: str) -> str:
    """The sync_state key of a per-project remote (cloudconfig.StateKey)."""
    return REMOTE_STATE_KEY_PREFIX + remote_id(server_url, token)


def is_remote_state_key(key: str) -> bool:
    """Whether `key` has the shape of a remote's state key (`cloud@` and 12 lowercase hex digits)."""
    return _REMOTE_STATE_KEY.fullmatch(key) is not None
