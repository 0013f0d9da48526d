"""engram's sync contract as the kit reads it: names, digests and the cloud's push rules.

One home for facts that canary, fake_cloud and harness all depend on, so they cannot drift apart.
"""

from engram_sync_kit.engram_contract.digest import carries_fields, decoded_payload, payload_digest
from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_escape, go_json
from engram_sync_kit.engram_contract.names import (
    ENTITIES,
    LANE_COUNTS,
    LEGACY_TARGET,
    SESSION_REFERENCING_ENTITIES,
    TELEMETRY_ENTITIES,
    enrolled_name,
    normalize_project,
)
from engram_sync_kit.engram_contract.push_rules import PushRefusal, refusal_for_entry

__all__ = [
    "ENTITIES",
    "LANE_COUNTS",
    "LEGACY_TARGET",
    "SESSION_REFERENCING_ENTITIES",
    "TELEMETRY_ENTITIES",
    "ContractError",
    "PushRefusal",
    "carries_fields",
    "decoded_payload",
    "enrolled_name",
    "go_escape",
    "go_json",
    "normalize_project",
    "payload_digest",
    "refusal_for_entry",
]
