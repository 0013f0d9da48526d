"""The virtual inbox over today's engram (v1.20): which rows it holds (its selection) and its tripwires.

engram v1.20 journals every write in the legacy lane (target_key 'cloud') with a project column, and its
worker pushes only rows whose project is enrolled (or empty). The inbox is therefore the set of unacked
legacy-lane rows whose non-empty project is not in sync_enrolled_projects: rows no worker will ever
deliver. Each row gets the design's inbox key from canary.derive. The key map's file I/O is
canary.key_map; the text of `inbox list` and `show` is canary.inbox_render.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.db import EngramDb, Schema
from engram_sync_kit.canary.derive import (
    UNSORTED,
    AliasMap,
    CandidateSource,
    Derivation,
    RowContext,
    derive,
    normalize_cwd,
    session_designation,
    stage_a,
)
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.findings import Finding
from engram_sync_kit.canary.inbox.aliases import load_aliases
from engram_sync_kit.canary.inbox.key_map import (
    KEY_MAP_SCHEMA,
    read_key_entries,
    remembered_keys_path,
    write_key_entries,
)
from engram_sync_kit.canary.inbox.settings import InboxSettings
from engram_sync_kit.canary.schema_support import LaneModel, identify, waiting_filter
from engram_sync_kit.canary.targets import INBOX_TARGET, normalize_project
from engram_sync_kit.canary.text import utc_iso
from engram_sync_kit.engram_contract import LEGACY_TARGET, TELEMETRY_ENTITIES
from engram_sync_kit.engram_contract.worker_selection import legacy_unacked, worker_skips

# The inbox's rows: on the legacy lane, the unacked rows the v1.20 worker skips (worker_selection).
_INBOX_ROWS_SQL = """
SELECT m.seq, m.entity, m.entity_key, m.op, CAST(m.payload AS BLOB), m.project, m.occurred_at,
       s.id, s.project, s.directory
FROM sync_mutations AS m
LEFT JOIN sessions AS s ON s.id = CASE
    WHEN m.entity = 'session' THEN m.entity_key
    WHEN json_valid(m.payload) THEN json_extract(m.payload, '$.session_id')
END
WHERE {inbox}
  AND m.seq > ?{waiting}
ORDER BY m.seq
"""
# On a design-conforming engram the inbox is a lane of its own: every unacked row journaled to it.
_DESIGN_INBOX_WHERE = f"m.target_key = '{INBOX_TARGET}' AND m.acked_at IS NULL"


# engram v2.0.0-rc.12+ and v3 write no journal row for a save of an unenrolled project (PR #1157;
# engram_contract.generations), so there the journal cannot say what will never sync: the memories can.
# Live observations of a project outside sync_enrolled_projects, minus those that still have an unacked
# journal row of their own (legacy rows from before the upgrade, read from the journal as before).
# CAST(... AS TEXT): a BLOB an older writer left reads as text (bad UTF-8 replaced, db.LENIENT_TEXT).
_UNJOURNALED_MEMORIES_SQL = """
SELECT CAST(o.sync_id AS TEXT), CAST(o.session_id AS TEXT), CAST(o.project AS TEXT), CAST(o.created_at AS TEXT),
       CAST(o.type AS TEXT), CAST(o.title AS TEXT), substr(CAST(o.content AS TEXT), 1, 240),
       s.id, CAST(s.project AS TEXT), CAST(s.directory AS TEXT)
FROM observations AS o
LEFT JOIN sessions AS s ON s.id = o.session_id
WHERE o.deleted_at IS NULL AND ifnull(o.project, '') <> ''
  AND o.project NOT IN (SELECT project FROM sync_enrolled_projects)
  AND NOT EXISTS (
    SELECT 1 FROM sync_mutations AS m
    WHERE m.target_key IN ('cloud', 'cloud:' || o.project) AND m.entity = 'observation'
      AND m.entity_key = o.sync_id AND m.acked_at IS NULL
  )
