"""engram's schema generations: what each one journals, how it retires rows, what it pulls into.

One entry per generation the kit can tell apart from the file alone (tables, columns, PRAGMA
user_version). v1.20.0 is OBSERVED on the real binary; every other entry is PREDICTED FROM SOURCE, read
in Gentleman-Programming/engram through the reference index and cited as file@commit (short hash), or
by the index's file id where the index names no commit. docs/version-reach.md has the table and the
dates of reading.

Why the generations differ, in one line each:
- v1.20.0 journals every save on the `cloud` lane with a project column and mints `cloud:<project>`.
- The v1 module kept a line after v1.20 (internal/store/store.go@02544436, imports without a /vN
  suffix): `const schemaVersion = 8`, the disposition columns, no `cloud:inbox`; its
  `enqueueSyncMutationTx` has no enrollment gate, so it journals as v1.20 does.
- v2.0.0-rc.11 (store.go@1be5d11f, module /v2): `schemaVersion = 1`, `cloud:inbox` seeded; unenrolled
  saves are still journaled (cloud_inbox_test.go@1be5d11f, TestTelemetryStillJournalsWhileProtocol...).
- v2.0.0-rc.12 and later (PR #1157, merged 2026-09-12): `enqueueSyncMutationWithSourceTx` returns
  before any journal row or sync_state write when a local save's project is not enrolled, and drops a
  local session upsert with a blank directory (store.go@d4397781); enrolling backfills the project's
  current state (`backfillProjectSyncMutationsTx`@d4397781; the newer cloud_inbox_test.go, index file
  id 65860398204, TestLocalCloudJournalWritesRequireEnrollmentAndBackfillCurrentState). The PR also
  adds `sync_delete_tombstones` (its description: "persist durable delete tombstones"), the schema mark
  that tells an rc.12+ file from an rc.11 one (@1be5d11f has no such table, @d4397781 has it).
- v3 (store.go@d4397781, module /v3): also `sessions.runtime_lease_expires_at` and
  `user_prompts.source_inbox_id`; still `schemaVersion = 1`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

V120_NAME: Final = "v1.20.0"
V1_LINE_NAME: Final = "v1 line after v1.20"
V2_RC11_NAME: Final = "v2.0.0-rc.11"
V2_RC12_NAME: Final = "v2.0.0-rc.12+"
V3_NAME: Final = "v3"
NEWER_NAME: Final = "newer than the newest source read"
PRE_PROJECT_NAME: Final = "v1 before per-project sync"

#: the newest schema generation the v1 line's source stamps (store.go@02544436)
V1_LINE_NEWEST_USER_VERSION: Final = 8
#: what every v2/v3 store.go read stamps (`const schemaVersion = 1`, @1be5d11f and @d4397781)
V2_V3_USER_VERSION: Final = 1
#: the table PR #1157 (rc.12) adds; an rc.11 file lacks it
RC12_MARK_TABLE: Final = "sync_delete_tombstones"
#: the doctor's supported cleanup of foreign targets since rc.12 (PR #1165; CleanupForeignSyncTargets@d4397781)
DOCTOR_REPAIR_FOREIGN: Final = "engram doctor repair --check sync_target_closed_space"

RETIRED_BY_ACK: Final = ("acked",)
RETIRED_BY_DISPOSITION: Final = ("acked", "quarantined", "superseded")


class SchemaFacts(Protocol):
    """What a generation is told from: the file's tables, columns and PRAGMA user_version."""

    @property
    def user_version(self) -> int: ...

    def has_table(self, table: str) -> bool: ...

    def has_column(self, table: str, column: str) -> bool: ...


@dataclass(frozen=True)
class Generation:
    """One schema generation of engram, as far as the sync journal goes. `None` means not established."""

    name: str
    source: str  # file@commit the entry rests on
    observed: bool  # True only for what the real binary showed
    user_version: int  # as read from this file
    journals_unenrolled: bool | None  # does a save of an unenrolled project write a journal row?
    mints_unenrolled_state: bool | None  # ... and a `cloud:<project>` sync_state row?
    backfills_at_enroll: bool | None  # does enrolling journal the project's existing memories?
    retired_by: tuple[str, ...]  # how a row stops being sent: acked, or a disposition
    pull_tables: tuple[str, ...]  # where pulled rows land beside the memory tables
    seeds_inbox: bool  # `cloud:inbox` seeded with lifecycle `inbox`
    doctor_repairs_foreign: bool | None  # engram's own supported cleanup of foreign targets
    remote_state_keys: bool | None  # per-project remotes keep state under `cloud@<RemoteID>`
    update_needs_expected_project: bool | None  # PATCH /observations/{id} requires ?expected_project=

    @property
    def predicted(self) -> bool:
        return not self.observed

    @property
    def foreign_targets_are_legacy(self) -> bool:
        """On a generation that never mints a key for an unenrolled project, a foreign target can only be a
        row an older engram left before the upgrade."""
        return self.mints_unenrolled_state is False

    @property
    def memories_answer_the_inbox(self) -> bool:
        """The journal cannot show what an unenrolled project holds unless every save is journaled; then the
        memories themselves (observations) are the answer."""
        return self.journals_unenrolled is not True


