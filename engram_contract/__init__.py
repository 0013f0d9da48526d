"""engram's sync contract as the kit reads it: names, digests and the cloud's push rules.

One home for facts that canary, fake_cloud and harness all depend on, so they cannot drift apart.
"""

from engram_contract.digest import payload_digest
from engram_contract.names import LEGACY_TARGET, MEMORY_ENTITIES, TELEMETRY_ENTITIES

__all__ = [
    "LEGACY_TARGET",
    "MEMORY_ENTITIES",
    "TELEMETRY_ENTITIES",
    "payload_digest",
]
