"""A reproducible messy engram deployment, shaped like the one measured in the design (issue #1013).

The real engram binary creates the file (`engram cloud enroll` runs engram's own migrations and
writes the enrollment rows). Everything after that is a SIMULATION OF LEGACY DATA: three months of
sessions, observations, prompts, relations and their sync journal are written straight into engram's
tables, shaped like engram v1.20's own writes (store.go: enqueueSyncMutationTx, the sync*Payload
structs, refreshProjectSyncStateTx). Same spec and seed, same rows, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

from faker import Faker
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engram_contract import LEGACY_TARGET, TELEMETRY_ENTITIES
from harness.engram_env import EngramEnvironment, meaningful_stderr
from harness.errors import HarnessError

# The design's numbers were measured on 2026-09-05; the generated history ends there unless --now.
REFERENCE_TIME = datetime(2026, 9, 5, 12, 0, 0)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
OBSERVATION_TYPES = ("decision", "architecture", "bugfix", "discovery", "pattern", "config", "learning")
RELATION_VERBS = ("related", "compatible", "scoped", "conflicts_with", "supersedes", "not_conflict")
FORBIDDEN_MESSAGE = "push mutations: http 403: forbidden: project is not allowed"
TEXT_POOL_SIZE = 512
MAX_SCALE = 400.0
_T = TypeVar("_T")
RESERVED_KEYS = ("/", "prueba", "scratchpad", "notes", "documents", "inbox", "unsorted", "workspace", "cloud")


class DeploymentError(HarnessError):
    """The deployment could not be generated."""


class KeyVolume(BaseModel):
    """Rows written under one unenrolled key: every one of them is still unacked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sessions: int = Field(ge=1)
    prompts: int = Field(default=0, ge=0)
    observations: int = Field(default=0, ge=0)

    def scaled(self, scale: float) -> KeyVolume:
        return KeyVolume(
            sessions=max(1, round(self.sessions * scale)),
            prompts=round(self.prompts * scale),
            observations=round(self.observations * scale),
        )

    @property
    def rows(self) -> int:
        return self.sessions + self.prompts + self.observations


