"""Which engram version wrote this database, which lane model it follows, and what triage may write.

The generation is told from the file itself by `engram_sync_kit.engram_contract.generations` (the one
home of what each generation journals, retires and pulls; v1.20.0 observed, the rest predicted from
source, docs/version-reach.md): v1.20.0, the v1 line after it (user_version 2-8, store.go @02544436),
v2.0.0-rc.11 (store.go @1be5d11f), v2.0.0-rc.12+ (no journal row for an unenrolled project, PR #1157)
and v3 (store.go @d4397781, rc.12's journaling too).

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
from engram_sync_kit.engram_contract.generations import (
    DOCTOR_REPAIR_FOREIGN,
    NEWER_NAME,
    V1_LINE_NAME,
    V2_RC11_NAME,
    V2_RC12_NAME,
    V3_NAME,
    V120_NAME,
    Generation,
    identify_generation,
)

V120 = V120_NAME
V2 = "v2.0.0-rc.11 (schema of store.go @1be5d11f)"
V2_RC12 = "v2.0.0-rc.12 or later v2 (rc.11's schema plus sync_delete_tombstones, PR #1157)"
V3 = "v3 (schema of store.go @d4397781)"
V1_LINE = "v1 line after v1.20 (schema generation {user_version}, store.go @02544436)"
NEWER_THAN_V3 = "newer than v3 @d4397781 (user_version {user_version})"
_LABELS = {V120_NAME: V120, V2_RC11_NAME: V2, V2_RC12_NAME: V2_RC12, V3_NAME: V3}
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
    generation: Generation

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
    """The version this file reads as, in the words `check` prints (summary.engram_schema)."""
    generation = identify_generation(schema)
    if generation.name in _LABELS:
        return _LABELS[generation.name]
    if generation.name.startswith(f"{V1_LINE_NAME} (schema generation"):
        return V1_LINE.format(user_version=schema.user_version)
    if generation.name.startswith(NEWER_NAME):
        return NEWER_THAN_V3.format(user_version=schema.user_version)
    return generation.name


def identify(db: EngramDb) -> DatabaseKind:
    """The kind of database `db` is (two indexed probes; call inside a read transaction)."""
    return DatabaseKind(
        version=schema_version(db.schema),
        user_version=db.schema.user_version,
        lane_model=lane_model(db),
        generation=identify_generation(db.schema),
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


def lane_note(kind: DatabaseKind) -> str:
    """How this kind of engram journals its writes, for the evidence of a foreign sync target."""
    if kind.lane_model is LaneModel.DESIGN_CONFORMING:
        return (
            f"engram {kind.version.split()[0]} follows the design's routing here: rows of unenrolled projects wait "
            f"on '{INBOX_TARGET}' and each enrolled project's 'cloud:<project>' lane delivers; {_UNACKED_NOTE}"
        )
    generation = kind.generation
    if generation.observed:
        return f"engram v1.20 journals every mutation in the legacy 'cloud' lane with a project column; {_UNACKED_NOTE}"
    if generation.foreign_targets_are_legacy:
        return (
            f"engram {kind.version} (predicted from source, {generation.source}) journals only enrolled projects, "
            "in the legacy 'cloud' lane, and never writes a 'cloud:<project>' row for an unenrolled one: this "
            f"target is a legacy row from before the upgrade; {_UNACKED_NOTE}"
        )
    if generation.journals_unenrolled:
        return (
            f"engram {kind.version} (predicted from source, {generation.source}) journals every mutation in the "
            "legacy 'cloud' lane with a project column, as v1.20 does; 'cloud:<project>' is a sync_state row, and "
            f"its worker reads only 'cloud'; {_UNACKED_NOTE}"
        )
    return f"engram {kind.version}: lanes not known to the canary; {_UNACKED_NOTE}"


def repair_hint(kind: DatabaseKind) -> str | None:
    """engram's own supported cleanup of a foreign target, where the generation has one (rc.12+, PR #1165)."""
    if kind.generation.doctor_repairs_foreign:
        return (
            f"{DOCTOR_REPAIR_FOREIGN} (engram's own repair: retargets the pending rows of enrolled projects to "
            "'cloud' and removes a target that keeps no rows; predicted from CleanupForeignSyncTargets @d4397781)"
        )
    return None


def allows_unknown_remote_keys(kind: DatabaseKind) -> bool:
    """While cloud.json cannot be read, may a `cloud@<12 hex>` key pass as a remote's? Only on a generation
    that has per-project remotes, or one the kit cannot place; elsewhere such a key is foreign."""
    return kind.generation.remote_state_keys is not False


def worker_gives_up(kind: DatabaseKind) -> bool:
    """v1.20's worker stops for good at 10 consecutive failures (internal/cloud/autosync/manager.go
    @ba9e46c); the newest stored v2 and v3 workers retry after each backoff (predicted from source,
    engram_contract.worker_liveness). A later v1.x is not known either way: read as retrying, so a stuck
    lane there says its backoff ran out, never OK."""
    return kind.version == V120


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
