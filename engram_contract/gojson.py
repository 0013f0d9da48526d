"""JSON as Go's encoding/json writes it, which engram hashes and compares byte for byte."""

from __future__ import annotations

import json
from typing import Any

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(value: Any, *, sort_keys: bool = True) -> str:
    """Compact JSON with Go's HTML-safe escapes; map keys sorted unless the value mirrors a struct."""
    text = json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
    # Structural JSON never contains these characters, so replacing them escapes string contents only.
    for raw, escaped in _GO_ESCAPES.items():
        if raw in text:
            text = text.replace(raw, escaped)
    return text