class DeploymentSpec(BaseModel):
    """The measured shape (design, 2026-09-05). Volumes multiply with `scaled`; key counts do not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scale: float = Field(default=1.0, gt=0)
    enrolled_projects: int = Field(default=10, ge=1)
    phantom_keys: int = Field(default=35, ge=10)
    history_days: int = Field(default=92, ge=14)
    reference_time: datetime = REFERENCE_TIME

    sessions: int = 4799
    prompts: int = 1188
    designated_sessions: int = 348
    enrolled_observations: int = 1100
    observation_revisions: int = 159
    relations: int = 167
    per_project_rows: int = 135
    seq_gaps: int = 20

    # Stuck telemetry and observations of unenrolled keys: 700 + 180 = 880 telemetry, + 12 = 892.
    stuck_sessions: int = 700
    stuck_prompts: int = 180
    stuck_observations: int = 12
    home: KeyVolume = KeyVolume(sessions=538, prompts=52, observations=2)
    root: KeyVolume = KeyVolume(sessions=21, prompts=9, observations=1)
    scratch: KeyVolume = KeyVolume(sessions=14, prompts=11, observations=2)
    scratchpad: KeyVolume = KeyVolume(sessions=6, prompts=4)
    uuid_dir: KeyVolume = KeyVolume(sessions=9, prompts=7, observations=1)
    folder_variants: tuple[KeyVolume, KeyVolume, KeyVolume] = (
        KeyVolume(sessions=8, prompts=5, observations=1),
        KeyVolume(sessions=5, prompts=3),
        KeyVolume(sessions=2, prompts=1),
    )
    split_dir_first: KeyVolume = KeyVolume(sessions=24, prompts=10, observations=1)
    split_dir_second: KeyVolume = KeyVolume(sessions=1)
    # The project whose pushes were refused with 403: all of its rows acked before the refusal.
    forbidden: KeyVolume = KeyVolume(sessions=12, prompts=3, observations=20)

    @property
    def special_keys(self) -> tuple[KeyVolume, ...]:
        return (
            self.home,
            self.root,
            self.scratch,
            self.scratchpad,
            self.uuid_dir,
            *self.folder_variants,
            self.split_dir_first,
            self.split_dir_second,
        )

    @property
    def generic_keys(self) -> int:
        return self.phantom_keys - len(self.special_keys)

    @property
    def enrolled_sessions(self) -> int:
        return self.sessions - self.designated_sessions - self.stuck_sessions - self.forbidden.sessions

    @property
    def enrolled_prompts(self) -> int:
        return self.prompts - self.stuck_prompts - self.forbidden.prompts

    @property
    def stuck_rows(self) -> int:
        return self.stuck_sessions + self.stuck_prompts + self.stuck_observations

    @property
    def mutation_rows(self) -> int:
        observation_rows = (
            self.enrolled_observations
            + self.observation_revisions
            + self.stuck_observations
            + self.forbidden.observations
        )
        return self.sessions + self.prompts + observation_rows + self.relations + self.per_project_rows

    @model_validator(mode="after")
    def _volumes_fit(self) -> Self:
        special = self.special_keys
        checks = (
            ("stuck_sessions", self.stuck_sessions, sum(k.sessions for k in special) + self.generic_keys),
            ("stuck_prompts", self.stuck_prompts, sum(k.prompts for k in special)),
            ("stuck_observations", self.stuck_observations, sum(k.observations for k in special)),
            ("sessions", self.enrolled_sessions, self.enrolled_projects),
            ("prompts", self.enrolled_prompts, 0),
            ("enrolled_observations", self.enrolled_observations, 2),
        )
        for name, value, minimum in checks:
            if value < minimum:
                raise ValueError(f"{name} leaves {value} rows where at least {minimum} are needed")
        if self.relations > self.enrolled_observations // 2:
            raise ValueError("relations must be at most half of enrolled_observations")
        if self.per_project_rows > self.enrolled_observations:
            raise ValueError("per_project_rows must be at most enrolled_observations")
        return self

    def scaled(self, scale: float) -> DeploymentSpec:
        """Every volume times `scale`; the numbers of keys and targets stay those measured."""
        if scale <= 0:
            raise DeploymentError(f"--scale {scale}: must be a positive number (1 = the measured shape)")
        if self.scale * scale > MAX_SCALE:
            raise DeploymentError(
                f"--scale {scale}: at most {MAX_SCALE:g} (about 3M mutation rows; memory grows ~1.5 GB per million)"
            )

        def times(value: int, minimum: int = 0) -> int:
            return max(minimum, round(value * scale))

        home, root, scratch, scratchpad, uuid_dir, v1, v2, v3, first, second = (
            volume.scaled(scale) for volume in self.special_keys
        )
        special = (home, root, scratch, scratchpad, uuid_dir, v1, v2, v3, first, second)
        stuck_sessions = max(times(self.stuck_sessions), sum(k.sessions for k in special) + self.generic_keys)
        stuck_prompts = max(times(self.stuck_prompts), sum(k.prompts for k in special))
        stuck_observations = max(times(self.stuck_observations), sum(k.observations for k in special))
        forbidden = self.forbidden.scaled(scale)
        designated = times(self.designated_sessions, 1)
        enrolled_observations = times(self.enrolled_observations, 2)
        sessions = max(
            times(self.sessions),
            designated + stuck_sessions + forbidden.sessions + self.enrolled_projects,
        )
        # Validated again (model_copy would not): a scaled spec must still fit together.
        return DeploymentSpec.model_validate(
            self.model_dump()
            | {
                "scale": self.scale * scale,
                "sessions": sessions,
                "prompts": max(times(self.prompts), stuck_prompts + forbidden.prompts),
                "designated_sessions": designated,
                "enrolled_observations": enrolled_observations,
                "observation_revisions": times(self.observation_revisions),
                "relations": min(times(self.relations), enrolled_observations // 2),
                "per_project_rows": min(times(self.per_project_rows), enrolled_observations),
                "seq_gaps": times(self.seq_gaps),
                "stuck_sessions": stuck_sessions,
                "stuck_prompts": stuck_prompts,
                "stuck_observations": stuck_observations,
                "home": home,
                "root": root,
                "scratch": scratch,
                "scratchpad": scratchpad,
                "uuid_dir": uuid_dir,
                "folder_variants": (v1, v2, v3),
                "split_dir_first": first,
                "split_dir_second": second,
                "forbidden": forbidden,
            }
        )


class DeploymentSummary(BaseModel):
    """What was generated, by name and by count; `digest` (when asked for) proves determinism."""

    path: str
    seed: int
    scale: float
    reference_time: str
    engram_binary: str
    enrolled_projects: list[str]
    designated_project: str
    designated_directory: str
    home_key: str
    phantom_keys: list[str]
    forbidden_key: str
    sessions: int
    prompts: int
    observations: int
    relations: int
    mutation_rows: int
    max_seq: int
    stuck_rows: int
    stuck_telemetry: int
    per_project_rows: int
    home_sessions: int
    designated_sessions: int
    seconds: float
    digest: str | None

    @property
    def foreign_targets(self) -> list[str]:
        """The sync targets outside the closed target space: the 35 phantoms, then the 403 one."""
        return [f"cloud:{key}" for key in [*self.phantom_keys, self.forbidden_key]]


def to_text(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_DAYS: dict[int, str] = {}
_CLOCK = tuple(f" {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" for s in range(86400))


def go_json(value: dict[str, Any]) -> str:
    """json.Marshal's bytes: compact, struct field order, <>& escaped as Go does."""
    return go_escape(_ENCODER.encode(value))