ORDER BY o.id
"""

UNATTRIBUTED_MUTATIONS = "unattributed_mutations"
# Legacy-lane rows journaled without a project (v1.20's `engram save` without --project): the worker sends
# them, but the cloud refuses an entry with an empty project (400), so they never deliver either.
# `+target_key` keeps the planner on idx_sync_mutations_project: on target_key it scans every legacy row
# (1.4 s instead of 0.1 ms on the 1M-row benchmark database).
_UNATTRIBUTED_SQL = f"""
SELECT entity, count(*), min(occurred_at) FROM sync_mutations
WHERE +target_key = '{LEGACY_TARGET}' AND acked_at IS NULL AND project = ''{{waiting}}
GROUP BY entity
"""
NO_PROJECT_KEY = "(no project)"
NO_PROJECT_HINT = (
    "journaled without a project (engram save without --project): engram's worker sends them and the cloud "
    "refuses them (400: mutation entries must specify a project), which also holds back the lane's later rows"
)


class InboxUnsupported(CanaryError):
    """The database's schema has no per-row project column, so there is no inbox to compute."""


class GitRepoResolver:
    """Stage A's view of this machine's filesystem, the way engram's project detection looks at it.

    `repo_name`: the git repository holding a directory. A directory that no longer exists is walked up
    like any other path: its rows keep the repo of the nearest surviving ancestor with a .git entry.
    `origin_name` and `only_child_repo` answer engram's git_remote and git_child cases
    (internal/project/detect.go, v1.20.0), so a detected project is never mistaken for a designation.
    """

    def __init__(self, remembered: Mapping[tuple[str, str], tuple[str | None, str]] | None = None) -> None:
        # Stage A answers seen while their cwd existed (kept in the canary's state dir); `learned`: new ones.
        self.remembered = dict(remembered or {})
        self.learned: dict[tuple[str, str], tuple[str | None, str]] = {}
        self._contexts: dict[tuple[bool, str | None, str | None], RowContext] = {}
        self._contexts_for: AliasMap | None = None
        self._roots: dict[str, Path | None] = {}
        self._origins: dict[Path, str | None] = {}
        self._children: dict[str, str | None] = {}
        self._exists: dict[str, bool] = {}

    def repo_name(self, directory: str | None) -> str | None:
        if not directory:
            return None
        root = self.repo_root(directory)
        return root.name if root is not None else None

    def repo_root(self, directory: str) -> Path | None:
        normalized = normalize_cwd(directory)
        if normalized not in self._roots:
            self._roots[normalized] = self._lookup(normalized)
        return self._roots[normalized]

    def exists(self, directory: str) -> bool:
        normalized = normalize_cwd(directory)
        if normalized not in self._exists:
            try:
                self._exists[normalized] = Path(normalized).is_absolute() and Path(normalized).is_dir()
            except OSError:
                self._exists[normalized] = False
        return self._exists[normalized]

    def origin_name(self, directory: str) -> str | None:
        """engram's git_remote name: the last path part of origin's URL, without .git, lowercased."""
        root = self.repo_root(directory)
        if root is None:
            return None
        if root not in self._origins:
            self._origins[root] = _origin_repo_name(root)
        return self._origins[root]

    def only_child_repo(self, directory: str) -> str | None:
        """engram's git_child: the name of the directory's only child repository (as engram scans)."""
        normalized = normalize_cwd(directory)
        if normalized not in self._children:
            self._children[normalized] = _only_child_repo(Path(normalized))
        return self._children[normalized]

    @staticmethod
    def _lookup(directory: str) -> Path | None:
        path = Path(directory)
        if not path.is_absolute():
            return None
        for candidate in (path, *path.parents):
            try:
                if (candidate / ".git").exists() and candidate.name:
                    return candidate
            except OSError:
                return None
        return None

    def context(
        self, has_session: bool, session_project: object, directory: str | None, aliases: AliasMap
    ) -> RowContext:
        """Stage A's facts for one row: designation, detected repository, or neither; missing cwds marked."""
        memo_key = (has_session, session_project if isinstance(session_project, str) else None, directory)
        if memo_key not in self._contexts or self._contexts_for is not aliases:
            if self._contexts_for is not aliases:
                self._contexts, self._contexts_for = {}, aliases
            self._contexts[memo_key] = self._context(has_session, session_project, directory, aliases)
        return self._contexts[memo_key]

    def _context(
        self, has_session: bool, session_project: object, directory: str | None, aliases: AliasMap
    ) -> RowContext:
        missing = bool(directory) and not self.exists(directory or "")
        if not has_session:
            return RowContext(cwd=directory, repo_name=self.repo_name(directory), cwd_missing=missing)
        project = normalize_project(session_project) if isinstance(session_project, str) else ""
        recorded = aliases.recorded_key(directory, project)
        if recorded is not None:
            key, source = recorded
            if source == CandidateSource.DESIGNATION.value:
                return RowContext(designation=key, cwd=directory, cwd_missing=missing)
            return RowContext(
                cwd=directory, detected=key, detected_source=CandidateSource.KEY_MAP, cwd_missing=missing
            )
        if missing:
            # A renamed or deleted repo: the answer remembered while its cwd still existed.
            remembered = self.remembered.get((directory or "", project))
            if remembered is not None:
                return RowContext(
                    cwd=directory,
                    detected=remembered[0],
                    detected_source=CandidateSource.RECORDED,
                    cwd_missing=True,
                )
        context = self._detect(project, directory, missing)
        if directory and not missing:
            self._learn(directory, project, context)
        return context

    def _learn(self, directory: str, project: str, context: RowContext) -> None:
        """Remember a repository answer while the cwd exists, for the day it is renamed or deleted."""
        candidate, source = stage_a(context)
        if candidate is None or source is CandidateSource.DESIGNATION:
            return
        entry = (candidate, source.value)
        if self.remembered.get((directory, project)) != entry:
            self.learned[(directory, project)] = entry
            self.remembered[(directory, project)] = entry

    def _detect(self, project: str, directory: str | None, missing: bool) -> RowContext:
        designation = session_designation(None, project, directory)
        if designation is None:
            # engram named the session after the cwd (git root or basename): the repo decides. A missing
            # cwd with nothing remembered is no evidence of a repo: no candidate (export-keys/--key-map).
            return RowContext(cwd=directory, repo_name=self.repo_name(directory), cwd_missing=missing)
        if directory and not missing:
            if self.origin_name(directory) == project:
                return RowContext(cwd=directory, detected=project, detected_source=CandidateSource.GIT_REMOTE)
            if self.only_child_repo(directory) == project:
                return RowContext(cwd=directory, detected=project, detected_source=CandidateSource.GIT_CHILD)
        return RowContext(
            designation=designation, cwd=directory, repo_name=self.repo_name(directory), cwd_missing=missing
        )


