"""pytest plugin of the harness: every *.scenario.yaml is collected as one test item per scenario.

The item's location is the scenario's YAML line, its tags become marks (plus `engram` and `scenario`),
and a failure shows the same report as `engram-harness run`: the failed step, the replayable steps,
expected and actual lane tables, engram's stderr and an excerpt of the cloud journal.
"""

from __future__ import annotations

import io
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console

from harness.engram_install import DEFAULT_VERSION, find_engram
from harness.errors import ScenarioError
from harness.loader import SCENARIO_SUFFIX, Scenario, load_scenario
from harness.report import print_result
from harness.runner import ExpectMode, ScenarioResult, judge, run_scenario
from harness.world import CloudMode


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("engram-harness")
    group.addoption(
        "--scenario-expect",
        choices=("baseline", "design", "all"),
        default="baseline",
        help="Which tagged expectations make a scenario item fail (default: baseline).",
    )
    group.addoption(
        "--scenario-cloud",
        choices=("process", "docker", "inprocess"),
        default="process",
        help="Where each scenario's fake cloud runs (default: process).",
    )
    group.addoption(
        "--scenario-engram", default=None, help="The engram binary (default: ENGRAM_BIN or v1.20.0)."
    )
    group.addoption(
        "--scenario-jobs",
        type=int,
        default=8,
        help="Scenarios played side by side in one pytest process (they mostly wait on engram's 30 s "
        "worker); 1 plays each only when its item runs. Default 8.",
    )


class _Prefetch:
    """All scenario items of this process, started together; each item then waits for its own result."""

    def __init__(self, items: list[ScenarioItem], jobs: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="scenario")
        self.futures: dict[str, Future[ScenarioResult]] = {
            item.nodeid: self.pool.submit(item.play) for item in items
        }


PREFETCH = pytest.StashKey["_Prefetch"]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario: a *.scenario.yaml replayed against the real engram")
    config.addinivalue_line(
        "markers", "xdist_group(name): pytest-xdist --dist loadgroup runs a group together"
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    prefetch = session.config.stash.get(PREFETCH, None)
    if prefetch is not None:
        prefetch.pool.shutdown(wait=True, cancel_futures=True)


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if file_path.name.endswith(SCENARIO_SUFFIX):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFailed(Exception):
    def __init__(self, result: ScenarioResult, mode: ExpectMode) -> None:
        super().__init__(result.scenario.name)
        self.result = result
        self.mode = mode


class InvalidScenario(Exception):
    pass


class ScenarioFile(pytest.File):
    def collect(self) -> list[pytest.Item]:
        try:
            scenario = load_scenario(self.path)
        except ScenarioError as error:
            return [InvalidScenarioItem.from_parent(self, name=self.path.name, message=str(error))]
        item = ScenarioItem.from_parent(self, name=scenario.id, scenario=scenario)
        for tag in scenario.header.tags:
            self.config.addinivalue_line("markers", f"{tag}: scenario tag")
            item.add_marker(getattr(pytest.mark, tag))
        item.add_marker(pytest.mark.scenario)
        item.add_marker(pytest.mark.engram)
        # Under --dist loadgroup every scenario goes to one worker, which plays them side by side.
        item.add_marker(pytest.mark.xdist_group("engram-scenarios"))
        return [item]


class InvalidScenarioItem(pytest.Item):
    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise InvalidScenario(self.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"invalid scenario {self.path.name}"


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario

    def _binary(self) -> Path:
        option = self.config.getoption("--scenario-engram")
        binary = Path(option) if option else find_engram(DEFAULT_VERSION)
        if binary is None:
            reason = f"engram {DEFAULT_VERSION} is not installed (run: engram-harness engram install)"
            if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
                pytest.fail(f"CI=true and {reason}", pytrace=False)
            pytest.skip(reason)
        return binary

    @property
    def mode(self) -> ExpectMode:
        return cast(ExpectMode, self.config.getoption("--scenario-expect"))

    def play(self) -> ScenarioResult:
        return run_scenario(
            self.scenario,
            self._binary(),
            cloud_mode=cast(CloudMode, self.config.getoption("--scenario-cloud")),
            expect=self.mode,
        )

    def _prefetch(self) -> _Prefetch | None:
        jobs = int(self.config.getoption("--scenario-jobs"))
        if jobs <= 1 or getattr(self.config.option, "dist", "no") not in ("no", "loadgroup"):
            return None
        prefetch = self.config.stash.get(PREFETCH, None)
        if prefetch is None:
            self._binary()  # skip or fail once here, before anything starts
            items = [item for item in self.session.items if isinstance(item, ScenarioItem)]
            prefetch = _Prefetch(items, jobs)
            self.config.stash[PREFETCH] = prefetch
        return prefetch

    def runtest(self) -> None:
        prefetch = self._prefetch()
        future = prefetch.futures.get(self.nodeid) if prefetch is not None else None
        result = future.result() if future is not None else self.play()
        if judge(result, self.mode) != "passed":
            raise ScenarioFailed(result, self.mode)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        failure = excinfo.value
        if not isinstance(failure, ScenarioFailed):
            return str(super().repr_failure(excinfo))
        buffer = io.StringIO()
        console = Console(file=buffer, width=140, force_terminal=False, color_system=None, highlight=False)
        print_result(console, failure.result, failure.mode)
        return buffer.getvalue()

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.scenario.line - 1, f"scenario: {self.scenario.name}"
