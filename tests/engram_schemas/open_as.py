"""Open a v1.20 database "as vN": what a later binary's startup migration (the v1 line's generation 8,
v2 rc.11, v2 rc.12+ or v3) would leave in a file that the real v1.20.0 binary wrote. PREDICTED FROM
SOURCE, NEVER OBSERVED: no such binary builds here. The v1.20 binary keeps journaling every save, so an
rc.12+/v3 file opened this way holds the journal rows of unenrolled projects an older engram would have
left before the upgrade (legacy rows), never the fresh rc.12 shape (builder.FRESH_UNJOURNALED has that).

Source: `runStartupMigrations` and `migrate` in internal/store/store.go @1be5d11f (v2 module) and
@d4397781 (v3 module); the fixtures in tests/fixtures/engram_schemas/ transcribe their DDL. On every open
migrate runs CREATE ... IF NOT EXISTS for each table and index, `addColumnIfNotExists` for each column a
table lacks, a few data repairs, the sync_state seeds, and stamps `PRAGMA user_version = 1` when it was
lower. So `open_as` adds to the file, with the fixture's own definitions, every table, column, index and
trigger the fixture has and the file lacks, runs the repairs that touch what the canary reads, writes the
seed rows and stamps user_version. It is idempotent, as engram's own open is: call it after every run of
the v1.20 binary (which keeps writing into the vN-shaped file, with the new columns' defaults).

migrateFTS is simulated too: v1.20's FTS5 tables lack tokenize='trigram' and its triggers differ, so a
v2/v3 open drops both tables and their triggers, creates the fixture's, and repopulates them. v1.20 keeps
writing through the new triggers (they name the same columns).

Left out on purpose (the canary never reads them):
- data repairs of tables the canary never reads (observations' scope/topic/revision/sync_id defaults,
  prompt project/sync_id defaults, cloud_upgrade_state snapshots, sync_apply_deferred payload ids).

This is the one place besides builder.py that writes engram's tables directly, and it only simulates
another version's open.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from engram_schemas.builder import V120, fixture_path

SEED_BEGIN = "-- BEGIN engram seed rows"
SEED_END = "-- END engram seed rows"

# migrateFTS's rebuilds (store.go @1be5d11f / @d4397781): FTS table -> (its content table, repopulation).
FTS_REBUILDS = {
    "observations_fts": (
        "observations",
        "INSERT INTO observations_fts(rowid, title, content, tool_name, type, project, topic_key) "
        "SELECT id, title, content, tool_name, type, project, topic_key FROM observations WHERE deleted_at IS NULL",
    ),
    "prompts_fts": (
        "user_prompts",
        "INSERT INTO prompts_fts(rowid, content, project) SELECT id, content, project FROM user_prompts",
    ),
}

# migrate's repairs of rows the canary reads (store.go @1be5d11f / @d4397781, func migrate), in order.
DATA_REPAIRS = (
    # Legacy sessions are classified only when their identity proves the owner.
    "UPDATE sessions SET ownership_mode = CASE "
    "WHEN id = 'manual-save-' || project AND ifnull(trim(project), '') <> '' THEN 'project_owned' "
    "WHEN id NOT LIKE 'manual-save-%' AND ifnull(trim(project), '') <> '' THEN 'shared' "
    "ELSE ownership_mode END WHERE ownership_mode IS NULL",
    "UPDATE sync_mutations SET disposition = 'pending' WHERE disposition IS NULL OR disposition = ''",
    # The project backfill: from the payload, then from the payload's session.
    "UPDATE sync_mutations SET project = COALESCE(json_extract(payload, '$.project'), '') "
    "WHERE project = '' AND payload != ''",
    "UPDATE sync_mutations SET project = COALESCE((SELECT sessions.project FROM sessions "
    "WHERE sessions.id = json_extract(sync_mutations.payload, '$.session_id')), '') "
    "WHERE project = '' AND payload != '' AND ifnull(json_extract(payload, '$.session_id'), '') != ''",
)


@dataclass(frozen=True)
class Column:
    table: str
    name: str
    definition: str


@dataclass(frozen=True)
class FixtureSchema:
    """What a fixture defines, read by executing it into an in-memory database."""

    tables: dict[str, str]  # name -> CREATE statement (ordinary and virtual tables)
    columns: tuple[Column, ...]
    indexes: dict[str, str]
    triggers: dict[str, tuple[str, str]]  # name -> (table, CREATE statement)
    user_version: int
    seeds: str


def _seed_section(script: str) -> str:
    start = script.index(SEED_BEGIN)
    return script[start : script.index(SEED_END, start)]


def _column_definition(table_sql: str, name: str) -> str:
    """The column's definition as the fixture wrote it (type, NOT NULL, DEFAULT ...), from its CREATE."""
    body = table_sql[table_sql.index("(") + 1 : table_sql.rindex(")")]
    depth, start, parts = 0, 0, []
    for position, char in enumerate(body):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(body[start:position])
            start = position + 1
    parts.append(body[start:])
    for part in parts:
        words = part.split()
        if words and words[0].strip('"') == name:
            return " ".join(words)
    raise ValueError(f"column {name} not found in {table_sql[:60]}")


