"""JSON parsing that ends at a deadline: a cloud's answer of 64 MiB costs the C parser many seconds
(8 s for 400,000 rows, 38 s for one payload of millions of small objects, on a loaded 2-core machine),
and it cannot be interrupted. An answer up to SMALL_ANSWER_BYTES goes to json.loads whole; a bigger one
is walked container by container, each string, number and literal still parsed in C, with a look at
the clock every CHECK_EVERY values. Same values, same errors (ValueError, RecursionError) as json.loads.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

SMALL_ANSWER_BYTES = 1 << 20  # a page of 100 ordinary memories is a few hundred KB: parsed in C at once
CHECK_EVERY = 4096

# The decoder's scanner (not in the type stubs): (value, end) of the JSON value at an index.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SPACE = re.compile(r"[ \t\n\r]*")


class DeadlinePassed(Exception):
    """The deadline came before the answer was parsed."""


def loads_by(body: bytes, deadline: float) -> Any:
    """json.loads(body), or DeadlinePassed once time.monotonic() passes ``deadline``."""
    if len(body) <= SMALL_ANSWER_BYTES:
        return json.loads(body)
    if time.monotonic() > deadline:
        raise DeadlinePassed
    text = body.decode(json.detect_encoding(body), "surrogatepass")
    walker = _Walker(text, deadline)
    try:
        value, end = walker.value(_skip(text, 0))
    except (StopIteration, IndexError) as error:
        raise json.JSONDecodeError("Expecting value", text, walker.at) from error
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip(text: str, index: int) -> int:
    match = _SPACE.match(text, index)
    assert match is not None
    return match.end()


class _Walker:
    def __init__(self, text: str, deadline: float) -> None:
        self.text = text
        self.deadline = deadline
        self.countdown = CHECK_EVERY
        self.at = 0

    def _tick(self) -> None:
        self.countdown -= 1
        if self.countdown <= 0:
            self.countdown = CHECK_EVERY
            if time.monotonic() > self.deadline:
                raise DeadlinePassed

    def value(self, index: int) -> tuple[Any, int]:
        self.at = index
        self._tick()
        opening = self.text[index]
        if opening == "[":
            return self._array(index)
        if opening == "{":
            return self._object(index)
        return _SCAN(self.text, index)

    def _array(self, index: int) -> tuple[list[Any], int]:
        text, items = self.text, list[Any]()
        index = _skip(text, index + 1)
        if text[index] == "]":
            return items, index + 1
        while True:
            item, index = self.value(index)
            items.append(item)
            index = _skip(text, index)
            if text[index] == "]":
                return items, index + 1
            if text[index] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, index)
            index = _skip(text, index + 1)

    def _object(self, index: int) -> tuple[dict[str, Any], int]:
        text, members = self.text, dict[str, Any]()
        index = _skip(text, index + 1)
        if text[index] == "}":
            return members, index + 1
        while True:
            if text[index] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, index)
            key, index = _SCAN(text, index)
            index = _skip(text, index)
            if text[index] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, index)
            members[key], index = self.value(_skip(text, index + 1))
            index = _skip(text, index)
            if text[index] == "}":
                return members, index + 1
            if text[index] != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, index)
            index = _skip(text, index + 1)
