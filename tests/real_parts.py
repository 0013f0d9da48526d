"""A tier that needs a real part (engram, Docker, PostgreSQL, Prometheus, Chromium, systemd, setpriv):
under CI=true a missing part fails the test; on a developer's machine it skips."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def missing(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)
