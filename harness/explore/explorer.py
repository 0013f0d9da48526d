"""The explore loop: histories by seed until the budget is spent; each first violation of an invariant is
shrunk, written as a scenario and replayed with the harness's own runner."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.harness.explore.execute import HistoryOutcome, StepOutcome, new_cloud, play
from engram_sync_kit.harness.explore.invariants import INVARIANTS, Violation, whose
from engram_sync_kit.harness.explore.operations import (
    OPERATION_NAMES,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.explore.scenario_out import scenario_document, scenario_yaml, with_expected_error
from engram_sync_kit.harness.explore.shrink import ddmin
from engram_sync_kit.harness.loader import load_scenario
from engram_sync_kit.harness.runner import run_scenario
from engram_sync_kit.harness.world import CloudHandle, engram_version

SCHEMA = "engram-harness/explore/v1"
SHRINK_SHARE = 0.5  # shrinking may run this share of the budget past it


@dataclass(frozen=True)
class ExploreSettings:
    binary: Path
    seed: int
    budget: float
    out: Path
    nemesis: tuple[str, ...] = ()
    autosync: bool = True
    steps: int = 12
    jobs: int = 4
    replay: int | None = None  # play only this history seed
    shrink: bool = True

    def generator(self) -> GeneratorSettings:
        return GeneratorSettings(autosync=self.autosync, nemesis=self.nemesis, steps=self.steps)


@dataclass
class FoundViolation:
    invariant: str
    owner: str
    detail: str
    seed: int
    steps: int
    kind: str = ""
    minimized_steps: int | None = None
    scenario: str | None = None
    replayed: bool | None = None
    replay_detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ExploreReport:
    seed: int
    engram: str
    budget: float
    histories: int = 0
    steps: int = 0
    violations: list[FoundViolation] = field(default_factory=list)
    operations: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)
    step_seconds: float = 0.0
    check_seconds: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def add_step(self, step: StepOutcome) -> None:
        self.steps += 1
        self.operations[step.operation] += 1
        self.states.update(step.states)
        self.step_seconds += step.seconds
        self.check_seconds += step.check_seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "seed": self.seed,
            "engram": self.engram,
            "budget_seconds": self.budget,
            "seconds": round(self.seconds, 1),
            "histories": self.histories,
            "steps": self.steps,
            "violations": [violation.as_json() for violation in self.violations],
            "coverage": {
                "operations": {name: self.operations.get(name, 0) for name in (*OPERATION_NAMES, "settle")},
                "states": dict(sorted(self.states.items())),
            },
            "timing": {
                "step_seconds": round(self.step_seconds, 2),
                "check_seconds": round(self.check_seconds, 2),
            },
            "errors": self.errors,
        }


Progress = Callable[[ExploreReport, str], None]


def _same(kind: str) -> Callable[[HistoryOutcome], bool]:
    return lambda outcome: any(violation.kind == kind for violation in outcome.violations)


def _minimize(
    settings: ExploreSettings, history: list[GeneratedStep], kind: str, deadline: float
) -> tuple[list[GeneratedStep], HistoryOutcome | None]:
    """The shortest sub-history that still shows a violation of KIND, and how its last replay went."""
    shows = _same(kind)
    outcomes: dict[tuple[int, ...], HistoryOutcome] = {}
    positions = {id(step): position for position, step in enumerate(history)}

    def reproduces(candidate: list[GeneratedStep]) -> bool:
        outcome = play(settings.binary, candidate, autosync=settings.autosync)
        outcomes[tuple(positions[id(step)] for step in candidate)] = outcome
        return shows(outcome)

    # The step after which the violation showed (a sync, the settle) is nearly always needed: shrink the
    # steps before it, so no replay is spent on a candidate that cannot show it.
    last = history[-1]
    prefix = ddmin(
        history[:-1], lambda candidate: reproduces([*candidate, last]), jobs=settings.jobs, deadline=deadline
    )
    minimal = [*prefix, last]
    key = tuple(positions[id(step)] for step in minimal)
    return minimal, outcomes.get(key)


def _scenario_steps(outcome: HistoryOutcome, violation: Violation) -> list[dict[str, Any]]:
    """The played steps up to the violation, failures marked expect_error, then the checker's steps."""
    assert outcome.violation_step is not None
    steps = [
        with_expected_error(step.raw, step.error) if step.status == "failed" else step.raw
        for step in outcome.steps[: outcome.violation_step + 1]
    ]
    return [*steps, *violation.extra_steps]


