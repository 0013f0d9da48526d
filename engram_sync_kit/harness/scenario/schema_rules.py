"""Cross-field rules of the scenario models, written as JSON Schema next to the validators that enforce
them, so `engram-harness schema` refuses in an editor what the loader refuses."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any


def schema_rules(*rules: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """The model's cross-field rules (its validators) as JSON Schema, so editors refuse what the loader does."""

    def add(schema: dict[str, Any]) -> None:
        schema.setdefault("allOf", []).extend(copy.deepcopy(list(rules)))

    return add


def only_with(key: str, condition: dict[str, Any]) -> dict[str, Any]:
    """KEY may appear only where CONDITION holds."""
    return {"if": {"required": [key]}, "then": condition}


def is_true(key: str) -> dict[str, Any]:
    return {"required": [key], "properties": {key: {"const": True}}}
