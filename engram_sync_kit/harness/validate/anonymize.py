"""`--anonymize`: the typed validate report with every name of the tester's machine replaced by a keyed hash.

The transform walks the model (harness.validate_model.ValidateReport) field by field and does to each
string what its type's Hide mark says: a name is hashed whole, a lane keeps `cloud:`, free text has
every known name and path, and every double-quoted value (engram and the cloud quote project names and
session ids that way), replaced inside it, text that can quote a row is left out, and the kit's own
words stay. A string without a mark is refused (TypeError): a new field must say what it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import shlex
from collections.abc import Sequence
from pathlib import Path

from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.harness.validate.model import Hide, ValidateReport, rewrite_strings
from engram_sync_kit.harness.validate.stuck import NO_PROJECT

# Words of engram and the kit, not of the user: never hashed.
KEPT_NAMES = frozenset({"", "unsorted", NO_PROJECT, "(unknown)", LEGACY_TARGET, "inbox", "local", "*"})
SUGGESTED_PLAN = "suggested"  # validate's own plan, not a file of the tester's
KEY_BYTES = 32
# engram (Go's %q) and the cloud quote the values they name: a project, a session id, a path.
_QUOTED = re.compile(r'"((?:[^"\\\n]|\\.)+)"')


def stable_hash(text: str, key: bytes) -> str:
    """HMAC-SHA256 of the name under the run's secret key: the same key gives the same names (the tester
    keeps it to map them back, or to compare two reports); without it no guess can be checked."""
    return "h" + hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()[:12]


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def read_or_create_key(path: Path) -> bytes:
    """The key in PATH (hex), or a new random one written there, readable by its owner only."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        key = new_key()
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(key.hex() + "\n")
        return key
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read ({getattr(error, 'strerror', None) or error})") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"not a key this command wrote ({KEY_BYTES * 2} hex digits)")
    return key


def hide_paths(text: str, paths: Sequence[str], key: bytes) -> str:
    """Known paths of the tester's machine in a line of progress or an error, as their hashes."""
    for path in sorted((p for p in paths if p), key=len, reverse=True):
        text = text.replace(path, stable_hash(path, key))
    return text


def _lane_project(lane: str) -> str:
    prefix = LEGACY_TARGET + ":"
    return lane[len(prefix) :] if lane.startswith(prefix) else lane


def names_of(report: ValidateReport) -> set[str]:
    """Every name of the tester's the report carries in a field marked as one (projects, inbox keys,
    cwds, targets, a lane's project)."""
    found: set[str] = set()

    def collect(value: str, mark: Hide) -> str:
        if mark is Hide.NAME:
            found.add(value)
        elif mark is Hide.LANE:
            found.add(_lane_project(value))
        return value

    rewrite_strings(report, collect)
    return found - KEPT_NAMES


def anonymized(report: ValidateReport, key: bytes, paths: Sequence[str] = ()) -> ValidateReport:
    """The report with project names, inbox keys, cwds, target keys and paths replaced by keyed hashes.

    Counts, ages, times and shapes stay. Titles and contents never enter a report; free text (server
    reasons, canary messages, commands) has every known name, PATHS (the database, --keep, ...) and
    quoted value replaced inside it; free text that can quote a row (a plan line's output, engram's
    serve log) is left out.
    """
    names = names_of(report) | {p for p in (report.database.path, *paths) if p}
    pattern = (
        re.compile(
            "(?<![A-Za-z0-9_-])("
            + "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
            + ")(?![A-Za-z0-9_-])"
        )
        if names
        else None
    )

    def hashed(name: str) -> str:
        return name if name in KEPT_NAMES else stable_hash(name, key)

    def quoted(match: re.Match[str]) -> str:
        value = match.group(1)
        return f'"{value}"' if value in KEPT_NAMES else f'"{stable_hash(value, key)}"'

    def text(value: str) -> str:
        if value.startswith("engram-canary "):
            # A command quotes names for the shell ('Ana'"'"'s App'): hash its words, then quote again.
            with contextlib.suppress(ValueError):
                return shlex.join(
                    hashed(word) if word in names else text(word) for word in shlex.split(value)
                )
        value = _QUOTED.sub(quoted, value)
        return pattern.sub(lambda match: stable_hash(match.group(1), key), value) if pattern else value

    def rewrite(value: str, mark: Hide) -> str:
        if mark is Hide.NAME:
            return hashed(value)
        if mark is Hide.LANE:
            prefix = LEGACY_TARGET + ":"
            return prefix + hashed(value[len(prefix) :]) if value.startswith(prefix) else hashed(value)
        if mark is Hide.TEXT:
            return text(value)
        if mark is Hide.PATH:
            return stable_hash(value, key)
        if mark is Hide.PROGRAM:
            return "engram"
        if mark is Hide.PLAN_FILE:
            return value if value == SUGGESTED_PLAN else stable_hash(value, key)
        if mark is Hide.QUOTES_ROWS:
            return ""
        return value  # Hide.KIT

    return rewrite_strings(report, rewrite).model_copy(update={"anonymized": True})
