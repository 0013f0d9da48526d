"""Names fixed by engram's schema and sync protocol."""

from typing import Final

# The target_key of the legacy lane: the only lane v1.20's autosync worker reads.
LEGACY_TARGET: Final = "cloud"
# Session and prompt rows are telemetry: the design keeps them out of the inbox (§1).
TELEMETRY_ENTITIES: Final = frozenset({"session", "prompt"})
MEMORY_ENTITIES: Final = frozenset({"observation", "relation"})