_PULL_V120 = ("sync_chunks", "sync_apply_deferred")
_PULL_LATER = ("sync_chunks", "sync_apply_deferred (target_key, remote_seq, scope_class, dead rows)")
_PULL_V3 = (*_PULL_LATER, "sync_delete_tombstones", "sync_delete_tombstone_remote_floors")


def identify_generation(schema: SchemaFacts) -> Generation:
    """The generation a file belongs to (PREDICTED from source except v1.20.0; see the module docstring)."""
    user_version = schema.user_version
    if not schema.has_column("sync_mutations", "project"):
        return _unknown(PRE_PROJECT_NAME, "no sync_mutations.project", user_version)
    if not schema.has_column("sync_mutations", "disposition"):
        if user_version != 0:
            return _unknown(f"unknown (v1.20 columns, user_version {user_version})", "not read", user_version)
        return Generation(
            name=V120_NAME,
            source="the real v1.20.0 binary",
            observed=True,
            user_version=0,
            journals_unenrolled=True,
            mints_unenrolled_state=True,
            backfills_at_enroll=None,
            retired_by=RETIRED_BY_ACK,
            pull_tables=_PULL_V120,
            seeds_inbox=False,
            doctor_repairs_foreign=False,
            remote_state_keys=False,
            update_needs_expected_project=False,
        )
    if not schema.has_column("sessions", "ownership_mode"):
        # The v1 module's line: disposition columns without v2's session ownership.
        if user_version > V1_LINE_NEWEST_USER_VERSION:
            return _unknown(
                f"{V1_LINE_NAME}, newer than generation 8 (user_version {user_version})",
                "internal/store/store.go@02544436 (stamps 8)",
                user_version,
            )
        return Generation(
            name=f"{V1_LINE_NAME} (schema generation {user_version})",
            source="internal/store/store.go@02544436 (migration_version_test.go@02544436: generations 2-8)",
            observed=False,
            user_version=user_version,
            journals_unenrolled=True,
            mints_unenrolled_state=True,
            backfills_at_enroll=None,
            retired_by=("acked", "quarantined"),
            pull_tables=_PULL_LATER,
            seeds_inbox=False,
            doctor_repairs_foreign=None,
            remote_state_keys=False,
            update_needs_expected_project=False,
        )
    if user_version > V2_V3_USER_VERSION:
        return _unknown(
            f"{NEWER_NAME} (user_version {user_version})", "store.go@d4397781 stamps 1", user_version
        )
    v3 = schema.has_column("sessions", "runtime_lease_expires_at") and schema.has_column(
        "user_prompts", "source_inbox_id"
    )
    if v3:
        return Generation(
            name=V3_NAME,
            source="internal/store/store.go@d4397781, internal/server/server.go@d4397781",
            observed=False,
            user_version=user_version,
            journals_unenrolled=False,
            mints_unenrolled_state=False,
            backfills_at_enroll=True,
            retired_by=RETIRED_BY_DISPOSITION,
            pull_tables=_PULL_V3,
            seeds_inbox=True,
            doctor_repairs_foreign=True,
            # the /v3 worker has no StateKey (manager.go, index file id 70742347905) and
            # CleanupForeignSyncTargets@d4397781 spares no `cloud@` key
            remote_state_keys=False,
            update_needs_expected_project=True,
        )
    if schema.has_table(RC12_MARK_TABLE):
        return Generation(
            name=V2_RC12_NAME,
            source="PR #1157 as store.go@d4397781 has it; the /v2 worker with StateKey (index file id 71019478362)",
            observed=False,
            user_version=user_version,
            journals_unenrolled=False,
            mints_unenrolled_state=False,
            backfills_at_enroll=True,
            retired_by=RETIRED_BY_DISPOSITION,
            pull_tables=(*_PULL_LATER, RC12_MARK_TABLE),
            seeds_inbox=True,
            doctor_repairs_foreign=True,
            remote_state_keys=True,
            update_needs_expected_project=None,
        )
    return Generation(
        name=V2_RC11_NAME,
        source="internal/store/store.go@1be5d11f, internal/store/cloud_inbox_test.go@1be5d11f",
        observed=False,
        user_version=user_version,
        journals_unenrolled=True,
        mints_unenrolled_state=True,
        backfills_at_enroll=None,
        retired_by=RETIRED_BY_DISPOSITION,
        pull_tables=_PULL_LATER,
        seeds_inbox=True,
        doctor_repairs_foreign=False,
        remote_state_keys=False,
        update_needs_expected_project=False,
    )


def _unknown(name: str, source: str, user_version: int) -> Generation:
    """A file the kit cannot place: every behaviour unknown, so the canary assumes nothing of it."""
    return Generation(
        name=name,
        source=source,
        observed=False,
        user_version=user_version,
        journals_unenrolled=None,
        mints_unenrolled_state=None,
        backfills_at_enroll=None,
        retired_by=RETIRED_BY_DISPOSITION,
        pull_tables=(),
        seeds_inbox=False,
        doctor_repairs_foreign=None,
        remote_state_keys=None,
        update_needs_expected_project=None,
    )