# Directory names engram's child scan skips (internal/project/detect.go noiseSet, v1.20.0).
_CHILD_SCAN_NOISE = frozenset(
    {"node_modules", "vendor", ".venv", "__pycache__", "target", "dist", "build", ".idea", ".vscode"}
)
_CHILD_SCAN_LIMIT = 20


def _only_child_repo(directory: Path) -> str | None:
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return None
    repos: list[str] = []
    scanned = 0
    for entry in entries:
        if scanned >= _CHILD_SCAN_LIMIT:
            break
        try:
            if not entry.is_dir() or entry.name.startswith(".") or entry.name in _CHILD_SCAN_NOISE:
                continue
            scanned += 1
            if (Path(entry.path) / ".git").exists():
                repos.append(entry.name)
        except OSError:
            continue
        if len(repos) > 1:
            return None
    return normalize_project(repos[0]) if repos else None


def _origin_repo_name(root: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = done.stdout.strip()
    if done.returncode != 0 or not url:
        return None
    if url.endswith(".git"):
        url = url[: -len(".git")]
    parts = [part for part in re.split(r"[/:]", url) if part]
    return normalize_project(parts[-1]) if parts else None


@dataclass(slots=True)  # not frozen: a frozen init costs 3 µs a row, 60 ms of a 20k-row inbox
class InboxRow:
    seq: int
    entity: str
    entity_key: str
    op: str
    payload: str
    project: str
    occurred_at: str
    cwd: str | None
    derivation: Derivation
    cwd_missing: bool = False
    journaled: bool = True  # False: a memory engram never journaled (seq 0), read from observations

    @property
    def is_telemetry(self) -> bool:
        return self.entity in TELEMETRY_ENTITIES

    @property
    def key(self) -> str:
        return self.derivation.inbox_key


@dataclass(frozen=True)
class InboxSnapshot:
    rows: tuple[InboxRow, ...]
    enrolled: frozenset[str]
    taken_at: datetime
    high_water: int = 0
    unattributed: KeySummary | None = None
    undecodable: tuple[int, ...] = ()  # seqs of inbox rows left out: their payload is not valid UTF-8


@dataclass
class KeySummary:
    key: str
    count: int = 0
    telemetry: int = 0
    oldest: datetime | None = None
    oldest_age_days: float = 0.0
    entities: dict[str, int] = field(default_factory=dict)
    cwds: dict[str, int] = field(default_factory=dict)
    resolved_to: str | None = None
    claim_command: str | None = None
    cwd_claim_commands: dict[str, str] = field(default_factory=dict)
    drop_command: str | None = None  # a key of telemetry only: nothing to claim, its noise to drop
    hint: str | None = None
    missing_cwds: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.count + self.telemetry

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "count": self.count,
            "telemetry": self.telemetry,
            "total": self.total,
            "oldest": utc_iso(self.oldest),
            "oldest_age_days": round(self.oldest_age_days, 3),
            "entities": dict(sorted(self.entities.items())),
            "cwds": dict(sorted(self.cwds.items())),
            "resolved_to": self.resolved_to,
            "claim_command": self.claim_command,
            "cwd_claim_commands": dict(sorted(self.cwd_claim_commands.items())),
            "drop_command": self.drop_command,
            "hint": self.hint,
            "missing_cwds": self.missing_cwds,
        }


