"""Text for line-oriented output (check, watch, inbox, reconcile): one value never spans two lines."""

from __future__ import annotations

from datetime import datetime


def printable(text: str) -> str:
    """TEXT with every control or invisible format character escaped (a newline as \\n, U+202E as
    \\u202e) and the rest kept as is, unicode included: a project name engram accepted with a newline
    in it cannot start a forged line of its own in a log, a --exec alert or journald."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text
    )


def utc_iso(moment: datetime | None) -> str | None:
    """MOMENT (UTC) as 2026-12-01T12:00:00Z, the canary's one spelling of a time in its reports."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else None
