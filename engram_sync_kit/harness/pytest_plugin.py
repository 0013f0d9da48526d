"""pytest plugin of the harness: every *.scenario.yaml is collected as one test item per scenario.

The item's location is the scenario's YAML line, its tags become marks (plus `engram` and `scenario`),
and a failure shows the same report as `engram-harness run`: the failed step, the replayable steps,
expected and actual lane tables, engram's stderr and an excerpt of the cloud journal.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import re
import shlex
import signal
import threading
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest
from rich.console import Console

from engram_sync_kit.engram_contract import children
from engram_sync_kit.harness.cloud.image import ensure_image
from engram_sync_kit.harness.cloud.launch import CloudMode
from engram_sync_kit.harness.design.conformance import design_outcomes
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, cache_root, cached_binary
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import SCENARIO_SUFFIX, Scenario, load_scenario
from engram_sync_kit.harness.scenario.report import RunProblem, print_result, write_junit
from engram_sync_kit.harness.scenario.results import ExpectMode, ScenarioResult, unjudged_reason
from engram_sync_kit.harness.scenario.runner import run_scenario
from engram_sync_kit.harness.world import VERSION_PATTERN, reported_engram_version


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
        type=_cloud_modes,
        default=("process",),
        help="Where each scenario's fake cloud runs: process, docker or inprocess (default: process). "
        "Several, comma-separated, play the library once per mode side by side; the items of every mode "
        "after the first are named scenario[mode] and must reach the first mode's baseline results.",
    )
    group.addoption(
        "--scenario-engram",
        default=None,
        help="The engram binary under test (default: ENGRAM_BIN). With none, collected scenarios fail the "
        "run; a release `engram-harness engram install` cached is used only with --scenario-engram-installed.",
    )
    group.addoption(
        "--scenario-engram-installed",
        action="store_true",
        help=f"With no --scenario-engram or ENGRAM_BIN: play against the {DEFAULT_VERSION} release that "
        "`engram-harness engram install` built into its cache (never the build under test).",
    )
    group.addoption(
        "--scenario-engram-version-as",
        default=None,
        metavar="VERSION",
        help="Judge the expectations' `engram:` ranges as if the binary were VERSION: for a build whose own "
        "version says nothing (an untagged `go build` reports 0.0.0-<date>-<hash>).",
    )
    group.addoption(
        "--scenario-allow-unjudged",
        action="store_true",
        help="Let a scenario pass although none of its expectations applied to this engram (default: it "
        "fails, so the gate never passes having judged nothing).",
    )
    group.addoption(
        "--scenario-skip-without-engram",
        action="store_true",
        help="Skip the scenarios, instead of failing the run, when no engram binary is found.",
    )
    group.addoption(
        "--scenario-keep",
        default=None,
        metavar="DIR",
        help="Keep every scenario's directory (evidence/, logs/), passed or not, in DIR (created if missing). "
        "Without it a failing scenario's directory is kept in the system's temporary directory.",
    )
    group.addoption(
        "--scenario-junit",
        default=None,
        metavar="FILE",
        help="Also write the harness's own JUnit XML (as `engram-harness run --junit`): the scenarios, then "
        "one testsuite per design section and engram version.",
    )
    group.addoption(
        "--scenario-jobs",
        type=int,
        default=8,
        help="Scenarios played side by side in one pytest process (they mostly wait on engram's 30 s "
        "worker); 1 plays each only when its item runs. Default 8.",
    )


CLOUD_MODES = ("process", "docker", "inprocess")
#: the plugin's options that take a value as the next token (`--scenario-engram PATH`)
VALUE_OPTIONS = (
    "--scenario-expect",
    "--scenario-cloud",
    "--scenario-engram",
    "--scenario-engram-version-as",
    "--scenario-jobs",
    "--scenario-keep",
    "--scenario-junit",
)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """Refuse a two-token option value that pytest may have taken for a test path.

    pytest picks its rootdir and config file before it loads plugins, so in `--scenario-engram
    /x/bin/engram` it sees the value as a test path, and a config file above it (another project's
    pyproject.toml) can win over the consumer's own. pytest offers no public way to choose again, so a
    value naming an existing path outside the invocation directory must be written with `=`.
    """
    original = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *early_config.invocation_params.args]
    here = early_config.invocation_params.dir.resolve()
    for index, token in enumerate(original[:-1]):
        value = original[index + 1]
        if token in VALUE_OPTIONS and _path_outside(value, here):
            raise pytest.UsageError(
                f"{token} {value}: a path outside {here} can make pytest read another project's "
                f"configuration; write {token}={value}"
            )


def _path_outside(value: str, here: Path) -> bool:
    if value.startswith("-"):
        return False
    try:
        path = (here / value).resolve()
        return path.exists() and not path.is_relative_to(here)
    except (OSError, ValueError, RuntimeError):
        return False


def _cloud_modes(text: str) -> tuple[CloudMode, ...]:
    modes = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [mode for mode in modes if mode not in CLOUD_MODES]
    if not modes or unknown or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct modes out of {', '.join(CLOUD_MODES)}")
    return cast(tuple[CloudMode, ...], modes)


class _Prefetch:
    """All scenario items of this process, started together; each item then waits for its own result.

    The pool runs `jobs` items per cloud mode. The docker image is resolved once, in the pool, while the
    other modes' items already play; the docker items wait for it, and report its one-line error when
    there is no image to be had.
    """

    def __init__(self, items: list[ScenarioItem], jobs: int) -> None:
        modes = {item.cloud_mode for item in items}
        self.pool = ThreadPoolExecutor(max_workers=jobs * len(modes) + 1, thread_name_prefix="scenario")
        self.image: Future[str] | None = self.pool.submit(ensure_image) if "docker" in modes else None
        self.futures: dict[str, Future[ScenarioResult]] = {
            item.nodeid: self.pool.submit(self._play, item) for item in items
        }

    def _play(self, item: ScenarioItem) -> ScenarioResult:
        if item.cloud_mode == "docker" and self.image is not None:
            self.image.result()
        return item.play()

    def image_error(self) -> str:
        """Why no docker image could be had ("" when there is one); waits for the answer."""
        error = self.image.exception() if self.image is not None else None
        return str(error) if error is not None else ""


PREFETCH = pytest.StashKey["_Prefetch"]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scenario: a *.scenario.yaml replayed against the real engram")
    config.addinivalue_line("markers", "engram: needs the real engram binary")
    config.addinivalue_line("markers", "docker: needs a Docker engine")
    config.stash[INI_MARKERS] = _marker_names(config)
    config.addinivalue_line(
        "markers", "xdist_group(name): pytest-xdist --dist loadgroup runs a group together"
    )
    _stop_children_on_signals()


def _stop_children_on_signals() -> None:
    """A SIGTERM (a CI cancel, `timeout`) or Ctrl-C stops every engram and fake cloud the session started
    (they run in sessions of their own), then pytest tears down as on a Ctrl-C, at once instead of after
    the worker's ticks."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        children.stop_children()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)


