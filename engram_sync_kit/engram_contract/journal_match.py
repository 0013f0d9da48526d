"""The one rule for "this journal entry matches": the fake's /_fake/wait and the harness's checks use it.

Fields compare as text, so a scenario's YAML (strings) and the fake's JSON (numbers, booleans, null)
agree: an enum by its value, booleans as JSON spells them, null as "" (the one spelling of the empty
project).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum
from typing import Any


def field_text(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def mismatched_fields(
    item: Any, match: Mapping[str, Any], fields: Collection[str] | None = None
) -> list[str]:
    """The names in MATCH whose value differs from ITEM's attribute; a name outside FIELDS reads as null."""
    return sorted(
        name
        for name, wanted in match.items()
        if field_text(getattr(item, name, None) if fields is None or name in fields else None)
        != field_text(wanted)
    )


def matches(item: Any, match: Mapping[str, Any]) -> bool:
    return all(field_text(getattr(item, name, None)) == field_text(wanted) for name, wanted in match.items())
