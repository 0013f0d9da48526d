"""Text for line-oriented output (check, watch, inbox, reconcile): one value never spans two lines."""

from __future__ import annotations


def printable(text: str) -> str:
    """TEXT with every control or invisible format character escaped (a newline as \\n, U+202E as
    \\u202e) and the rest kept as is, unicode included: a project name engram accepted with a newline
    in it cannot start a forged line of its own in a log, a --exec alert or journald."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text
    )