@dataclass(frozen=True)
class EngramUnderTest:
    """The binary the scenarios play against, how it was named, and its version."""

    path: Path
    source: str
    reported_version: str
    #: --scenario-engram-version-as, when given: the version the `engram:` ranges are judged against
    version_as: str | None

    @property
    def version(self) -> str:
        return self.version_as or self.reported_version

    def describe(self) -> str:
        named = f", judged as {self.version_as} (--scenario-engram-version-as)" if self.version_as else ""
        reported = self.reported_version or "no version"
        return f"engram {self.path} (reports {reported}{named}; from {self.source})"


def engram_binary(config: pytest.Config) -> tuple[Path, str] | None:
    """--scenario-engram, else ENGRAM_BIN, else (only when asked) the cached release; a named one must be
    executable. Never the cache by default: a gate that forgot ENGRAM_BIN must not test an old release."""
    option = config.getoption("--scenario-engram")
    if option:
        binary = Path(option).expanduser()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise pytest.UsageError(f"--scenario-engram {option}: not an executable file")
        return binary.absolute(), "--scenario-engram"
    override = os.environ.get("ENGRAM_BIN")
    if override:
        binary = Path(override)
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise pytest.UsageError(f"ENGRAM_BIN={override}: not an executable file")
        return binary.absolute(), "ENGRAM_BIN"
    if config.getoption("--scenario-engram-installed"):
        cached = cached_binary(DEFAULT_VERSION)
        if not (cached.is_file() and os.access(cached, os.X_OK)):
            raise pytest.UsageError(
                f"--scenario-engram-installed: no {DEFAULT_VERSION} at {cached}; run "
                f"`engram-harness engram install {DEFAULT_VERSION}` first"
            )
        return cached, f"--scenario-engram-installed, the cache {cache_root()}"
    return None