def go_escape(encoded: str) -> str:
    if "<" in encoded or ">" in encoded or "&" in encoded:
        encoded = encoded.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return encoded


_quote = json.encoder.encode_basestring


@dataclass(frozen=True)
class KeyPlan:
    """One unenrolled key: the directory it was derived from, and its volume."""

    key: str
    directory: str
    volume: KeyVolume
    window: tuple[int, int]


@dataclass
class Session:
    id: str
    project: str
    directory: str
    started: int


@dataclass
class Observation:
    sync_id: str
    session: Session
    type: str
    title: str
    content: str
    tool_name: str | None
    topic_key: str | None
    created: int
    updated: int
    revisions: int = 1

    def payload(self) -> str:
        """syncObservationPayload of the observation's current state."""
        body: dict[str, Any] = {
            "sync_id": self.sync_id,
            "session_id": self.session.id,
            "type": self.type,
            "title": self.title,
            "content": self.content,
        }
        if self.tool_name is not None:
            body["tool_name"] = self.tool_name
        body["project"] = self.session.project
        body["scope"] = "project"
        if self.topic_key is not None:
            body["topic_key"] = self.topic_key
        body["revision_count"] = self.revisions
        body["duplicate_count"] = 1
        body["created_at"] = stamp(self.created)
        body["updated_at"] = stamp(self.updated)
        return go_json(body)


@dataclass
class Journal:
    """Mutation events before they get their seq: (time, order, target, entity, key, op, payload, project, acked)."""

    events: list[tuple[int, int, str, str, str, str, str, str, bool]] = field(default_factory=list)

    def add(
        self, when: int, target: str, entity: str, key: str, op: str, payload: str, project: str, acked: bool
    ) -> None:
        self.events.append((when, len(self.events), target, entity, key, op, payload, project, acked))


def stamp(epoch: int) -> str:
    """engram's TEXT time ('YYYY-MM-DD HH:MM:SS', UTC); day and clock tables keep a million rows cheap."""
    day, second = divmod(epoch, 86400)
    text = _DAYS.get(day)
    if text is None:
        text = _DAYS[day] = time.strftime("%Y-%m-%d", time.gmtime(day * 86400))
    return text + _CLOCK[second]


def epoch_of(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp())


