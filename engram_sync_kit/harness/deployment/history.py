"""Three months of engram use, drawn from the spec and the seed: sessions, prompts, observations,
revisions, relations, and the journal of sync mutations engram v1.20 would have enqueued for them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from engram_sync_kit.canary.targets import project_target
from engram_sync_kit.engram_contract import LEGACY_TARGET, go_escape, go_json
from engram_sync_kit.harness.deployment.naming import Names, pick, split
from engram_sync_kit.harness.deployment.records import (
    Journal,
    Observation,
    Prompt,
    Relation,
    Session,
    epoch_of,
    quote,
    stamp,
)
from engram_sync_kit.harness.deployment.spec import DeploymentSpec, KeyVolume

OBSERVATION_TYPES = ("decision", "architecture", "bugfix", "discovery", "pattern", "config", "learning")
RELATION_VERBS = ("related", "compatible", "scoped", "conflicts_with", "supersedes", "not_conflict")


@dataclass(frozen=True)
class KeyPlan:
    """One unenrolled key: the directory it was derived from, and its volume."""

    key: str
    directory: str
    volume: KeyVolume
    window: tuple[int, int]


class History:
    def __init__(self, spec: DeploymentSpec, seed: int, workspace: Path | None = None) -> None:
        self.spec = spec
        self.rng = random.Random(seed)
        self.names = Names(seed, self.rng)
        self.end = epoch_of(spec.reference_time)
        self.start = self.end - spec.history_days * 86400
        self.journal = Journal()
        self.sessions: list[Session] = []
        self.observations: list[tuple[Observation, bool]] = []
        self.prompts: list[Prompt] = []
        self.relations: list[Relation] = []
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
        sessions = split(spec.stuck_sessions - special_sessions, generic, self.rng, minimum=1)
        prompts = split(spec.stuck_prompts - special_prompts, generic, self.rng)
        observations = split(spec.stuck_observations - special_observations, generic, self.rng)
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
            f'{{"id":{quote(session.id)},"project":{quote(project)},"directory":{quote(directory)},'
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
        content = pick(self.rng, self.names.prompts)
        self.prompts.append(Prompt(created, sync_id, session, content))
        payload = go_escape(
            f'{{"sync_id":"{sync_id}","session_id":{quote(session.id)},"content":{quote(content)},'
            f'"project":{quote(session.project)},"created_at":"{stamp(created)}"}}'
        )
        self.journal.add(created, LEGACY_TARGET, "prompt", sync_id, "upsert", payload, session.project, acked)

    def _observation(self, session: Session, *, acked: bool, limit: int) -> Observation:
        created = self._later(session.started, limit)
        passive = self.rng.random() < 0.2
        observation = Observation(
            sync_id=self.names.hex_id("obs"),
            session=session,
            type=pick(self.rng, OBSERVATION_TYPES),
            title=self.names.title(),
            content=self.names.content(),
            tool_name=pick(self.rng, ("Edit", "Bash", "Write")) if passive else None,
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
                self._prompt(pick(self.rng, own), acked=False, limit=self.end)
            for _ in range(plan.volume.observations):
                self._observation(pick(self.rng, own), acked=False, limit=self.end)

        early = (self.start, self.forbidden_at - 3600)
        forbidden_dir = f"{self.home_dir}/code/{self.forbidden_key}"
        forbidden = [
            self._session(self.forbidden_key, forbidden_dir, early, acked=True)
            for _ in range(spec.forbidden.sessions)
        ]
        for _ in range(spec.forbidden.prompts):
            self._prompt(pick(self.rng, forbidden), acked=True, limit=self.forbidden_at - 60)
        for _ in range(spec.forbidden.observations):
            self._observation(pick(self.rng, forbidden), acked=True, limit=self.forbidden_at - 60)

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
            self._prompt(pick(self.rng, enrolled_sessions), acked=True, limit=self.end)
        enrolled_observations = [
            self._observation(pick(self.rng, enrolled_sessions), acked=True, limit=self.end)
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
            source, target = self.rng.sample(pick(self.rng, pairable), 2)
            created = self._later(max(source.updated, target.updated), self.end)
            sync_id = self.names.hex_id("rel")
            verb = pick(self.rng, RELATION_VERBS)
            reason = pick(self.rng, self.names.reasons)
            confidence = round(self.rng.uniform(0.55, 0.98), 2)
            self.relations.append(
                Relation(
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
                },
                sort_keys=False,
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
                project_target(project),
                "observation",
                observation.sync_id,
                "upsert",
                observation.payload(),
                project,
                False,
            )