def _engram_under_test(config: pytest.Config, found: tuple[Path, str]) -> EngramUnderTest:
    version_as = config.getoption("--scenario-engram-version-as")
    if version_as is not None:
        version_as = version_as.removeprefix("v")
        if VERSION_PATTERN.fullmatch(version_as) is None:
            raise pytest.UsageError(
                f"--scenario-engram-version-as {version_as}: not a release version; give MAJOR.MINOR.PATCH, "
                "e.g. 1.20.0"
            )
    path, source = found
    return EngramUnderTest(path, source, reported_engram_version(path), version_as)


UNJUDGED_HINT = (
    "name the version under test with --scenario-engram-version-as VERSION, or pass --scenario-allow-unjudged"
)
MISSING_ENGRAM = (
    "no engram binary for {count} scenario(s): give --scenario-engram=PATH or set ENGRAM_BIN=PATH (the "
    "build under test); --scenario-engram-installed plays the release `engram-harness engram install` "
    "built; --scenario-skip-without-engram skips them instead"
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: after -m/-k deselection, so only scenarios that would run count.
    scenarios = [item for item in items if isinstance(item, ScenarioItem)]
    if not scenarios:
        return
    _flag_tag_typos(config, scenarios)
    found = engram_binary(config)
    if found is None and not config.option.collectonly:  # --collect-only plays nothing
        if not config.getoption("--scenario-skip-without-engram"):
            # A gate that skipped every scenario would be green having tested nothing; a JUnit reader
            # must see red too, so the refusal is also reported as a collection error.
            message = MISSING_ENGRAM.format(count=len(scenarios))
            config.stash[RUN_PROBLEMS] = [RunProblem("engram", message)]
            config.hook.pytest_collectreport(
                report=pytest.CollectReport("engram-harness", "failed", message, [])
            )
            raise pytest.UsageError(message)
        skip = pytest.mark.skip(reason="no engram binary (--scenario-skip-without-engram)")
        for item in scenarios:
            if not item.typo:  # a misspelt tag is wrong with or without engram
                item.add_marker(skip)
    engram = _engram_under_test(config, found) if found is not None else None
    config.stash[BINARY] = engram
    if engram is not None:
        for item in scenarios:
            item.user_properties += [("engram", str(engram.path)), ("engram version", engram.version)]
            if engram.version_as:
                item.user_properties.append(("engram reported version", engram.reported_version))


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Under pytest-xdist the workers collect, so the controller says here which binary they play (its
    version is each scenario's JUnit property `engram version`)."""
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        return []
    try:
        found = engram_binary(config)
    except pytest.UsageError:  # reported again, as the session's error, once the workers collect
        return []
    return [f"engram-harness: engram {found[0]} (from {found[1]})"] if found is not None else []


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """The binary under test and its version, in pytest's header (after "collected N items")."""
    engram = config.stash.get(BINARY, None)
    return [f"engram-harness: {engram.describe()}"] if engram is not None else []


BINARY = pytest.StashKey["EngramUnderTest | None"]()
RUN_PROBLEMS = pytest.StashKey[list[RunProblem]]()


def _flag_tag_typos(config: pytest.Config, items: list[ScenarioItem]) -> None:
    """Under --strict-markers, a tag that no markers line declares and that is a near miss of a declared
    marker or of a tag more scenarios use is refused as a typo. Other tags declare themselves."""
    if not (config.option.strict_markers or config.option.strict):
        return
    declared = config.stash[INI_MARKERS]
    uses = Counter(tag for item in items for tag in set(item.scenario.header.tags))
    for item in items:
        for tag in item.scenario.header.tags:
            if tag in declared:
                continue
            likelier = sorted(
                other
                for other in declared | {other for other, count in uses.items() if count > uses[tag]}
                if _DIGITS.sub("0", other) != _DIGITS.sub("0", tag)  # engram-264 is no typo of engram-299
            )
            near = [other for other in likelier if _looks_like(tag, other)]
            near = near or difflib.get_close_matches(tag, likelier, n=1, cutoff=0.8)
            if near:
                item.typo = (
                    f"{item.path}:{item.scenario.line}: tag {tag!r}: did you mean {near[0]!r}? "
                    f"(a new tag declares itself unless it is this close to a known one: "
                    f"then add it to the markers option)"
                )
                break


def _looks_like(tag: str, other: str) -> bool:
    """Another case (`Gate`) or two neighbouring letters swapped (`gaet`): misses that difflib's ratio
    scores too low on a short tag."""
    if tag.casefold() == other.casefold():
        return True
    if len(tag) != len(other):
        return False
    differ = [index for index, (a, b) in enumerate(zip(tag, other, strict=True)) if a != b]
    return (
        len(differ) == 2
        and differ[1] == differ[0] + 1
        and tag[differ[0]] == other[differ[1]]
        and tag[differ[1]] == other[differ[0]]
    )


INI_MARKERS = pytest.StashKey[set[str]]()
_DIGITS = re.compile(r"[0-9]+")


def _marker_names(config: pytest.Config) -> set[str]:
    return {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}


def pytest_sessionfinish(session: pytest.Session) -> None:
    prefetch = session.config.stash.get(PREFETCH, None)
    if prefetch is not None:
        prefetch.pool.shutdown(wait=True, cancel_futures=True)
    target = session.config.getoption("--scenario-junit")
    results = session.config.stash.get(RESULTS, [])
    problems = session.config.stash.get(RUN_PROBLEMS, [])
    if target and (results or problems):
        path = session.config.invocation_params.dir / target
        worker = getattr(session.config, "workerinput", {}).get("workerid")
        if worker:  # pytest-xdist: one file per worker process
            path = path.with_name(f"{path.stem}-{worker}{path.suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        allow_unjudged = session.config.getoption("--scenario-allow-unjudged")
        write_junit(
            path,
            results,
            cast(ExpectMode, session.config.getoption("--scenario-expect")),
            problems=problems,
            unjudged_hint="" if allow_unjudged else UNJUDGED_HINT,
        )


RESULTS = pytest.StashKey[list[ScenarioResult]]()


def _design_properties(result: ScenarioResult) -> list[tuple[str, str]]:
    """("design §2a", "fail: ...") per design expectation: pytest's --junitxml shows them as properties."""
    return [
        (
            f"design {section}",
            outcome.status if outcome.status == "pass" else f"{outcome.status}: {outcome.detail}",
        )
        for section, outcome in design_outcomes(result)
    ]


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


class ScenarioDiffers(Exception):
    """The same scenario reached other results with another cloud mode."""


def reference_mode(item: ScenarioItem) -> str:
    modes: tuple[CloudMode, ...] = item.config.getoption("--scenario-cloud")
    return modes[0]


def _differences(reference: ScenarioResult, result: ScenarioResult, mode: ExpectMode) -> list[str]:
    """Selected expectations whose outcome differs: 'line 16 baseline lanes: pass there, fail here'."""
    theirs = {(e.index, e.line, e.tag, e.kind): e.status for e in reference.selected(mode)}
    ours = {(e.index, e.line, e.tag, e.kind): e.status for e in result.selected(mode)}
    differences = []
    for key in sorted(theirs.keys() | ours.keys()):
        if theirs.get(key) != ours.get(key):
            _index, line, tag, kind = key
            differences.append(
                f"line {line} {tag} {kind}: {theirs.get(key, 'absent')} there, {ours.get(key, 'absent')} here"
            )
    return differences


class ScenarioFile(pytest.File):
    def collect(self) -> list[pytest.Item]:
        try:
            scenario = load_scenario(self.path)
        except ScenarioError as error:
            return [InvalidScenarioItem.from_parent(self, name=self.path.name, message=str(error))]
        modes: tuple[CloudMode, ...] = self.config.getoption("--scenario-cloud")
        # A scenario's tags declare themselves as markers (--strict-markers then refuses only a misspelt
        # mark elsewhere, or a tag that is a near miss of a known one: see _flag_tag_typos).
        declared = _marker_names(self.config)
        for tag in scenario.header.tags:
            if tag not in declared:
                self.config.addinivalue_line("markers", f"{tag}: scenario tag")
        tag_marks = [getattr(pytest.mark, tag) for tag in scenario.header.tags]
        items: list[pytest.Item] = []
        for index, cloud_mode in enumerate(modes):
            name = scenario.id if index == 0 else f"{scenario.id}[{cloud_mode}]"
            item = ScenarioItem.from_parent(self, name=name, scenario=scenario, cloud_mode=cloud_mode)
            if index > 0:
                item.reference = scenario.id
            for mark in tag_marks:
                item.add_marker(mark)
            item.add_marker(pytest.mark.scenario)
            item.add_marker(pytest.mark.engram)
            if cloud_mode == "docker":
                item.add_marker(pytest.mark.docker)
            # Under --dist loadgroup every scenario goes to one worker, which plays them side by side.
            item.add_marker(pytest.mark.xdist_group("engram-scenarios"))
            items.append(item)
        return items


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
    def __init__(self, *, scenario: Scenario, cloud_mode: CloudMode = "process", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.cloud_mode = cloud_mode
        #: set when a tag looks like a misspelling of a known marker (under --strict-markers)
        self.typo = ""
        #: the name of the same scenario's item in the first --scenario-cloud mode, whose results this
        #: item's must match (None for the first mode itself)
        self.reference: str | None = None

    def _engram(self) -> EngramUnderTest:
        engram = self.config.stash.get(BINARY, None)
        if engram is None:  # collection failed or skipped the run when there is none
            raise InvalidScenario(MISSING_ENGRAM.format(count=1))
        return engram

    @property
    def mode(self) -> ExpectMode:
        return cast(ExpectMode, self.config.getoption("--scenario-expect"))

    def play(self) -> ScenarioResult:
        engram = self._engram()
        return run_scenario(
            self.scenario,
            engram.path,
            cloud_mode=self.cloud_mode,
            expect=self.mode,
            keep_dir=self._keep_dir(),
            version_as=engram.version_as,
        )

    def _keep_dir(self) -> Path | None:
        option = self.config.getoption("--scenario-keep")
        return (self.config.invocation_params.dir / Path(option).expanduser()) if option else None

    def _prefetch(self) -> _Prefetch | None:
        jobs = int(self.config.getoption("--scenario-jobs"))
        if jobs <= 1 or getattr(self.config.option, "dist", "no") not in ("no", "loadgroup"):
            return None
        prefetch = self.config.stash.get(PREFETCH, None)
        if prefetch is None:
            items = [item for item in self.session.items if isinstance(item, ScenarioItem) and not item.typo]
            prefetch = _Prefetch(items, jobs)
            self.config.stash[PREFETCH] = prefetch
        return prefetch

    def runtest(self) -> None:
        if self.typo:
            raise InvalidScenario(self.typo)
        prefetch = self._prefetch()
        image_error = prefetch.image_error() if prefetch is not None and self.cloud_mode == "docker" else ""
        if image_error:
            reason = f"the fake cloud image is not available: {image_error}"
            if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
                pytest.fail(f"CI=true and {reason}", pytrace=False)
            pytest.skip(reason)
        future = prefetch.futures.get(self.nodeid) if prefetch is not None else None
        result = future.result() if future is not None else self.play()
        self.config.stash.setdefault(RESULTS, []).append(result)
        for section, outcome in _design_properties(result):
            self.user_properties.append((section, outcome))
        if result.verdict(self.mode) != "passed":
            raise ScenarioFailed(result, self.mode)
        unjudged = unjudged_reason(result, self.mode)
        if unjudged and not self.config.getoption("--scenario-allow-unjudged"):
            raise InvalidScenario(f"nothing judged on engram {result.version}: {unjudged}; {UNJUDGED_HINT}")
        reference = self._reference_result(prefetch)
        if reference is not None:
            differences = _differences(reference, result, self.mode)
            if differences:
                raise ScenarioDiffers(
                    f"{self.name}: {self.mode} results differ from the {reference_mode(self)} cloud's: "
                    + "; ".join(differences)
                )

    def _reference_result(self, prefetch: _Prefetch | None) -> ScenarioResult | None:
        if self.reference is None or prefetch is None:
            return None
        nodeid = self.nodeid[: -len(self.name)] + self.reference
        future = prefetch.futures.get(nodeid)
        return future.result() if future is not None else None

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        failure = excinfo.value
        if isinstance(failure, ScenarioDiffers | InvalidScenario):
            return str(failure)
        if not isinstance(failure, ScenarioFailed):
            return str(super().repr_failure(excinfo))
        buffer = io.StringIO()
        console = Console(file=buffer, width=140, force_terminal=False, color_system=None, highlight=False)
        print_result(console, failure.result, failure.mode)
        return buffer.getvalue()

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.scenario.line - 1, f"scenario: {self.scenario.name}"
