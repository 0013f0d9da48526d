"""Build an engram database from a schema fixture and fill it with data that simulates that version.

The fixtures live in tests/fixtures/engram_schemas/, one per schema generation
(engram_sync_kit/engram_contract/generations.py). v1.20.0.sql is dumped from a database the real v1.20.0
binary created (`dump_schema`); the others (the v1 line's generation 8, v2.0.0-rc.11, v2.0.0-rc.12+, v3)
are transcribed from engram's source and say so in their headers. Every row the fill writes is an ordinary INSERT: this is the one place the
tests write engram's tables directly, and it only simulates what each version's own writes would
leave behind (labelled per version below).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "engram_schemas"

V120 = "v1.20.0"
V1_LINE = "v1-02544436"
V2 = "v2-1be5d11f"
V2_RC12 = "v2-rc12"
V3 = "v3-d4397781"
FIXTURE_VERSIONS = (V120, V1_LINE, V2, V2_RC12, V3)
# Generations whose engram writes no journal row for a save of an unenrolled project (PR #1157, rc.12;
# enqueueSyncMutationWithSourceTx @d4397781). V3's fill keeps such rows as legacy data from before the
# upgrade; V2_RC12's is the fresh shape: the unenrolled project's memories and no journal row of them.
FRESH_UNJOURNALED = frozenset({V2_RC12})

ENROLLED = "enrolled-app"
STRAY = "stray-dir"
PHANTOM_TARGET = "cloud:stray-dir"
ALL_TIME = "2026-11-01 10:00:00"


def fixture_path(version: str) -> Path:
    return FIXTURE_DIR / f"{version}.sql"


def dump_schema(db: Path) -> str:
    """The DDL of a database as sqlite_master holds it, in creation order, without SQLite's internal
    tables and the FTS5 shadow tables (CREATE VIRTUAL TABLE makes those itself)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        virtual = {
            str(name)
            for name, sql in connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            if sql and str(sql).upper().startswith("CREATE VIRTUAL TABLE")
        }
        statements = []
        for name, sql in connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
        ):
            name = str(name)
            if name.startswith("sqlite_") or any(name.startswith(f"{table}_") for table in virtual):
                continue
            statements.append(f"{sql};")
        user_version = connection.execute("PRAGMA user_version").fetchone()[0]
    return "\n".join([*statements, f"PRAGMA user_version = {user_version};", ""])


def create_database(version: str, db: Path) -> Path:
    """A fresh database with exactly the fixture's schema (and the rows the fixture itself seeds)."""
    script = fixture_path(version).read_text(encoding="utf-8")
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.executescript(script)
    return db


@dataclass(frozen=True)
class SimulatedData:
    """What the fill wrote, so tests can pin the canary's view of it."""

    enrolled: str = ENROLLED
    stray: str = STRAY
    phantom_target: str = PHANTOM_TARGET
    stray_rows: int = 3  # session, observation, prompt of the unenrolled project (legacy lane or cloud:inbox)
    project_lane_rows: int = 3  # the enrolled project's rows on cloud:<enrolled>
    quarantined_rows: int = 0
    superseded_rows: int = 0


def _payload(**fields: object) -> str:
    return json.dumps(fields, separators=(",", ":"))


