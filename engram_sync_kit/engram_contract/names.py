"""Names fixed by engram's schema and sync protocol."""

from collections.abc import Iterable
from functools import lru_cache
from typing import Final

# The target_key of the legacy lane: the only lane v1.20's autosync worker reads.
LEGACY_TARGET: Final = "cloud"
# Session and prompt rows are telemetry: the design keeps them out of the inbox (§1).
# The four entities a mutation carries, in the order engram's chunks list them.
ENTITIES: Final = ("session", "observation", "prompt", "relation")
TELEMETRY_ENTITIES: Final = frozenset({"session", "prompt"})
# Their upserts name a session_id, which the cloud wants present in the same project (chunk or batch).
SESSION_REFERENCING_ENTITIES: Final = frozenset({"observation", "prompt"})
# What the harness counts per lane and project, in its report's column order.
LANE_COUNTS: Final = ("enqueued", "acked", "delivered", "stranded", "lost", "duplicated")


@lru_cache(maxsize=1 << 16)  # a check asks for the same few names once per row and per target
def normalize_project(project: str) -> str:
    """engram's NormalizeProject (v1.20): trim, lowercase, collapse repeated '-' and repeated '_'.

    '-' and '_' stay distinct, exactly as engram keeps them.
    """
    normalized = project.strip().lower()
    while "--" in normalized:
        normalized = normalized.replace("--", "-")
    while "__" in normalized:
        normalized = normalized.replace("__", "_")
    return normalized


def enrolled_name(project: str, enrolled: Iterable[str]) -> str | None:
    """The enrolled name PROJECT stands for: the stored name equal to it once both are normalized."""
    wanted = normalize_project(project)
    if isinstance(enrolled, frozenset):
        return _by_normalized_name(enrolled).get(wanted)
    return next((name for name in enrolled if normalize_project(name) == wanted), None)


@lru_cache(maxsize=16)
def _by_normalized_name(enrolled: frozenset[str]) -> dict[str, str]:
    # The inbox asks once per row: 20k rows against the same enrolled set in one check.
    names: dict[str, str] = {}
    for name in enrolled:
        names.setdefault(normalize_project(name), name)
    return names