def require_inbox_schema(schema: Schema) -> None:
    if not schema.has_column("sync_mutations", "project"):
        raise InboxUnsupported(
            "sync_mutations has no project column: this engram predates per-project sync (need v1.20's schema)"
        )
    if not schema.has_table("sessions"):
        raise InboxUnsupported("no sessions table: not an engram memory database")


@functools.lru_cache(maxsize=4096)  # engram's times have whole seconds: many rows share one
def parse_engram_time(text: str) -> datetime | None:
    """engram writes datetime('now') (UTC, 'YYYY-MM-DD HH:MM:SS'); ISO strings are accepted too."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__, not in the stubs
_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _decode(text: str) -> Any:
    # json.loads(text) without its three Python frames a call (a third of a 20k-row inbox's parse):
    # the same scanner, whitespace and trailing-data rule; a BOM is refused by both.
    try:
        decoded, end = _SCAN(text, _JSON_WHITESPACE.match(text).end())  # type: ignore[union-attr]
    except StopIteration as error:
        raise ValueError("Expecting value") from error
    if _JSON_WHITESPACE.match(text, end).end() != len(text):  # type: ignore[union-attr]
        raise ValueError("Extra data")
    return decoded


def payload_object(payload: str) -> dict[str, Any]:
    try:
        decoded = _decode(payload)
    except (ValueError, RecursionError):
        return {}
    if isinstance(decoded, str):
        try:
            decoded = _decode(decoded)
        except (ValueError, RecursionError):
            return {}
    return decoded if isinstance(decoded, dict) else {}


def select_inbox_rows(
    db: EngramDb,
    aliases: AliasMap,
    resolver: GitRepoResolver | None = None,
    *,
    now: datetime | None = None,
    after_seq: int = 0,
) -> InboxSnapshot:
    """The inbox as of the caller's current transaction (no transaction control here).

    `after_seq` limits it to rows journaled after that seq; `high_water` is the log's last seq.
    """
    connection, schema = db.connection, db.schema
    require_inbox_schema(schema)
    memory = remembered_keys_path(db) if resolver is None else None
    resolver = resolver or GitRepoResolver(read_key_entries(memory) if memory is not None else None)
    enrolled = db.enrolled_projects()
    if identify(db).lane_model is LaneModel.DESIGN_CONFORMING:
        inbox = _DESIGN_INBOX_WHERE
    else:
        skipped = worker_skips("m.", enrollment_table=schema.has_table("sync_enrolled_projects"))
        inbox = f"{legacy_unacked('m.')} AND {skipped}"
    sql = _INBOX_ROWS_SQL.format(inbox=inbox, waiting=waiting_filter(schema, "m."))
    rows: list[InboxRow] = []
    undecodable: list[int] = []
    derived: dict[tuple[bool, str | None, str | None], tuple[Derivation, bool]] = {}
    for (
        seq,
        entity,
        entity_key,
        op,
        payload,
        project,
        occurred_at,
        sid,
        sproject,
        sdirectory,
    ) in connection.execute(sql, (after_seq,)):
        try:
            payload_text = payload.decode("utf-8") if isinstance(payload, bytes) else str(payload)
        except UnicodeDecodeError:
            # Never offered to triage: a claim would copy it with the bad bytes replaced.
            undecodable.append(int(seq))
            continue
        if sid is None and entity == "session":
            body = payload_object(payload_text)
            sid, sproject, sdirectory = entity_key, body.get("project"), body.get("directory")
        directory = (
            normalize_cwd(str(sdirectory)) if isinstance(sdirectory, str) and sdirectory.strip() else None
        )
        # Rows share few session shapes: derive once per shape (the resolver keys its answers the same way).
        shape = (sid is not None, sproject if isinstance(sproject, str) else None, directory)
        known = derived.get(shape)
        if known is None:
            context = resolver.context(sid is not None, sproject, directory, aliases)
            known = derived[shape] = (derive(context, aliases, enrolled), context.cwd_missing)
        # Positional: InboxRow's field order (keywords cost a tenth of this loop at 20k rows).
        rows.append(
            InboxRow(
                int(seq),
                str(entity),
                str(entity_key),
                str(op),
                payload_text,
                str(project),
                str(occurred_at),
                directory,
                *known,
            )
        )
    if memory is not None and resolver.learned:
        write_key_entries(memory, resolver.remembered)
    high_water = int(connection.execute("SELECT ifnull(MAX(seq), 0) FROM sync_mutations").fetchone()[0])
    return InboxSnapshot(
        rows=tuple(rows),
        enrolled=enrolled,
        taken_at=now or datetime.now(UTC),
        high_water=high_water,
        undecodable=tuple(undecodable),
    )


def select_unjournaled_memories(
    db: EngramDb, aliases: AliasMap, resolver: GitRepoResolver | None = None
) -> tuple[InboxRow, ...]:
    """The memories of unenrolled projects that no journal row stands for, on a generation that journals
    no such save (none elsewhere: there the journal holds every one). No transaction control here."""
    kind = identify(db)
    if not kind.generation.memories_answer_the_inbox or kind.lane_model is LaneModel.DESIGN_CONFORMING:
        return ()
    if not db.schema.has_column("observations", "sync_id"):
        return ()
    memory = remembered_keys_path(db) if resolver is None else None
    resolver = resolver or GitRepoResolver(read_key_entries(memory) if memory is not None else None)
    enrolled = db.enrolled_projects()
    rows: list[InboxRow] = []
    # Memories share few sessions: derive once per session shape, not once per memory.
    derived: dict[tuple[bool, Any, str | None], tuple[Derivation, bool]] = {}
    for (
        sync_id,
        session_id,
        project,
        created_at,
        kind,
        title,
        content,
        sid,
        sproject,
        sdirectory,
    ) in db.connection.execute(_UNJOURNALED_MEMORIES_SQL):
        if normalize_project(str(project)) in enrolled:
            continue
        directory = (
            normalize_cwd(str(sdirectory)) if isinstance(sdirectory, str) and sdirectory.strip() else None
        )
        shape = (sid is not None, sproject, directory)
        if shape not in derived:
            context = resolver.context(sid is not None, sproject, directory, aliases)
            derived[shape] = (derive(context, aliases, enrolled), context.cwd_missing)
        derivation, cwd_missing = derived[shape]
        # What `inbox show` prints of a memory (type, title, its content's first line), as a payload would.
        payload = json.dumps(
            {
                "sync_id": sync_id,
                "session_id": session_id,
                "project": project,
                "type": kind,
                "title": title,
                "content": content,
                "created_at": created_at,
            }
        )
        rows.append(
            InboxRow(
                seq=0,
                entity="observation",
                entity_key=str(sync_id),
                op="upsert",
                payload=payload,
                project=str(project),
                occurred_at=str(created_at),
                cwd=directory,
                derivation=derivation,
                cwd_missing=cwd_missing,
                journaled=False,
            )
        )
    if memory is not None and resolver.learned:
        write_key_entries(memory, resolver.remembered)
    return tuple(rows)


def read_inbox(
    db: EngramDb, aliases: AliasMap, resolver: GitRepoResolver | None = None, *, now: datetime | None = None
) -> InboxSnapshot:
    """One short read transaction over the inbox, with the legacy-lane rows that have no project and, on a
    generation that journals no save of an unenrolled project, the memories that will never sync."""
    with db.read_transaction():
        snapshot = select_inbox_rows(db, aliases, resolver, now=now)
        unjournaled = select_unjournaled_memories(db, aliases, resolver)
        unattributed = select_unattributed(db, snapshot.taken_at)
    return replace(snapshot, rows=snapshot.rows + unjournaled, unattributed=unattributed)


def select_unattributed(db: EngramDb, now: datetime) -> KeySummary | None:
    """Unacked legacy-lane rows whose project is empty, summarized like an inbox key (None when there are none).
    A row v2/v3 quarantined is never sent again, so it is not counted."""
    summary = KeySummary(key=NO_PROJECT_KEY, hint=NO_PROJECT_HINT)
    oldest_per_entity: list[datetime | None] = []
    unattributed_sql = _UNATTRIBUTED_SQL.format(waiting=waiting_filter(db.schema))
    for entity, count, oldest in db.connection.execute(unattributed_sql):
        summary.entities[str(entity)] = int(count)
        if entity in TELEMETRY_ENTITIES:
            summary.telemetry += int(count)
        else:
            summary.count += int(count)
        oldest_per_entity.append(parse_engram_time(str(oldest)) if oldest is not None else None)
    if not summary.entities:
        return None
    _set_oldest(summary, oldest_per_entity, now)
    return summary


def _set_oldest(summary: KeySummary, moments: Iterable[datetime | None], now: datetime) -> None:
    known = [moment for moment in moments if moment is not None]
    if known:
        summary.oldest = min(known)
        summary.oldest_age_days = max(0.0, (now - summary.oldest).total_seconds() / 86400)


def claim_command(
    key: str, project: str, *, cwd: str | None = None, db: Path | None = None, config: Path | None = None
) -> str:
    parts = ["engram-canary", *(["--config", str(config)] if config is not None else []), "inbox", "claim"]
    parts += ["--project", key]
    if cwd is not None:
        parts += ["--cwd", cwd]
    parts += ["--as", project]
    if db is not None:
        parts += ["--db", str(db)]
    return shlex.join(parts)


def drop_noise_command(key: str, *, db: Path | None = None, config: Path | None = None) -> str:
    parts = ["engram-canary", *(["--config", str(config)] if config is not None else []), "inbox", "drop"]
    parts += ["--project", key, "--noise"]
    if db is not None:
        parts += ["--db", str(db)]
    return shlex.join(parts)


def summarize(
    snapshot: InboxSnapshot, *, db: Path | None = None, config: Path | None = None
) -> list[KeySummary]:
    """One summary per inbox key: real keys by name, `unsorted` last.

    `db` and the config file (which names the alias map) are repeated in the printed claim commands when
    the user named them.
    """
    by_key: dict[str, list[InboxRow]] = {}
    for row in snapshot.rows:
        by_key.setdefault(row.key, []).append(row)
    summaries = [_summarize_key(key, rows, snapshot, db, config) for key, rows in by_key.items()]
    return sorted(summaries, key=lambda summary: (summary.key == UNSORTED, summary.key))


def _summarize_key(
    key: str, rows: Sequence[InboxRow], snapshot: InboxSnapshot, db: Path | None, config: Path | None
) -> KeySummary:
    summary = KeySummary(key=key)
    summary.missing_cwds = sorted({row.cwd for row in rows if row.cwd_missing and row.cwd is not None})
    summary.count = sum(1 for row in rows if not row.is_telemetry)
    summary.telemetry = len(rows) - summary.count
    summary.entities = dict(Counter(row.entity for row in rows))
    _set_oldest(summary, (parse_engram_time(row.occurred_at) for row in rows), snapshot.taken_at)
    if key == UNSORTED:
        summary.cwds = dict(Counter(row.cwd or "(unknown)" for row in rows))
        projects_by_cwd: dict[str, set[str | None]] = {}
        for row in rows:
            if row.cwd is not None and not row.is_telemetry:  # a claim moves memories; telemetry has none
                projects_by_cwd.setdefault(row.cwd, set()).add(row.derivation.project)
        for cwd in sorted(projects_by_cwd):
            projects = projects_by_cwd[cwd]
            if len(projects) == 1:
                (project,) = projects
                if project is not None and project in snapshot.enrolled:
                    summary.cwd_claim_commands[cwd] = claim_command(
                        key, project, cwd=cwd, db=db, config=config
                    )
        return summary
    projects = {row.derivation.project for row in rows}
    if not summary.count:  # telemetry only: a claim would find no memory and fail
        summary.resolved_to = next(iter(projects)) if len(projects) == 1 else None
        summary.drop_command = drop_noise_command(key, db=db, config=config)
        return summary
    if len(projects) == 1:
        (project,) = projects
        summary.resolved_to = project
        if project is not None and project in snapshot.enrolled:
            summary.claim_command = claim_command(key, project, db=db, config=config)
        elif project is not None:
            summary.hint = f"aliased to {project!r}, which is not enrolled: engram cloud enroll {project}"
    return summary


def tripwire_findings(
    db: EngramDb,
    settings: InboxSettings | None = None,
    *,
    aliases: AliasMap | None = None,
    now: datetime | None = None,
) -> list[Finding]:
    """Design §2b: per real key, oldest row older than age_days; unsorted, growth over the window.
    `settings`: the config's `inbox` section (the design's defaults when absent)."""
    if settings is None:
        settings = InboxSettings()
    if not db.schema.has_column("sync_mutations", "project"):
        return []
    if aliases is None:
        aliases, _ = load_aliases(settings.aliases)
    snapshot = read_inbox(db, aliases, now=now)
    return findings_for(snapshot, settings)


@dataclass
class KeyTotals:
    """What the tripwires need of one inbox key; totals of two row ranges add up (the cursor's merge)."""

    count: int = 0
    telemetry: int = 0
    oldest: float | None = None  # epoch seconds, any row
    oldest_memory: float | None = None
    projects: list[str | None] = field(default_factory=list)  # resolved projects, sorted, None first

    def add(self, other: KeyTotals) -> None:
        self.count += other.count
        self.telemetry += other.telemetry
        self.oldest = _earliest(self.oldest, other.oldest)
        self.oldest_memory = _earliest(self.oldest_memory, other.oldest_memory)
        self.projects = _sorted_projects({*self.projects, *other.projects})

    def as_json(self) -> dict[str, Any]:
        # dataclasses.asdict deep-copies field by field: 0.4 s of a check at 10k keys.
        return {
            "count": self.count,
            "telemetry": self.telemetry,
            "oldest": self.oldest,
            "oldest_memory": self.oldest_memory,
            "projects": list(self.projects),
        }


@dataclass
class TripwireInputs:
    """The tripwires' inputs, computed from the rows once; the canary's cursor keeps and extends them."""

    keys: dict[str, KeyTotals] = field(default_factory=dict)
    unsorted_memories: list[tuple[float | None, str]] = field(default_factory=list)  # seq order

    @classmethod
    def from_rows(cls, rows: Iterable[InboxRow]) -> TripwireInputs:
        inputs = cls()
        keys = inputs.keys
        projects: dict[str, set[str | None]] = {}
        epochs: dict[str, float | None] = {}  # rows share their second: one parse per distinct time
        for row in rows:
            derivation = row.derivation
            key = derivation.inbox_key
            totals = keys.get(key)
            if totals is None:
                totals = keys[key] = KeyTotals()
                projects[key] = set()
            occurred_at = row.occurred_at
            if occurred_at in epochs:
                epoch = epochs[occurred_at]
            else:
                moment = parse_engram_time(occurred_at)
                epoch = epochs[occurred_at] = moment.timestamp() if moment is not None else None
            totals.oldest = _earliest(totals.oldest, epoch)
            projects[key].add(derivation.project)
            if row.entity in TELEMETRY_ENTITIES:
                totals.telemetry += 1
                continue
            totals.count += 1
            totals.oldest_memory = _earliest(totals.oldest_memory, epoch)
            if key == UNSORTED:
                inputs.unsorted_memories.append((epoch, row.cwd or "(unknown)"))
        for key, found in projects.items():
            inputs.keys[key].projects = _sorted_projects(found)
        return inputs

    def add(self, later: TripwireInputs) -> None:
        for key, totals in later.keys.items():
            self.keys.setdefault(key, KeyTotals()).add(totals)
        self.unsorted_memories.extend(later.unsorted_memories)


def _earliest(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    if second is None:
        return first
    return min(first, second)


def _sorted_projects(projects: Iterable[str | None]) -> list[str | None]:
    return sorted(projects, key=lambda project: (project is not None, project or ""))


def findings_for(snapshot: InboxSnapshot, settings: InboxSettings) -> list[Finding]:
    return findings_from(
        TripwireInputs.from_rows(snapshot.rows),
        snapshot.enrolled,
        snapshot.unattributed,
        snapshot.taken_at,
        settings,
    )


def findings_from(
    inputs: TripwireInputs,
    enrolled: Collection[str],
    unattributed: KeySummary | None,
    now: datetime,
    settings: InboxSettings,
) -> list[Finding]:
    findings: list[Finding] = []
    # Design §1: telemetry (session and prompt rows) is never inbox debt, so the tripwires age and count
    # memories only; a key holding only telemetry raises nothing.
    for key in sorted(inputs.keys, key=lambda name: (name == UNSORTED, name)):
        totals = inputs.keys[key]
        if key == UNSORTED or totals.oldest_memory is None:
            continue
        age_days = max(0.0, (now.timestamp() - totals.oldest_memory) / 86400)
        if age_days <= settings.age_days:
            continue
        command = None
        if len(totals.projects) == 1 and totals.projects[0] is not None and totals.projects[0] in enrolled:
            command = claim_command(key, totals.projects[0])
        findings.append(
            Finding(
                check="inbox_age",
                severity="warning",
                message=(
                    f"inbox key {key!r} has waited {age_days:.1f} days "
                    f"(> {settings.age_days:g}): {totals.count} memories never delivered "
                    f"(and {totals.telemetry} telemetry rows, not counted); enroll, claim or drop it"
                ),
                target_key=LEGACY_TARGET,
                key=key,
                size=totals.count,
                evidence={
                    "count": totals.count,
                    "telemetry": totals.telemetry,
                    "oldest": utc_iso(datetime.fromtimestamp(totals.oldest, UTC))
                    if totals.oldest is not None
                    else None,
                    "oldest_age_days": round(age_days, 3),
                    "threshold_days": settings.age_days,
                    "claim_command": command,
                },
            )
        )
    if unattributed is not None and unattributed.count:
        findings.append(unattributed_finding(unattributed))
    since = (now - timedelta(days=settings.unsorted_window_days)).timestamp()
    recent = [cwd for epoch, cwd in inputs.unsorted_memories if epoch is not None and epoch >= since]
    if len(recent) > settings.unsorted_growth_rows:
        findings.append(
            Finding(
                check="unsorted_growth",
                severity="warning",
                message=(
                    f"inbox key 'unsorted' grew by {len(recent)} memories in {settings.unsorted_window_days:g} "
                    f"days (> {settings.unsorted_growth_rows}); see engram-canary inbox list"
                ),
                target_key=LEGACY_TARGET,
                key=UNSORTED,
                size=len(recent),
                evidence={
                    "rows": len(recent),
                    "window_days": settings.unsorted_window_days,
                    "threshold_rows": settings.unsorted_growth_rows,
                    "cwds": dict(Counter(recent).most_common(10)),
                },
            )
        )
    return findings


def unattributed_finding(summary: KeySummary) -> Finding:
    return Finding(
        check=UNATTRIBUTED_MUTATIONS,
        severity="warning",
        message=(
            f"{summary.total} unacked rows in the legacy lane have no project ({summary.count} memories, "
            f"{summary.telemetry} telemetry rows): engram's worker sends them and the cloud refuses them "
            "(400), so they never deliver and hold back the lane's later rows; save with --project"
        ),
        target_key=LEGACY_TARGET,
        size=summary.count,
        evidence={
            "count": summary.count,
            "telemetry": summary.telemetry,
            "total": summary.total,
            "entities": dict(sorted(summary.entities.items())),
            "oldest": utc_iso(summary.oldest),
            "oldest_age_days": round(summary.oldest_age_days, 3),
        },
    )


def export_keys(db: EngramDb, resolver: GitRepoResolver | None = None) -> dict[str, Any]:
    """Stage A's answer for every (session directory, session project) of the database, on this machine."""
    require_inbox_schema(db.schema)
    if resolver is None:
        memory = remembered_keys_path(db)
        resolver = GitRepoResolver(read_key_entries(memory) if memory is not None else None)
    entries: list[dict[str, Any]] = []
    with db.read_transaction() as connection:
        pairs = connection.execute(
            "SELECT DISTINCT directory, project FROM sessions ORDER BY directory, project"
        )
        for directory, project in pairs.fetchall():
            cwd = normalize_cwd(str(directory)) if isinstance(directory, str) and directory.strip() else None
            context = resolver.context(True, project, cwd, AliasMap())
            candidate, source = stage_a(context)
            entries.append(
                {
                    "cwd": cwd or "",
                    "project": normalize_project(str(project or "")),
                    "key": candidate,
                    "source": source.value,
                    "cwd_missing": context.cwd_missing,
                }
            )
    return {"schema": KEY_MAP_SCHEMA, "exported_at": utc_iso(datetime.now(UTC)), "entries": entries}
