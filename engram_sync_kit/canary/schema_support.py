"""Which engram version wrote this database, which lane model it follows, and what triage may write.

The canary reads v1.20.0 (observed on the real binary) and the v2/v3 schemas transcribed from engram's
source (tests/fixtures/engram_schemas/; docs/version-reach.md). The kind is told from the file itself:

- v1.20: sync_mutations has a project column but no disposition column.
- v2 (store.go @1be5d11f): disposition columns on sync_mutations, sessions.ownership_mode.
- v3 (store.go @d4397781): also sessions.runtime_lease_expires_at and user_prompts.source_inbox_id.

Lane model. Every release so far is legacy-only: its worker pushes the `cloud` lane alone (v2's autosync
Config.TargetKey defaults to "cloud", internal/cloud/autosync/manager.go @0cd24e8a), and `cloud:inbox`
is at most a reserved sync_state row (lifecycle `inbox`, seeded by v2.0.0-rc.11+ and v3). A database is
read as design-conforming once it shows the design's routing: a row journaled to `cloud:inbox`, or an
acknowledged row on an enrolled `cloud:<project>` lane (only a worker that reads that lane acks there).
Only a v2-or-later file (one with sync_mutations.disposition) can read as design-conforming.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engram_sync_kit.canary.db import EngramDb, Schema
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.targets import INBOX_TARGET, project_target

V120 = "v1.20.0"
V2 = "v2 (schema of store.go @1be5d11f, v2.0.0-rc.11 or later)"
V3 = "v3 (schema of store.go @d4397781)"
# Versions whose databases triage has written in tests against the real binary. v2/v3 are read (check,
# inbox, dry runs) from source-transcribed fixtures only, so triage refuses to write them.
WRITE_TESTED = frozenset({V120})
# v2/v3 retire a row without acking it by setting its disposition: `quarantined` (an irreparable legacy
# row) or `superseded` (e.g. reason local_entity_deleted); neither reaches transport again.
QUARANTINED = "quarantined"
SUPERSEDED = "superseded"
PENDING_DISPOSITION = "pending"


class LaneModel(StrEnum):
    LEGACY_ONLY = "legacy-only"
    DESIGN_CONFORMING = "design-conforming"


class UntestedSchema(CanaryError):
    """Triage was asked to write a database whose schema it has not been tested on."""


@dataclass(frozen=True)
class DatabaseKind:
    version: str
    user_version: int
    lane_model: LaneModel

    @property
    def inbox_lane(self) -> str:
        """Where rows that belong to no enrolled project wait."""
        return INBOX_TARGET if self.lane_model is LaneModel.DESIGN_CONFORMING else "cloud"

    @property
    def per_project_lanes_live(self) -> bool:
        return self.lane_model is LaneModel.DESIGN_CONFORMING

    @property
    def write_tested(self) -> bool:
        return self.version in WRITE_TESTED and self.lane_model is LaneModel.LEGACY_ONLY


def schema_version(schema: Schema) -> str:
    mutations = schema.columns.get("sync_mutations", frozenset())
    if "project" not in mutations:
        return "v1 before per-project sync (no sync_mutations.project)"
    if "disposition" not in mutations:
        return (
            V120
            if schema.user_version == 0
            else f"unknown (v1.20 columns, user_version {schema.user_version})"
        )
    if schema.user_version > 1:
        return f"newer than v3 (user_version {schema.user_version})"
    v3_columns = schema.has_column("sessions", "runtime_lease_expires_at") and schema.has_column(
        "user_prompts", "source_inbox_id"
    )
    return V3 if v3_columns else V2


def identify(db: EngramDb) -> DatabaseKind:
    """The kind of database `db` is (two indexed probes; call inside a read transaction)."""
    return DatabaseKind(
        version=schema_version(db.schema),
        user_version=db.schema.user_version,
        lane_model=lane_model(db),
    )


def lane_model(db: EngramDb) -> LaneModel:
    # A v1.20-or-older file is legacy-only whatever it holds: some v1.14-era databases kept acked rows
    # under cloud:<project> (upstream #264, #1013), which must not read as a live per-project lane.
    connection = db.connection
    if not db.schema.has_column("sync_mutations", "disposition"):
        return LaneModel.LEGACY_ONLY
    if connection.execute(
        "SELECT 1 FROM sync_mutations WHERE target_key = ? LIMIT 1", (INBOX_TARGET,)
    ).fetchone():
        return LaneModel.DESIGN_CONFORMING
    lanes = sorted({project_target(project) for project in db.enrolled_projects()} - {INBOX_TARGET})
    for lane in lanes:
        if connection.execute(
            "SELECT 1 FROM sync_mutations WHERE target_key = ? AND acked_at IS NOT NULL LIMIT 1", (lane,)
        ).fetchone():
            return LaneModel.DESIGN_CONFORMING
    return LaneModel.LEGACY_ONLY


_UNACKED_NOTE = "project_unacked_rows counts unacked rows (any lane) whose project maps to this target"
_SOURCE_COMMIT = {V2: "1be5d11f", V3: "d4397781"}


def lane_note(kind: DatabaseKind) -> str:
    """How this kind of engram journals its writes, for the evidence of a foreign sync target."""
    if kind.lane_model is LaneModel.DESIGN_CONFORMING:
        return (
            f"engram {kind.version.split()[0]} follows the design's routing here: rows of unenrolled projects wait "
            f"on '{INBOX_TARGET}' and each enrolled project's 'cloud:<project>' lane delivers; {_UNACKED_NOTE}"
        )
    if kind.version == V120:
        return f"engram v1.20 journals every mutation in the legacy 'cloud' lane with a project column; {_UNACKED_NOTE}"
    if kind.version in _SOURCE_COMMIT:
        # Single journaling (docs/version-reach.md): the newer store and worker tests journal, ack and
        # retarget on 'cloud' only; cloud:<project> counts come from the project column.
        return (
            f"engram {kind.version.split()[0]} (predicted from source, schema of store.go "
            f"@{_SOURCE_COMMIT[kind.version]}) journals every mutation in the legacy 'cloud' lane with a project "
            "column, as v1.20 does; 'cloud:<project>' is a sync_state row, and its worker reads only 'cloud'; "
            f"{_UNACKED_NOTE}"
        )
    return f"engram {kind.version}: lanes not known to the canary; {_UNACKED_NOTE}"


def worker_gives_up(kind: DatabaseKind) -> bool:
    """v1.20's worker stops for good at 10 consecutive failures; v2/v3's retries after each backoff
    (predicted from source, engram_contract.worker_liveness)."""
    return kind.version not in _SOURCE_COMMIT and not kind.version.startswith("newer than v3")


def waiting_filter(schema: Schema, alias: str = "") -> str:
    """SQL that keeps only rows engram's worker would still send: v2/v3 retire a row (quarantined,
    superseded) by setting its disposition, and the transport reads pending rows only (index
    idx_sync_mutations_transport on (target_key, disposition, acked_at, seq), store.go @1be5d11f /
    @d4397781)."""
    if not schema.has_column("sync_mutations", "disposition"):
        return ""
    return f" AND {alias}disposition = '{PENDING_DISPOSITION}'"


def require_write_tested(kind: DatabaseKind) -> None:
    """Refuse, in one line, to write a schema triage has not been tested on."""
    if kind.write_tested:
        return
    model = "" if kind.lane_model is LaneModel.LEGACY_ONLY else f", {kind.lane_model} lanes"
    raise UntestedSchema(
        f"refusing to write: this database looks like engram {kind.version}{model}, and triage is tested on "
        f"{', '.join(sorted(WRITE_TESTED))} only (dry runs still work; nothing was written)"
    )
