"""Go's white-space rules (unicode.IsSpace, strings.Fields, strings.TrimSpace) over raw bytes, and its
%q for text (strconv.Quote).

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


_QUOTE_ESCAPES = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_QUOTE_ESCAPES |= {"\r": "\\r", "\t": "\\t", "\v": "\\v"}


def quote(text: str, precision: int | None = None) -> str:
    """fmt's %q (or %.Nq, which keeps the first N runes) of a Go string: strconv.Quote's escapes.
    Python's isprintable matches unicode.IsPrint closely enough for the text engram quotes."""
    if precision is not None:
        text = text[:precision]
    out = []
    for char in text:
        if 0xD800 <= ord(char) <= 0xDFFF:
            char = "\ufffd"  # Go's string holds U+FFFD where the bytes were not UTF-8
        if char in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'
