"""The process environment as a plain dict, read safely while other threads change it.

Scenarios play in threads beside pytest's main thread, which sets and pops PYTEST_CURRENT_TEST around
every test. ``dict(os.environ)`` lists the keys, then reads them one by one: a key removed in between
raises KeyError (CI saw exactly that in engram_version). A changed environment is read again."""

from __future__ import annotations

import os
from collections.abc import Mapping

SNAPSHOT_ATTEMPTS = 1000


def environment_snapshot(source: Mapping[str, str] | None = None) -> dict[str, str]:
    environment = os.environ if source is None else source
    for _ in range(SNAPSHOT_ATTEMPTS - 1):
        try:
            return dict(environment)
        except (KeyError, RuntimeError):  # a key went away, or the size changed, while it was read
            continue
    return dict(environment)