class _Names:
    """Faker-made, seed-determined names and texts; a pool keeps a million rows fast."""

    def __init__(self, seed: int, rng: random.Random) -> None:
        self.fake = Faker("en_US")
        self.fake.seed_instance(seed)
        self.rng = rng
        self.used: set[str] = set(RESERVED_KEYS)
        self.titles = [self.fake.sentence(nb_words=6).rstrip(".") for _ in range(TEXT_POOL_SIZE)]
        self.contents = [self.fake.paragraph(nb_sentences=3) for _ in range(TEXT_POOL_SIZE * 4)]
        self.prompts = [self.fake.sentence(nb_words=12) for _ in range(TEXT_POOL_SIZE)]
        self.reasons = [self.fake.sentence(nb_words=8) for _ in range(TEXT_POOL_SIZE // 4)]

    def unique(self, make: Any) -> str:
        for _ in range(1000):
            name = str(make())
            if name not in self.used:
                self.used.add(name)
                return name
        raise DeploymentError("faker ran out of distinct names; use another --seed")

    def repo(self) -> str:
        return self.unique(lambda: f"{self.fake.word()}-{self.fake.word()}".lower())

    def user(self) -> str:
        return self.unique(lambda: "".join(c for c in self.fake.user_name().lower() if c.isalnum()) or "user")

    def uuid(self) -> str:
        """A random (version 4) UUID drawn from the seeded rng."""
        bits = (self.rng.getrandbits(128) & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC000 << 48) | (
            0x8000 << 48
        )
        text = f"{bits:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    def hex_id(self, prefix: str) -> str:
        return f"{prefix}-{self.rng.getrandbits(64):016x}"

    def title(self) -> str:
        return _pick(self.rng, self.titles)

    def content(self) -> str:
        return _pick(self.rng, self.contents)


def _pick(rng: random.Random, items: Sequence[_T]) -> _T:
    """rng.choice without its per-call overhead (a million rows call it several million times)."""
    return items[int(rng.random() * len(items))]


def _split(total: int, parts: int, rng: random.Random, minimum: int = 0) -> list[int]:
    """`total` spread over `parts` buckets, each at least `minimum`, deterministic for the rng."""
    counts = [minimum] * parts
    for _ in range(total - minimum * parts):
        counts[rng.randrange(parts)] += 1
    return counts


class _Builder:
    def __init__(self, spec: DeploymentSpec, seed: int, workspace: Path | None = None) -> None:
        self.spec = spec
        self.rng = random.Random(seed)
        self.names = _Names(seed, self.rng)
        self.end = epoch_of(spec.reference_time)
        self.start = self.end - spec.history_days * 86400
        self.journal = Journal()
        self.sessions: list[Session] = []
        self.observations: list[tuple[Observation, bool]] = []
        self.prompts: list[tuple[int, str, Session, str, int]] = []
        self.relations: list[tuple[Any, ...]] = []
        self.user = self.names.user()
        # With a workspace, the home dir lives under it so its repositories can exist on disk.
        self.home_dir = f"{workspace.resolve() if workspace else ''}/home/{self.user}"
        self.enrolled = [self.names.repo() for _ in range(spec.enrolled_projects)]
        self.designated_project = self.enrolled[0]
        self.designated_directory = f"{self.home_dir}/agents/workspace"
        self.forbidden_key = self.names.repo()
        self.forbidden_at = self.start + 20 * 86400
        self.plans = self._plan_unenrolled()

    @property
    def repositories(self) -> list[str]:
        """Every git repository the sessions worked in: enrolled, unenrolled, and the 403 one."""
        generic = self.plans[len(self.spec.special_keys) :]
        return [*self.enrolled, *(plan.key for plan in generic), self.forbidden_key]

    def _moment(self, window: tuple[int, int]) -> int:
        return window[0] + int(self.rng.random() * (window[1] - window[0] + 1))

    def _plan_unenrolled(self) -> list[KeyPlan]:
        spec, home = self.spec, self.home_dir
        whole = (self.start, self.end - 3600)
        july = (self.start + 30 * 86400, self.start + 55 * 86400)
        august = (self.start + 75 * 86400, self.end - 86400)
        uuid_name = self.names.uuid()
        # One folder, three spellings: engram lowercases the key, so only the separators survive in it.
        spellings = ("LM-Studio-Models", "LM_Studio_Models", "LM Studio Models")
        plans = [
            KeyPlan(self.user, home, spec.home, whole),
            KeyPlan("/", "/", spec.root, whole),
            KeyPlan("prueba", "/tmp/prueba", spec.scratch, whole),
            KeyPlan("scratchpad", "/tmp/scratchpad", spec.scratchpad, whole),
            KeyPlan(uuid_name, f"{home}/apps/{uuid_name}", spec.uuid_dir, whole),
            *(
                KeyPlan(spelling.lower(), f"{home}/models/{spelling}", volume, whole)
                for spelling, volume in zip(spellings, spec.folder_variants, strict=True)
            ),
            # One non-repo working dir, two keys at two times (context-dependent resolution).
            KeyPlan("notes", f"{home}/Documents/notes", spec.split_dir_first, july),
            KeyPlan("documents", f"{home}/Documents/notes", spec.split_dir_second, august),
        ]
        special_sessions = sum(plan.volume.sessions for plan in plans)
        special_prompts = sum(plan.volume.prompts for plan in plans)
        special_observations = sum(plan.volume.observations for plan in plans)
        generic = spec.generic_keys
        sessions = _split(spec.stuck_sessions - special_sessions, generic, self.rng, minimum=1)
        prompts = _split(spec.stuck_prompts - special_prompts, generic, self.rng)
        observations = _split(spec.stuck_observations - special_observations, generic, self.rng)
        for index in range(generic):
            key = self.names.repo()
            volume = KeyVolume(
                sessions=sessions[index], prompts=prompts[index], observations=observations[index]
            )
            plans.append(KeyPlan(key, f"{home}/code/{key}", volume, whole))
        return plans

    def _session(self, project: str, directory: str, window: tuple[int, int], *, acked: bool) -> Session:
        session = Session(self.names.uuid(), project, directory, self._moment(window))
        self.sessions.append(session)
        # syncSessionPayload, spelled out: the hottest path at a million rows.
        payload = go_escape(
            f'{{"id":{_quote(session.id)},"project":{_quote(project)},"directory":{_quote(directory)},'
            f'"started_at":"{stamp(session.started)}"}}'
        )
        self.journal.add(
            session.started, LEGACY_TARGET, "session", session.id, "upsert", payload, project, acked
        )
        return session

    def _later(self, moment: int, limit: int) -> int:
        return min(limit, moment + 30 + int(self.rng.random() * 4 * 3600))

    def _prompt(self, session: Session, *, acked: bool, limit: int) -> None:
        created = self._later(session.started, limit)
        sync_id = self.names.hex_id("prompt")
        content = _pick(self.rng, self.names.prompts)
        self.prompts.append((created, sync_id, session, content, 0))
        payload = go_escape(
            f'{{"sync_id":"{sync_id}","session_id":{_quote(session.id)},"content":{_quote(content)},'
            f'"project":{_quote(session.project)},"created_at":"{stamp(created)}"}}'
        )
        self.journal.add(created, LEGACY_TARGET, "prompt", sync_id, "upsert", payload, session.project, acked)

    def _observation(self, session: Session, *, acked: bool, limit: int) -> Observation:
        created = self._later(session.started, limit)
        passive = self.rng.random() < 0.2
        observation = Observation(
            sync_id=self.names.hex_id("obs"),
            session=session,
            type=_pick(self.rng, OBSERVATION_TYPES),
            title=self.names.title(),
            content=self.names.content(),
            tool_name=_pick(self.rng, ("Edit", "Bash", "Write")) if passive else None,
            topic_key=None,
            created=created,
            updated=created,
        )
        self.observations.append((observation, acked))
        self.journal.add(
            created,
            LEGACY_TARGET,
            "observation",
            observation.sync_id,
            "upsert",
            observation.payload(),
            session.project,
            acked,
        )
        return observation

    def build(self) -> None:
        spec = self.spec
        whole = (self.start, self.end - 3600)
        for plan in self.plans:
            own = [
                self._session(plan.key, plan.directory, plan.window, acked=False)
                for _ in range(plan.volume.sessions)
            ]
            for _ in range(plan.volume.prompts):
                self._prompt(_pick(self.rng, own), acked=False, limit=self.end)
            for _ in range(plan.volume.observations):
                self._observation(_pick(self.rng, own), acked=False, limit=self.end)

        early = (self.start, self.forbidden_at - 3600)
        forbidden_dir = f"{self.home_dir}/code/{self.forbidden_key}"
        forbidden = [
            self._session(self.forbidden_key, forbidden_dir, early, acked=True)
            for _ in range(spec.forbidden.sessions)
        ]
        for _ in range(spec.forbidden.prompts):
            self._prompt(_pick(self.rng, forbidden), acked=True, limit=self.forbidden_at - 60)
        for _ in range(spec.forbidden.observations):
            self._observation(_pick(self.rng, forbidden), acked=True, limit=self.forbidden_at - 60)

        weights = [1.0 / (rank + 1) for rank in range(len(self.enrolled))]
        enrolled_sessions: list[Session] = [
            self._session(project, f"{self.home_dir}/code/{project}", whole, acked=True)
            for project in self.enrolled
        ]
        for project in self.rng.choices(
            self.enrolled, weights, k=spec.enrolled_sessions - len(self.enrolled)
        ):
            enrolled_sessions.append(
                self._session(project, f"{self.home_dir}/code/{project}", whole, acked=True)
            )
        enrolled_sessions += [
            self._session(self.designated_project, self.designated_directory, whole, acked=True)
            for _ in range(spec.designated_sessions)
        ]
        for _ in range(spec.enrolled_prompts):
            self._prompt(_pick(self.rng, enrolled_sessions), acked=True, limit=self.end)
        enrolled_observations = [
            self._observation(_pick(self.rng, enrolled_sessions), acked=True, limit=self.end)
            for _ in range(spec.enrolled_observations)
        ]
        self._revise(enrolled_observations)
        self._relate(enrolled_observations)
        self._per_project_lane(enrolled_observations)

    def _revise(self, observations: list[Observation]) -> None:
        for observation in self.rng.choices(observations, k=self.spec.observation_revisions):
            if observation.topic_key is None:
                slug = "-".join(observation.title.lower().split()[:4])
                observation.topic_key = f"{observation.type}/{slug}"
            observation.revisions += 1
            observation.updated = self._later(observation.updated, self.end)
            observation.content = self.names.content()
            self.journal.add(
                observation.updated,
                LEGACY_TARGET,
                "observation",
                observation.sync_id,
                "upsert",
                observation.payload(),
                observation.session.project,
                True,
            )

    def _relate(self, observations: list[Observation]) -> None:
        by_project: dict[str, list[Observation]] = {}
        for observation in observations:
            by_project.setdefault(observation.session.project, []).append(observation)
        pairable = [group for group in by_project.values() if len(group) >= 2]
        for _ in range(self.spec.relations):
            source, target = self.rng.sample(_pick(self.rng, pairable), 2)
            created = self._later(max(source.updated, target.updated), self.end)
            sync_id = self.names.hex_id("rel")
            verb = _pick(self.rng, RELATION_VERBS)
            reason = _pick(self.rng, self.names.reasons)
            confidence = round(self.rng.uniform(0.55, 0.98), 2)
            self.relations.append(
                (
                    sync_id,
                    source.sync_id,
                    target.sync_id,
                    verb,
                    reason,
                    confidence,
                    source.session.id,
                    created,
                )
            )
            payload = go_json(
                {
                    "sync_id": sync_id,
                    "source_id": source.sync_id,
                    "target_id": target.sync_id,
                    "relation": verb,
                    "reason": reason,
                    "confidence": confidence,
                    "judgment_status": "judged",
                    "marked_by_actor": "engram",
                    "marked_by_kind": "system",
                    "session_id": source.session.id,
                    "project": source.session.project,
                    "created_at": stamp(created),
                    "updated_at": stamp(created),
                }
            )
            self.journal.add(
                created, LEGACY_TARGET, "relation", sync_id, "upsert", payload, source.session.project, True
            )

    def _per_project_lane(self, observations: list[Observation]) -> None:
        # Problem 6: rows on cloud:<enrolled> that nothing ever delivers. The writer is unknown on
        # v1.20 (it does not bump sync_state), so the target's cursor ignores them.
        for observation in self.rng.sample(observations, self.spec.per_project_rows):
            when = self._later(observation.updated, self.end)
            project = observation.session.project
            self.journal.add(
                when,
                f"{LEGACY_TARGET}:{project}",
                "observation",
                observation.sync_id,
                "upsert",
                observation.payload(),
                project,
                False,
            )


@dataclass(frozen=True)
class _Rows:
    mutations: list[tuple[int, str, str, str, str, str, str, str, str | None, str]]
    states: list[tuple[Any, ...]]


def _sequence(builder: _Builder) -> _Rows:
    """Seqs follow time, with the measured permanent gaps; acks and sync_state follow engram's rules."""
    spec = builder.spec
    events = sorted(builder.journal.events)
    total = len(events)
    gaps = set(builder.rng.sample(range(1, total), min(spec.seq_gaps, max(0, total - 1))))
    rows: list[tuple[int, str, str, str, str, str, str, str, str | None, str]] = []
    seq = 0
    legacy_enqueued = legacy_acked = 0
    per_project: dict[str, list[int]] = {}  # project -> [max seq, max acked seq, pending, last time]
    random_number = builder.rng.random
    for index, (when, _order, target, entity, key, op, payload, project, acked) in enumerate(events):
        seq += 2 if index in gaps else 1
        acked_at = stamp(min(builder.end, when + 2 + int(random_number() * 39))) if acked else None
        rows.append((seq, target, entity, key, op, payload, "local", stamp(when), acked_at, project))
        if target != LEGACY_TARGET:
            continue
        legacy_enqueued = seq
        if acked:
            legacy_acked = seq
        state = per_project.setdefault(project, [0, 0, 0, 0])
        state[0] = seq
        state[3] = when
        if acked:
            state[1] = seq
        else:
            state[2] += 1

    end = stamp(builder.end)
    blank: tuple[None, None, None, None] = (None, None, None, None)
    states: list[tuple[Any, ...]] = []
    for project in [*builder.enrolled, *(plan.key for plan in builder.plans)]:
        max_seq, max_acked, pending, last = per_project[project]
        lifecycle = "pending" if pending else "healthy"
        states.append(
            (f"cloud:{project}", lifecycle, max_seq, max_acked, 0, 0, *blank, stamp(last), None, None)
        )
    max_seq, max_acked, _pending, _last = per_project[builder.forbidden_key]
    states.append(
        (
            f"cloud:{builder.forbidden_key}",
            "degraded",
            max_seq,
            max_acked,
            0,
            0,
            None,
            None,
            None,
            FORBIDDEN_MESSAGE,
            stamp(builder.forbidden_at),
            "policy_forbidden",
            FORBIDDEN_MESSAGE,
        )
    )
    legacy = ("cloud", "pending", legacy_enqueued, legacy_acked, 0, 0, *blank, end, None, None)
    return _Rows(mutations=rows, states=[legacy, *states])


def _materialize(builder: _Builder) -> None:
    """Create the deployment's home dir on disk: a real git repository per repo, plain dirs for the rest."""
    git = shutil.which("git")
    if git is None:
        raise DeploymentError("--workspace needs git on PATH to create the deployment's repositories")
    directories = {
        session.directory for session in builder.sessions if session.directory.startswith(builder.home_dir)
    }
    repositories = {f"{builder.home_dir}/code/{name}" for name in builder.repositories}
    for directory in sorted(directories | repositories):
        Path(directory).mkdir(parents=True, exist_ok=True)
    for repository in sorted(repositories):
        result = subprocess.run(
            [git, "init", "-q", repository], capture_output=True, text=True, check=False, timeout=60
        )
        if result.returncode != 0:
            raise DeploymentError(f"git init {repository} failed: {result.stderr.strip()}")


def _enroll(engram_binary: Path, workdir: Path, projects: Sequence[str]) -> Path:
    world = EngramEnvironment(binary=engram_binary, root=workdir).prepare()
    for project in projects:
        result = world.run(["cloud", "enroll", project])
        if result.returncode != 0:
            detail = meaningful_stderr(result.stderr) or result.stdout.strip()
            raise DeploymentError(f"engram cloud enroll {project} failed ({result.returncode}): {detail}")
    if not world.db_path.is_file():
        raise DeploymentError(f"{engram_binary} did not create {world.db_path}")
    return world.db_path


def _fill(db_path: Path, builder: _Builder, rows: _Rows) -> None:
    connection = sqlite3.connect(db_path, isolation_level=None)
    try:
        # Tuning for this private file only: nobody else has it open until it is moved into place.
        for pragma in (
            "journal_mode = OFF",
            "synchronous = OFF",
            "locking_mode = EXCLUSIVE",
            "temp_store = MEMORY",
            "cache_size = -262144",
        ):
            connection.execute(f"PRAGMA {pragma}")
        connection.execute("BEGIN")
        # engram's FTS triggers, set aside for the bulk insert: one FTS5 'rebuild' indexes the same rows
        # several times faster. They are recreated from engram's own SQL text, in engram's order.
        triggers = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
            " AND tbl_name IN ('observations', 'user_prompts') ORDER BY rowid"
        ).fetchall()
        for name, _sql in triggers:
            connection.execute(f'DROP TRIGGER "{name}"')
        _insert_all(connection, builder, rows)
        for fts in ("observations_fts", "prompts_fts"):
            connection.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
        for _name, sql in triggers:
            connection.execute(sql)
        connection.execute("COMMIT")
        connection.execute("PRAGMA locking_mode = NORMAL")
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()


def _insert_all(connection: sqlite3.Connection, builder: _Builder, rows: _Rows) -> None:
    window_start = builder.start
    connection.executemany(
        "UPDATE sync_enrolled_projects SET enrolled_at = ? WHERE project = ?",
        [
            (stamp(window_start - (len(builder.enrolled) - i) * 3600), p)
            for i, p in enumerate(builder.enrolled)
        ],
    )
    connection.execute("DELETE FROM sync_state")
    connection.executemany("INSERT INTO sync_state VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows.states)
    connection.executemany(
        "INSERT INTO sessions (id, project, directory, started_at) VALUES (?,?,?,?)",
        sorted((s.id, s.project, s.directory, stamp(s.started)) for s in builder.sessions),
    )
    observations = sorted(builder.observations, key=lambda item: (item[0].created, item[0].sync_id))
    connection.executemany(
        "INSERT INTO observations (id, sync_id, session_id, type, title, content, tool_name, project, scope,"
        " topic_key, normalized_hash, revision_count, duplicate_count, created_at, updated_at)"
        " VALUES (?,?,?,?,?,?,?,?,'project',?,?,?,1,?,?)",
        (
            (
                number,
                o.sync_id,
                o.session.id,
                o.type,
                o.title,
                o.content,
                o.tool_name,
                o.session.project,
                o.topic_key,
                hashlib.sha256(" ".join(o.content.lower().split()).encode()).hexdigest(),
                o.revisions,
                stamp(o.created),
                stamp(o.updated),
            )
            for number, (o, _acked) in enumerate(observations, start=1)
        ),
    )
    prompts = sorted(builder.prompts, key=lambda item: (item[0], item[1]))
    connection.executemany(
        "INSERT INTO user_prompts (id, sync_id, session_id, content, project, created_at) VALUES (?,?,?,?,?,?)",
        (
            (number, sync_id, session.id, content, session.project, stamp(created))
            for number, (created, sync_id, session, content, _) in enumerate(prompts, start=1)
        ),
    )
    connection.executemany(
        "INSERT INTO memory_relations (id, sync_id, source_id, target_id, relation, reason, confidence,"
        " judgment_status, marked_by_actor, marked_by_kind, session_id, created_at, updated_at)"
        " VALUES (?,?,?,?,?,?,?,'judged','engram','system',?,?,?)",
        (
            (number, sync_id, source, target, verb, reason, confidence, session_id, stamp(at), stamp(at))
            for number, (sync_id, source, target, verb, reason, confidence, session_id, at) in enumerate(
                sorted(builder.relations, key=lambda item: (item[7], item[0])), start=1
            )
        ),
    )
    connection.executemany(
        "INSERT INTO sync_mutations (seq, target_key, entity, entity_key, op, payload, source, occurred_at,"
        " acked_at, project) VALUES (?,?,?,?,?,?,?,?,?,?)",
        rows.mutations,
    )


def canonical_digest(db_path: Path) -> str:
    """sha256 over every row of every engram table (FTS indexes excluded: they derive from the rows)."""
    digest = hashlib.sha256()
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%' ORDER BY name"
            )
        ]
        for table in tables:
            digest.update(f"\x00table {table}\x00".encode())
            quoted = '"' + table.replace('"', '""') + '"'
            for row in connection.execute(f"SELECT * FROM {quoted} ORDER BY 1, 2"):
                digest.update(repr(row).encode())
    finally:
        connection.close()
    return digest.hexdigest()


