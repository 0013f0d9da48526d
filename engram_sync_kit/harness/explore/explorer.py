"""The explore loop: histories by seed until the budget is spent; each first violation of an invariant is
shrunk, written as a scenario and replayed with the harness's own runner."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.engram_contract.upstream_bugs import issue_name
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.harness.explore.execute import HistoryOutcome, StepOutcome, new_cloud, play
from engram_sync_kit.harness.explore.invariants import INVARIANTS, Violation, whose
from engram_sync_kit.harness.explore.operations import (
    OPERATION_NAMES,
    QUIESCENCE,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.explore.scenario_out import scenario_document, scenario_yaml, with_expected_error
from engram_sync_kit.harness.explore.shrink import ddmin, drop_groups
from engram_sync_kit.harness.scenario.loader import load_scenario
from engram_sync_kit.harness.scenario.runner import run_scenario
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
    parallel: int = 1  # histories played side by side, each on a world and a fake cloud of its own
    machines: int = 1  # engram homes per history (2: machine B syncs through the same cloud, I6)
    replay: int | None = None  # play only this history seed
    shrink: bool = True

    def generator(self) -> GeneratorSettings:
        return GeneratorSettings(
            autosync=self.autosync, nemesis=self.nemesis, steps=self.steps, machines=self.machines
        )


@dataclass
class FoundViolation:
    invariant: str
    owner: str
    detail: str
    seed: int
    steps: int
    kind: str = ""
    upstream: str = ""  # "engram#742": the filed engram issue whose class this is, "" when none fits
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
                "operations": {
                    name: self.operations.get(name, 0)
                    for name in (*OPERATION_NAMES, "settle", *sorted(QUIESCENCE))
                },
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
    # steps before it, so no replay is spent on a candidate that cannot show it. A two-machine history's
    # quiescence stays whole: a candidate less one of its pushes or pulls never quiesced, and its I6
    # would be the shrink's own.
    cut = len(history) - 1
    if history[cut].operation in QUIESCENCE:
        while cut > 0 and history[cut - 1].operation in QUIESCENCE:
            cut -= 1
    tail = history[cut:]

    def with_last(candidate: list[GeneratedStep]) -> bool:
        return reproduces([*candidate, *tail])

    fewer = drop_groups(
        history[:cut], lambda step: step.operation, with_last, jobs=settings.jobs, deadline=deadline
    )
    prefix = ddmin(fewer, with_last, jobs=settings.jobs, deadline=deadline)
    minimal = [*prefix, *tail]
    key = tuple(positions[id(step)] for step in minimal)
    return minimal, outcomes.get(key)


def _scenario_steps(outcome: HistoryOutcome, violation: Violation) -> list[dict[str, Any]]:
    """The played steps up to the violation, failures marked expect_error, then the checker's steps."""
    assert outcome.violation_step is not None
    steps = [
        with_expected_error(step.raw, step.error, step.inner) if step.status == "failed" else step.raw
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
    known = "" if violation.upstream is None else f"; the class of {issue_name(violation.upstream)}"
    header = (
        f"engram-harness explore, seed {seed}: invariant {violation.invariant} violated "
        f"({whose(violation.owner)}{known}).\n"
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


class _Seeds:
    """The history seeds, handed out one at a time to the players: the replayed seed once, or seed,
    seed+1, ... until the budget is spent."""

    def __init__(self, settings: ExploreSettings, deadline: float) -> None:
        self._settings = settings
        self._deadline = deadline
        self._taken = 0
        self._lock = threading.Lock()

    def take(self) -> int | None:
        with self._lock:
            if self._settings.replay is not None:
                seed = self._settings.replay if self._taken == 0 else None
            elif time.monotonic() >= self._deadline:
                seed = None
            else:
                seed = self._settings.seed + self._taken
            self._taken += 1
            return seed


def explore(settings: ExploreSettings, progress: Progress | None = None) -> ExploreReport:
    """Histories by seed until the budget is spent, `settings.parallel` of them side by side (each with
    its own fake cloud, reset before each history; shrinking plays its candidates on clouds of their own)."""
    started = time.monotonic()
    deadline = started + settings.budget
    report = ExploreReport(seed=settings.seed, engram=engram_version(settings.binary), budget=settings.budget)
    run = _Run(settings, report, progress, _Seeds(settings, deadline), deadline)
    logs = Path(tempfile.mkdtemp(prefix="engram-explore-cloud-"))
    # A replay plays one history: more players would each start a fake cloud and take no seed.
    width = 1 if settings.replay is not None else settings.parallel
    try:
        with ThreadPoolExecutor(max_workers=width) as pool:
            players = [pool.submit(run.player, logs / f"player-{number}") for number in range(width)]
            for player in players:
                player.result()
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    report.violations.sort(key=lambda found: found.seed)  # side by side, they are found in any order
    report.seconds = time.monotonic() - started
    return report


@dataclass
class _Run:
    settings: ExploreSettings
    report: ExploreReport
    progress: Progress | None
    seeds: _Seeds
    deadline: float
    shrunk: set[str] = field(default_factory=set)  # the violation kinds already taken for shrinking
    lock: threading.Lock = field(default_factory=threading.Lock)  # guards report and shrunk

    def tell(self, what: str) -> None:
        if self.progress is not None:
            self.progress(self.report, what)

    def player(self, logs: Path) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        cloud = new_cloud(logs)
        try:
            while (seed := self.seeds.take()) is not None:
                self.history(cloud, seed)
        finally:
            with contextlib.suppress(FakeCloudError):
                cloud.close()

    def history(self, cloud: CloudHandle, seed: int) -> None:
        settings = self.settings
        history = generate_history(seed, settings.generator())
        self.tell(f"history seed {seed}")

        def step_done(step: StepOutcome) -> None:
            with self.lock:
                self.report.add_step(step)
            self.tell(f"seed {seed}: {step.operation} {step.status}")

        outcome = play(settings.binary, history, autosync=settings.autosync, on_step=step_done, cloud=cloud)
        with self.lock:
            self.report.histories += 1
            if outcome.error:
                self.report.errors.append(f"seed {seed}: {outcome.error}")
        for violation in outcome.violations:
            found = FoundViolation(
                violation.invariant,
                violation.owner,
                violation.detail,
                seed,
                len(outcome.steps),
                violation.kind,
                issue_name(violation.upstream) if violation.upstream is not None else "",
            )
            with self.lock:
                self.report.violations.append(found)
                first_of_kind = violation.kind not in self.shrunk
                self.shrunk.add(violation.kind)
            if settings.shrink and first_of_kind:
                self.shrink(found, history[: len(outcome.steps)], outcome)

    def shrink(self, found: FoundViolation, played: list[GeneratedStep], outcome: HistoryOutcome) -> None:
        settings, seed = self.settings, found.seed
        self.tell(f"shrinking {found.invariant} of seed {seed}")
        minimal, minimal_outcome = _minimize(
            settings, played, found.kind, self.deadline + settings.budget * SHRINK_SHARE
        )
        final = minimal_outcome if minimal_outcome is not None else outcome
        shown = next(v for v in (*final.violations, *outcome.violations) if v.kind == found.kind)
        found.minimized_steps = len(final.steps)
        try:
            path = write_scenario(settings, seed, final, shown)
        except OSError as error:
            with self.lock:
                self.report.errors.append(
                    f"seed {seed}: cannot write the scenario to {settings.out}: {error.strerror}"
                )
            return
        found.scenario = str(path)
        self.tell(f"replaying {path.name}")
        found.replayed, found.replay_detail = replay_scenario(settings.binary, path)


__all__ = ["INVARIANTS", "ExploreReport", "ExploreSettings", "FoundViolation", "explore"]
