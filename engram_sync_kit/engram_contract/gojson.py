"""JSON as Go's encoding/json writes it, which engram hashes and compares byte for byte."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from engram_sync_kit.engram_contract.errors import ContractError

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
_STRUCT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def go_json(value: Any, *, sort_keys: bool = True) -> str:
    """Compact JSON with Go's HTML-safe escapes; map keys sorted unless the value mirrors a struct."""
    return go_escape((_SORTED if sort_keys else _STRUCT).encode(value))


def go_escape(encoded: str) -> str:
    """Go's HTML-safe escapes applied to compact JSON text that Python's encoder wrote."""
    # Structural JSON never contains these characters, so replacing them escapes string contents only.
    for raw, escaped in _GO_ESCAPES.items():
        if raw in encoded:
            encoded = encoded.replace(raw, escaped)
    return encoded


MAX_JSON_DEPTH = 500  # Go allows 10000; Python's recursion limit (1000) must still serialize it back
DEPTH_ERROR = "invalid character '[' exceeded max depth"  # Go's wording, at a lower depth
_MAX_INT_DIGITS = 4000  # Python refuses to convert longer integers; Go's float64 overflows long before
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json pairs valid surrogates, so any left is lone
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def go_loads(text: str, *, keep_surrogates: bool = False) -> Any:
    """json.loads restricted to what Go's encoding/json can hold: ContractError (Go-like wording) for
    NaN/Infinity, numbers beyond float64 or 4000 digits, and nesting deeper than MAX_JSON_DEPTH; lone
    UTF-16 surrogates become U+FFFD as Go decodes them into a string (``keep_surrogates`` leaves them, for
    a caller that must know: Postgres refuses them in a json column). json.JSONDecodeError for plain
    syntax errors."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise ContractError(DEPTH_ERROR) from None
    _check_depth(text)  # after parsing: the text is valid JSON, so the string pattern scans it linearly
    if not keep_surrogates and ("\\ud" in text or "\\uD" in text) and _SURROGATE_ESCAPE.search(text):
        value = replace_surrogates(value)
    return value


def go_kind(value: Any) -> str:
    """How Go's decoder names a JSON value in "json: cannot unmarshal KIND into ..."."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _LONE_SURROGATE.search(value) is not None
    if isinstance(value, list):
        return any(has_lone_surrogate(item) for item in value)
    if isinstance(value, dict):
        return any(has_lone_surrogate(key) or has_lone_surrogate(item) for key, item in value.items())
    return False


def _constant(name: str) -> Any:
    raise ContractError(f"invalid character '{name[0]}' looking for beginning of value")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ContractError(f"number {text[:40]} is out of range for float64")
    return value


def _int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        raise ContractError(f"number {text[:40]}... is out of range ({len(text)} digits)")
    return int(text)


def _check_depth(text: str) -> None:
    if len(text) <= 2 * MAX_JSON_DEPTH or text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = 0
    for char in brackets:
        depth += 1 if char in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise ContractError(DEPTH_ERROR)


def replace_surrogates(value: Any) -> Any:
    """Lone UTF-16 surrogates as U+FFFD, as Go's decoder writes them into a string."""
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [replace_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {replace_surrogates(key): replace_surrogates(item) for key, item in value.items()}
    return value


# One decoder, built once: json.loads with hooks would build a decoder and its scanner on every call.
_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_float, parse_int=_int)
