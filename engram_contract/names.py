"""Names fixed by engram's schema and sync protocol."""

from typing import Final

# The target_key of the legacy lane: the only lane v1.20's autosync worker reads.
LEGACY_TARGET: Final = "cloud"
# Session and prompt rows are telemetry: the design keeps them out of the inbox (§1).
TELEMETRY_ENTITIES: Final = frozenset({"session", "prompt"})
MEMORY_ENTITIES: Final = frozenset({"observation", "relation"})


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
