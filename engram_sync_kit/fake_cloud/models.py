"""Compatibility names: the fake cloud's model now lives in ``state`` (what it remembers), ``faults``
(scheduled misbehaviour), ``protocol`` (engram v1.20's rules over the state) and ``wire`` (replies)."""

from engram_sync_kit.engram_contract import payload_digest
from engram_sync_kit.fake_cloud.faults import (
    BODILESS_STATUSES,
    Fault,
    FaultAction,
    InvalidControlRequest,
    Route,
)
from engram_sync_kit.fake_cloud.protocol import DEFAULT_PULL_LIMIT, MAX_MUTATION_BATCH
from engram_sync_kit.fake_cloud.state import (
    DEFAULT_JOURNAL_LIMIT,
    DEFAULT_MAX_PUSH_BYTES,
    DEFAULT_STORE_LIMIT,
    MATCH_FIELDS,
    FakeCloudState,
    JournalEntry,
    JournalItem,
    ReceivedMutation,
    Transport,
)
from engram_sync_kit.fake_cloud.wire import Reply, payload_invalid, too_large

__all__ = [
    "BODILESS_STATUSES",
    "DEFAULT_JOURNAL_LIMIT",
    "DEFAULT_MAX_PUSH_BYTES",
    "DEFAULT_PULL_LIMIT",
    "DEFAULT_STORE_LIMIT",
    "MATCH_FIELDS",
    "MAX_MUTATION_BATCH",
    "FakeCloudState",
    "Fault",
    "FaultAction",
    "InvalidControlRequest",
    "JournalEntry",
    "JournalItem",
    "ReceivedMutation",
    "Reply",
    "Route",
    "Transport",
    "payload_digest",
    "payload_invalid",
    "too_large",
]
