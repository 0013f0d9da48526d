"""Each pushed entry's payload as the bytes sent: v1.20 keeps a payload as a json.RawMessage, so the
bytes that reach Postgres are the body's own, invalid UTF-8 and escapes included, which a decoded value
cannot give back. Read only when the body holds something Postgres may refuse (a rare, slow path)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

# The decoder's scanner (not in the type stubs): (value, end) of the JSON value at an index.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SPACE = re.compile(r"[ \t\n\r]*")


def raw_payloads(body: bytes) -> list[bytes | None] | None:
    """The payload bytes of each entry of ``{"entries":[{...,"payload":...}, ...]}`` (None for an entry
    without one), or None when the body is not that shape. Keys match exactly and the last one wins,
    as the fake's parse reads them."""
    text = body.decode("latin-1")  # one character per byte: offsets are byte offsets
    try:
        members = _members(text, _skip(text, 0))
        entries = members.get("entries")
        if entries is None or text[entries[0]] != "[":
            return None
        out: list[bytes | None] = []
        for start in _elements(text, entries[0]):
            if text[start] != "{":
                out.append(None)
                continue
            span = _members(text, start).get("payload")
            out.append(None if span is None else text[span[0] : span[1]].encode("latin-1"))
        return out
    except (StopIteration, ValueError, IndexError, RecursionError):
        return None


def _skip(text: str, index: int) -> int:
    match = _SPACE.match(text, index)
    assert match is not None
    return match.end()


def _members(text: str, index: int) -> dict[str, tuple[int, int]]:
    """Each member's value span of the object starting at ``index``."""
    if text[index] != "{":
        raise ValueError("not an object")
    members: dict[str, tuple[int, int]] = {}
    index = _skip(text, index + 1)
    if text[index] == "}":
        return members
    while True:
        if text[index] != '"':
            raise ValueError("not a key")
        key, index = _SCAN(text, index)
        index = _skip(text, index)
        if text[index] != ":":
            raise ValueError("no colon")
        start = _skip(text, index + 1)
        _, end = _SCAN(text, start)
        members[key] = (start, end)
        index = _skip(text, end)
        if text[index] == "}":
            return members
        if text[index] != ",":
            raise ValueError("no comma")
        index = _skip(text, index + 1)


def _elements(text: str, index: int) -> list[int]:
    """Where each element of the array starting at ``index`` starts."""
    starts: list[int] = []
    index = _skip(text, index + 1)
    if text[index] == "]":
        return starts
    while True:
        starts.append(index)
        _, end = _SCAN(text, index)
        index = _skip(text, end)
        if text[index] == "]":
            return starts
        if text[index] != ",":
            raise ValueError("no comma")
        index = _skip(text, index + 1)