def write_scenario(
    settings: ExploreSettings, seed: int, outcome: HistoryOutcome, violation: Violation
) -> Path:
    document = scenario_document(
        f"explore {violation.invariant} (seed {seed})",
        _scenario_steps(outcome, violation),
        autosync=settings.autosync,
        description=f"Found by engram-harness explore --replay {seed}: {violation.detail}",
        expectations=violation.expectations,
    )
    settings.out.mkdir(parents=True, exist_ok=True)
    slug = violation.kind.lower().replace("/", "-")
    path = settings.out / f"explore-{slug}-seed{seed}.scenario.yaml"
    header = (
        f"engram-harness explore, seed {seed}: invariant {violation.invariant} violated ({whose(violation.owner)}).\n"
        f"Replay: engram-harness run {path.name}  (exits 1 while the violation holds)"
    )
    path.write_text(scenario_yaml(document, header), encoding="utf-8")
    return path


def replay_scenario(binary: Path, path: Path) -> tuple[bool, str]:
    """Does `engram-harness run PATH` show the violation: every step ran and an expectation failed?"""
    # run keeps a failing scenario's directory for inspection; this replay only needs the verdict.
    with tempfile.TemporaryDirectory(prefix="engram-explore-replay-") as root:
        result = run_scenario(load_scenario(path), binary, root=Path(root))
    if result.status == "error":
        return False, f"the run errored: {result.error}"
    failed_step = result.failed_step
    if failed_step is not None:
        return False, f"step {failed_step.index} failed: {failed_step.error}"
    failed = [e for e in result.expectations if e.status == "fail"]
    if not failed:
        return False, "every expectation held"
    return True, "; ".join(e.detail for e in failed)[:500]


def explore(settings: ExploreSettings, progress: Progress | None = None) -> ExploreReport:
    started = time.monotonic()
    deadline = started + settings.budget
    report = ExploreReport(seed=settings.seed, engram=engram_version(settings.binary), budget=settings.budget)
    shrunk: set[str] = set()
    seeds = [settings.replay] if settings.replay is not None else None
    # One fake cloud for the histories, reset before each (shrinking plays side by side, each with its own).
    cloud_logs = Path(tempfile.mkdtemp(prefix="engram-explore-cloud-"))
    cloud = new_cloud(cloud_logs)
    try:
        _explore_loop(settings, report, progress, cloud, seeds, shrunk, deadline)
    finally:
        with contextlib.suppress(FakeCloudError):
            cloud.close()
        shutil.rmtree(cloud_logs, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report


def _explore_loop(
    settings: ExploreSettings,
    report: ExploreReport,
    progress: Progress | None,
    cloud: CloudHandle,
    seeds: list[int] | None,
    shrunk: set[str],
    deadline: float,
) -> None:
    number = 0
    while True:
        if seeds is not None:
            if number >= len(seeds):
                break
            seed = seeds[number]
        else:
            if time.monotonic() >= deadline:
                break
            seed = settings.seed + number
        number += 1
        history = generate_history(seed, settings.generator())
        if progress is not None:
            progress(report, f"history seed {seed}")

        def step_done(step: StepOutcome, seed: int = seed) -> None:
            report.add_step(step)
            if progress is not None:
                progress(report, f"seed {seed}: {step.operation} {step.status}")

        outcome = play(settings.binary, history, autosync=settings.autosync, on_step=step_done, cloud=cloud)
        report.histories += 1
        if outcome.error:
            report.errors.append(f"seed {seed}: {outcome.error}")
        for violation in outcome.violations:
            found = FoundViolation(
                violation.invariant,
                violation.owner,
                violation.detail,
                seed,
                len(outcome.steps),
                violation.kind,
            )
            report.violations.append(found)
            if not settings.shrink or violation.kind in shrunk:
                continue
            shrunk.add(violation.kind)
            if progress is not None:
                progress(report, f"shrinking {violation.invariant} of seed {seed}")
            played = history[: len(outcome.steps)]
            minimal, minimal_outcome = _minimize(
                settings,
                played,
                violation.kind,
                deadline + settings.budget * SHRINK_SHARE,
            )
            final = minimal_outcome if minimal_outcome is not None else outcome
            shown = next((v for v in final.violations if v.kind == violation.kind), violation)
            found.minimized_steps = len(final.steps)
            try:
                path = write_scenario(settings, seed, final, shown)
            except OSError as error:
                report.errors.append(
                    f"seed {seed}: cannot write the scenario to {settings.out}: {error.strerror}"
                )
                continue
            found.scenario = str(path)
            if progress is not None:
                progress(report, f"replaying {path.name}")
            found.replayed, found.replay_detail = replay_scenario(settings.binary, path)


__all__ = ["INVARIANTS", "ExploreReport", "ExploreSettings", "FoundViolation", "explore"]