def fill_simulated(version: str, db: Path, *, design_conforming: bool = False) -> SimulatedData:
    """Rows that simulate what `version` leaves after a few saves: one enrolled project delivered on the
    legacy lane, one unenrolled project waiting there, and the derived phantom sync_state row.

    v1.20 (observed on the real binary): a save journals to `cloud` only and mints `cloud:<project>` in
    sync_state (pending). v2/v3 journal to `cloud` only as well (predicted from source,
    docs/version-reach.md "Journaling"), and engram's own migrate seeds `cloud:inbox` with lifecycle
    `inbox` (the fixture does that part). On every version the three unacked rows on `cloud:<enrolled>`
    are SIMULATED LEGACY DATA, as an older engram left them (upstream #264, #1013;
    scenarios/per-project-lane-never-delivers does the same), kept across upgrades; sync_mutations carries a disposition, one row is quarantined as engram's recovery
    leaves a malformed legacy row (internal/cloud/autosync/manager.go @0cd24e8a), and one prompt is
    superseded (reason local_entity_deleted) as engram retires a row whose local entity is gone.

    design_conforming=True simulates an engram that implements the design (no release does yet): the
    unenrolled project's rows are journaled to `cloud:inbox`, and the enrolled lane delivers (acked).
    """
    has_disposition = version != V120
    journal_stray = design_conforming or version not in FRESH_UNJOURNALED
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("BEGIN IMMEDIATE")
        for target, lifecycle in (
            ("cloud", "pending"),
            (f"cloud:{ENROLLED}", "pending"),
            (PHANTOM_TARGET, "pending"),
        ):
            connection.execute(
                "INSERT OR IGNORE INTO sync_state (target_key, lifecycle, updated_at) VALUES (?, ?, ?)",
                (target, lifecycle, ALL_TIME),
            )
        connection.execute(
            "INSERT INTO sync_enrolled_projects (project, enrolled_at) VALUES (?, ?)", (ENROLLED, ALL_TIME)
        )
        stray_lane = "cloud:inbox" if design_conforming else "cloud"
        rows: list[tuple[str, str, str, str, str, str | None]] = []
        for project, directory, lane in (
            (ENROLLED, "/home/u/src/enrolled-app", "cloud"),
            (STRAY, "/home/u/stray-dir", stray_lane),
        ):
            session = f"sess-{project}"
            connection.execute(
                "INSERT INTO sessions (id, project, directory, started_at) VALUES (?, ?, ?, ?)",
                (session, project, directory, ALL_TIME),
            )
            connection.execute(
                "INSERT INTO observations (sync_id, session_id, type, title, content, project, created_at, "
                "updated_at) VALUES (?, ?, 'decision', ?, 'content', ?, ?, ?)",
                (f"obs-{project}", session, f"title {project}", project, ALL_TIME, ALL_TIME),
            )
            connection.execute(
                "INSERT INTO user_prompts (sync_id, session_id, content, project, created_at) VALUES (?, ?, 'p', ?, ?)",
                (f"prompt-{project}", session, project, ALL_TIME),
            )
            acked = ALL_TIME if project == ENROLLED else None
            entries = [
                ("session", session, _payload(id=session, project=project, directory=directory)),
                (
                    "observation",
                    f"obs-{project}",
                    _payload(
                        sync_id=f"obs-{project}",
                        session_id=session,
                        type="decision",
                        title=f"title {project}",
                        content="content",
                        project=project,
                        scope="project",
                    ),
                ),
                (
                    "prompt",
                    f"prompt-{project}",
                    _payload(sync_id=f"prompt-{project}", session_id=session, content="p", project=project),
                ),
            ]
            if project == ENROLLED or journal_stray:
                rows += [(lane, entity, key, payload, project, acked) for entity, key, payload in entries]
            if project == ENROLLED:
                # Legacy rows an older engram left on the enrolled project's own lane; a legacy-only worker
                # never reads it (never acked), a design-conforming one delivers from it.
                project_lane_acked = ALL_TIME if design_conforming else None
                rows += [(f"cloud:{ENROLLED}", e, k, p, project, project_lane_acked) for e, k, p in entries]
        for lane, entity, key, payload, project, acked in rows:
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
                "occurred_at, acked_at) VALUES (?, ?, ?, 'upsert', ?, 'local', ?, ?, ?)",
                (lane, entity, key, payload, project, ALL_TIME, acked),
            )
        quarantined = superseded = 0
        if has_disposition:
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
                "occurred_at, disposition, disposition_reason, disposition_at) VALUES ('cloud', 'observation', "
                "'obs-quarantined', 'upsert', '{}', 'local', ?, ?, 'quarantined', 'payload_invalid', ?)",
                (ENROLLED, ALL_TIME, ALL_TIME),
            )
            quarantined = 1
        # The v1 line @02544436 has no superseded disposition (only pending and quarantined).
        if has_disposition and version != V1_LINE:
            # A prompt engram retired because its local entity was deleted: unacked, never sent again
            # (doctor test seeding disposition 'superseded', reason 'local_entity_deleted'; internal/
            # diagnostic, index file ids 70306711781 and 68490790294).
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
                "occurred_at, disposition, disposition_reason, disposition_evidence, disposition_at) VALUES "
                "('cloud', 'prompt', 'prompt-retired', 'upsert', ?, 'local', ?, ?, 'superseded', "
                "'local_entity_deleted', '{\"entity_key\":\"prompt-retired\"}', ?)",
                (
                    _payload(
                        sync_id="prompt-retired",
                        session_id=f"sess-{ENROLLED}",
                        content="old",
                        project=ENROLLED,
                    ),
                    ENROLLED,
                    ALL_TIME,
                    ALL_TIME,
                ),
            )
            superseded = 1
        last_seq = connection.execute("SELECT max(seq) FROM sync_mutations").fetchone()[0]
        connection.execute(
            "UPDATE sync_state SET last_enqueued_seq = ? WHERE target_key = 'cloud'", (last_seq,)
        )
        connection.execute("COMMIT")
    return SimulatedData(
        stray_rows=3 if journal_stray else 0, quarantined_rows=quarantined, superseded_rows=superseded
    )


def build(version: str, db: Path, *, design_conforming: bool = False) -> SimulatedData:
    create_database(version, db)
    return fill_simulated(version, db, design_conforming=design_conforming)