@cache
def fixture_schema(version: str) -> FixtureSchema:
    script = fixture_path(version).read_text(encoding="utf-8")
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        connection.executescript(script)
        master = connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
        ).fetchall()
        virtual = {
            str(n) for t, n, _, s in master if t == "table" and str(s).upper().startswith("CREATE VIRTUAL")
        }
        tables = {
            str(name): str(sql)
            for kind, name, _, sql in master
            if kind == "table" and not any(str(name).startswith(f"{v}_") for v in virtual)
        }
        columns = tuple(
            Column(table, str(row[1]), _column_definition(tables[table], str(row[1])))
            for table in tables
            if table not in virtual
            for row in connection.execute(f'PRAGMA table_info("{table}")')
        )
        user_version = int(connection.execute("PRAGMA user_version").fetchone()[0])
    return FixtureSchema(
        tables=tables,
        columns=columns,
        indexes={str(n): str(s) for t, n, _, s in master if t == "index"},
        triggers={str(n): (str(table), str(s)) for t, n, table, s in master if t == "trigger"},
        user_version=user_version,
        seeds=_seed_section(script),
    )


def _normalized(sql: str) -> str:
    return "".join(sql.split()).lower().replace("ifnotexists", "")


def _migrate_fts(connection: sqlite3.Connection, wanted: FixtureSchema) -> None:
    """Rebuild an FTS table whose definition or triggers are not the fixture's, as migrateFTS does."""
    master = {
        str(name): (str(kind), str(table), str(sql))
        for kind, name, table, sql in connection.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        )
    }
    for fts, (content, repopulate) in FTS_REBUILDS.items():
        triggers = {name: sql for name, (table, sql) in wanted.triggers.items() if table == content}
        current = {
            name: sql for name, (kind, table, sql) in master.items() if kind == "trigger" and table == content
        }
        same_table = fts in master and _normalized(master[fts][2]) == _normalized(wanted.tables[fts])
        same_triggers = {n: _normalized(sql) for n, sql in current.items()} == {
            n: _normalized(sql) for n, sql in triggers.items()
        }
        if same_table and same_triggers:
            continue
        for name in current:
            connection.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        connection.execute(f'DROP TABLE IF EXISTS "{fts}"')
        connection.execute(wanted.tables[fts])
        for sql in triggers.values():
            connection.execute(sql)
        connection.execute(repopulate)


def open_as(version: str, db: Path) -> None:
    """Leave `db` as a `version` binary's open would (see the module docstring); v1.20.0 is a no-op."""
    if version == V120 or not db.exists():
        return
    wanted = fixture_schema(version)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None, timeout=30)) as connection:
        connection.execute("BEGIN IMMEDIATE")
        try:
            present = {
                str(name): str(kind)
                for kind, name in connection.execute("SELECT type, name FROM sqlite_master")
            }
            for name, sql in wanted.tables.items():
                if name not in present:
                    connection.execute(sql)
            have: dict[str, set[str]] = {}
            for column in wanted.columns:
                if column.table not in have:
                    have[column.table] = {
                        str(row[1]) for row in connection.execute(f'PRAGMA table_info("{column.table}")')
                    }
                if column.name not in have[column.table]:
                    connection.execute(f'ALTER TABLE "{column.table}" ADD COLUMN {column.definition}')
            _migrate_fts(connection, wanted)
            for name, sql in wanted.indexes.items():
                if name not in present:
                    connection.execute(sql)
            owned_sessions = any(c.table == "sessions" and c.name == "ownership_mode" for c in wanted.columns)
            for repair in DATA_REPAIRS:
                # The v1 line (store.go @02544436) has no sessions.ownership_mode to classify.
                if "ownership_mode" in repair and not owned_sessions:
                    continue
                connection.execute(repair)
            for statement in filter(
                None, (s.strip() for s in re.sub(r"--[^\n]*", "", wanted.seeds).split(";"))
            ):
                connection.execute(statement)
            if int(connection.execute("PRAGMA user_version").fetchone()[0]) < wanted.user_version:
                connection.execute(f"PRAGMA user_version = {wanted.user_version}")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
