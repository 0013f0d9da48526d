"""Go's white-space rules (unicode.IsSpace, strings.Fields, strings.TrimSpace) over raw bytes.

engram's cloud splits an Authorization header with strings.Fields: white space is decoded as UTF-8,
and a byte that is not valid UTF-8 is never space, so Python's str.split() (which splits on U+001C to
U+001F and, over Latin-1 text, on a lone 0x85 or 0xA0 byte) answers differently.
"""

from __future__ import annotations

import re

# unicode.IsSpace: the Latin-1 set, then the White_Space property above it.
GO_WHITE_SPACE = "".join(
    ["\t\n\v\f\r \x85\xa0\u1680", *map(chr, range(0x2000, 0x200B)), "\u2028\u2029\u202f\u205f\u3000"]
)
_RUN = re.compile(f"[{re.escape(GO_WHITE_SPACE)}]+")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # an invalid byte stays itself, never space


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def fields(raw: bytes) -> list[bytes]:
    """strings.Fields: the runs of `raw` between white space, as the original bytes."""
    return [_bytes(part) for part in _RUN.split(_text(raw)) if part]


def trim_space(raw: bytes) -> bytes:
    """strings.TrimSpace."""
    return _bytes(_text(raw).strip(GO_WHITE_SPACE))
