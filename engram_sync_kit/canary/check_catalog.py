"""Every check the canary can report, by the name its findings carry: the one registry a new check joins.

A scenario's `canary` expectation refuses a name that is not here (a misspelt check would match nothing and
pass), and tests/contract/test_check_catalog.py walks it: every finding the canary builds names a check of
this catalog, and every check here is raised somewhere and documented in docs/canary.md and README.md."""

from __future__ import annotations

from typing import Final

CHECKS: Final[dict[str, str]] = {
    "foreign_sync_target": "a sync_state target outside the closed target space",
    "foreign_mutation_target": "unacked journal rows on a target outside the closed target space",
    "undelivered_project_lane": "unacked rows on an allowed cloud:<enrolled> lane that v1.20's worker never reads",
    "legacy_lane_blocked": "the legacy lane's worker is stuck behind a row the cloud refuses",
    "project_lane_blocked": "a per-project lane is stuck behind a row the cloud refuses",
    "inbox_age": "an inbox key's oldest memory has waited longer than the age threshold",
    "unsorted_growth": "the unsorted inbox grew faster than its threshold",
    "unattributed_mutations": "unacked memories on the legacy lane with an empty project",
    "session_spans_directories": "one engram session wrote from several directories",
    "undecodable_payload": "journal rows whose payload is not valid UTF-8",
    "sync_stalled": "rows the worker sends waited past the stall threshold with no ack on their lane",
    "worker_gave_up": "engram v1.20's worker stopped retrying after 10 consecutive failures",
    "degraded_backoff_expired": "a failing lane's backoff ran out and no worker retried it",
    "pulled_rows_not_applied": "pulled rows engram discarded on apply, or keeps deferring past the threshold",
}
