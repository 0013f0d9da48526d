"""What to generate: the measured shape (design, 2026-09-05) as a validated spec, and the summary."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engram_sync_kit.canary.targets import project_target
from engram_sync_kit.harness.errors import HarnessError

# The design's numbers were measured on 2026-09-05; the generated history ends there unless --now.
REFERENCE_TIME = datetime(2026, 9, 5, 12, 0, 0)
MAX_SCALE = 400.0


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
        return [project_target(key) for key in [*self.phantom_keys, self.forbidden_key]]