def generate(
    spec: DeploymentSpec,
    seed: int,
    out: Path,
    engram_binary: Path,
    *,
    with_digest: bool = False,
    workspace: Path | None = None,
) -> DeploymentSummary:
    """Create `out` with the real engram, fill it with the simulated legacy history, move it into place.

    `with_digest` adds the canonical sha256 of every row (about 9 s per million mutation rows).
    `workspace` puts the home dir under that directory and creates it: every repository the sessions
    worked in (enrolled, unenrolled, the 403 one) becomes a real git repository, so git-root derivation
    (engram's and the design's) sees what the measured machine saw. Rows then depend on its path.
    """
    began = time.perf_counter()
    out = out.expanduser()
    if out.exists():
        raise DeploymentError(f"{out}: already exists; remove it or choose another --out")
    if not out.parent.is_dir():
        raise DeploymentError(f"{out.parent}: no such directory for --out")
    if not engram_binary.is_file():
        raise DeploymentError(f"{engram_binary}: no engram binary there (see: engram-harness engram path)")
    engram_binary = engram_binary.resolve()
    if workspace is not None:
        if not workspace.is_dir():
            raise DeploymentError(f"{workspace}: no such directory for --workspace")
        enclosing = next(
            (p for p in (workspace.resolve(), *workspace.resolve().parents) if (p / ".git").exists()), None
        )
        if enclosing is not None:
            raise DeploymentError(
                f"{workspace}: inside the git repository {enclosing}; --workspace must be outside any repository"
            )
    builder = _Builder(spec, seed, workspace)
    builder.build()
    if workspace is not None:
        _materialize(builder)
    rows = _sequence(builder)
    try:
        workdir = Path(tempfile.mkdtemp(prefix=".make-deployment-", dir=out.parent))
    except OSError as error:
        raise DeploymentError(
            f"{out.parent}: cannot create the deployment there ({error.strerror})"
        ) from error
    try:
        db_path = _enroll(engram_binary, workdir, builder.enrolled)
        _fill(db_path, builder, rows)
        for leftover in ("-wal", "-shm"):
            if Path(f"{db_path}{leftover}").exists():
                raise DeploymentError(f"{db_path}{leftover} was left behind; the file is not complete")
        digest = canonical_digest(db_path) if with_digest else None
        os.replace(db_path, out)
    except sqlite3.Error as error:
        raise DeploymentError(f"{out}: could not fill the engram database ({error})") from error
    except OSError as error:
        raise DeploymentError(f"{out}: could not write the deployment ({error.strerror})") from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    stuck = [row for row in rows.mutations if row[8] is None and row[1] == LEGACY_TARGET]
    return DeploymentSummary(
        path=str(out),
        seed=seed,
        scale=spec.scale,
        reference_time=to_text(spec.reference_time),
        engram_binary=str(engram_binary),
        enrolled_projects=list(builder.enrolled),
        designated_project=builder.designated_project,
        designated_directory=builder.designated_directory,
        home_key=builder.user,
        phantom_keys=[plan.key for plan in builder.plans],
        forbidden_key=builder.forbidden_key,
        sessions=len(builder.sessions),
        prompts=len(builder.prompts),
        observations=len(builder.observations),
        relations=len(builder.relations),
        mutation_rows=len(rows.mutations),
        max_seq=rows.mutations[-1][0] if rows.mutations else 0,
        stuck_rows=len(stuck),
        stuck_telemetry=sum(1 for row in stuck if row[2] in TELEMETRY_ENTITIES),
        per_project_rows=sum(1 for row in rows.mutations if row[1] != LEGACY_TARGET),
        home_sessions=spec.home.sessions,
        designated_sessions=spec.designated_sessions,
        seconds=round(time.perf_counter() - began, 3),
        digest=digest,
    )
