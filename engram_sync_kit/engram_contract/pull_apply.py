"""What engram does with a pulled row it cannot apply, written once (the pull side of a lane).

engram v1.20.0 (commit ba9e46c), internal/store/store.go: ApplyPulledMutation applies each pulled row in
the pull cursor's transaction. A relation whose two memories are not on this machine yet is written to
sync_apply_deferred with apply_status 'deferred' and the cursor moves on; a relation whose payload does
not decode, or lacks source_id/target_id, goes there as 'dead'. Every pull replays the deferred rows first
(ReplayDeferred, 50 per cycle, oldest first); the fifth failed try makes a row 'dead'
(deadThreshold = 5). A dead row is never retried: the relation exists in the cloud and never on this
machine ("Phase 3 adds a republish CLI"; v1.20 ships none). The worker's Status reports both counts
(CountDeferredAndDead: deferred_count, dead_count) at /sync/status, never in sync_state.

v2 and v3 (predicted from source: the sync_apply_deferred of store.go @1be5d11f and @d4397781, in
tests/fixtures/engram_schemas/) keep the table, its apply_status values and index
idx_sad_status_seen(apply_status, first_seen_at), and add target_key, remote_seq, entity_key, op,
reason_code and project to each row.
"""

from __future__ import annotations

from typing import Final

#: The worker's pull cursor, in sync_state. v1.20.0's autosync Manager.pull (manager.go @ba9e46c) asks the
#: cloud for every mutation with seq above last_pulled_seq of the legacy lane, own pushes included, and
#: ApplyPulledMutation moves the cursor to each applied row's seq; the cloud stamps each row's occurred_at
#: when it stores it (cloud_mutations DEFAULT NOW(), cloudstore.go @ba9e46c). v2's PullMutations
#: (internal/cloud/autosync/pull.go @261e80cd) keeps the same cursor rule (predicted from source).
PULL_CURSOR_COLUMN: Final = "last_pulled_seq"


def not_pulled_yet(cloud_seq: int, cursor: int) -> bool:
    """A cloud mutation the worker has not pulled: its seq is above the lane's pull cursor."""
    return cloud_seq > cursor


#: Where an applied row of each entity lives on this machine, by its entity key (applyPulledMutationTx and
#: the chunk import write the same tables, store.go @ba9e46c). `engram sync --cloud --import` moves the
#: cursor of `cloud:<project>`, not the worker's (ApplyPulledChunk, chunkTrackingTargetKey in
#: internal/sync/sync.go @ba9e46c), so a row above the cursor may already be here.
APPLIED_ENTITY_ROWS: Final = {
    "session": ("sessions", "id"),
    "observation": ("observations", "sync_id"),
    "prompt": ("user_prompts", "sync_id"),
    "relation": ("memory_relations", "sync_id"),
}


DEFERRED: Final = "deferred"
DEAD: Final = "dead"
#: store.go @ba9e46c, ReplayDeferred: the try that fails this many times makes a deferred row dead.
DEAD_AFTER_TRIES: Final = 5
