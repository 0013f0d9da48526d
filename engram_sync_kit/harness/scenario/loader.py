"""Load scenario YAML into typed models; every error says file:line, what is wrong and what is allowed."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from engram_sync_kit.engram_contract.yaml_source import (
    MAX_YAML_BYTES,
    Loc,
    YamlSource,
    YamlSyntaxError,
    load_yaml,
)
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.schema import (
    CHECK_KEYS,
    EXPECTATION_MODELS,
    ONE_CHECK,
    STEP_MODELS,
    TOP_LEVEL_KEYS,
    DeviceStep,
    ExpectationBase,
    ExpectationFields,
    Header,
    ObserveStep,
    RepeatStep,
    expectation_kinds,
)

SCENARIO_SUFFIX = ".scenario.yaml"
# The steps one scenario may hold, nested ones counted (the largest shipped scenario has 40): a file of
# 50,000 steps took a minute to load.
MAX_SCENARIO_STEPS = 1_000


@dataclass(frozen=True)
class Step:
    name: str
    body: BaseModel
    line: int
    raw: Any
    children: tuple[Step, ...] = ()

    def describe(self) -> str:
        """One replayable line: the step as written in the YAML."""
        return yaml.safe_dump({self.name: self.raw}, default_flow_style=True, width=10_000).strip()


@dataclass(frozen=True)
class ExpectationAt:
    expectation: ExpectationBase
    line: int
    index: int


@dataclass(frozen=True)
class Scenario:
    path: Path
    line: int
    header: Header
    steps: tuple[Step, ...]
    expectations: tuple[ExpectationAt, ...]
    source: str = field(repr=False, default="")

    @property
    def name(self) -> str:
        return self.header.name

    @property
    def id(self) -> str:
        return self.path.name.removesuffix(SCENARIO_SUFFIX)


class _Located:
    def __init__(self, path: Path, source: YamlSource) -> None:
        self.path = path
        self.line = source.line
        self.errors: list[str] = []

    def add(self, loc: Loc, message: str) -> None:
        where = ".".join(str(part) for part in loc) or "(top level)"
        self.errors.append(f"{self.path}:{self.line(loc)}: {where}: {message}")

    def validate(self, model: type[BaseModel], data: Any, loc: Loc) -> BaseModel | None:
        try:
            return model.model_validate(data)
        except ValidationError as error:
            for item in error.errors(include_url=False):
                self.add(loc + tuple(item["loc"]), _explain(model, tuple(item["loc"]), item))
            return None


def _unwrap(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [inner for arg in typing.get_args(annotation) for inner in _unwrap(arg)]
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    return [annotation]


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        candidates = [c for c in _unwrap(current) if isinstance(c, type) and issubclass(c, BaseModel)]
        containers = [c for c in _unwrap(current) if typing.get_origin(c) in (list, dict)]
        if candidates:
            fields = {(info.alias or name): info for name, info in candidates[0].model_fields.items()}
            if part not in fields:
                return None
            current = fields[part].annotation
        elif containers:
            args = typing.get_args(containers[0])
            current = args[-1]
        else:
            return None
    found = [c for c in _unwrap(current) if isinstance(c, type) and issubclass(c, BaseModel)]
    return found[0] if found else None


def allowed_keys(model: type[BaseModel]) -> list[str]:
    if issubclass(model, ExpectationFields):
        return list(model.shown_keys)  # any check may follow the common fields
    return [info.alias or name for name, info in model.model_fields.items()]


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """' (did you mean 'save'?)' when one choice is a near miss of name, else ''."""
    near = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.75)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _explain(model: type[BaseModel], loc: Loc, item: Any) -> str:
    kind = item["type"]
    message = str(item["msg"]).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        keys = allowed_keys(parent) if parent else []
        allowed = f"; allowed: {', '.join(keys)}" if parent else ""
        return f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], keys)}{allowed}"
    if kind == "missing":
        return f"missing required key {loc[-1]!r}" if loc else message
    shown = item.get("input")
    if isinstance(shown, dict | list):
        return message
    hint = did_you_mean(shown, re.findall(r"'([^']+)'", message)) if kind in ("literal_error", "enum") else ""
    return f"{message} (got {shown!r}){hint}"


def _raw_step_count(items: Any) -> int:
    """The steps of a `steps:` list as written, nested ones included, before any is validated."""
    if not isinstance(items, list):
        return 0
    count = 0
    for item in items:
        count += 1
        body = next(iter(item.values())) if isinstance(item, dict) and len(item) == 1 else None
        if isinstance(body, dict):
            count += _raw_step_count(body.get("steps"))
    return count


def _parse_steps(items: Any, loc: Loc, located: _Located) -> tuple[Step, ...]:
    if not isinstance(items, list):
        located.add(loc, "steps must be a list of steps, each a mapping with one step name")
        return ()
    allowed = ", ".join(STEP_MODELS)
    steps: list[Step] = []
    for index, item in enumerate(items):
        item_loc = (*loc, index)
        if not isinstance(item, dict) or len(item) != 1:
            got = list(item) if isinstance(item, dict) else type(item).__name__
            located.add(
                item_loc, f"a step is a mapping with exactly one step name (got {got}); allowed: {allowed}"
            )
            continue
        ((name, raw),) = item.items()
        if name not in STEP_MODELS:
            located.add(
                (*item_loc, name),
                f"unknown step {name!r}{did_you_mean(name, STEP_MODELS)}; allowed: {allowed}",
            )
            continue
        body = located.validate(STEP_MODELS[name], {} if raw is None else raw, (*item_loc, name))
        if body is None:
            continue
        children: tuple[Step, ...] = ()
        if isinstance(body, RepeatStep | DeviceStep):
            children = _parse_steps(body.steps, (*item_loc, name, "steps"), located)
        if isinstance(body, DeviceStep):
            for child_index, child in enumerate(children):
                if child.name == "device":
                    located.add(
                        (*item_loc, name, "steps", child_index, "device"),
                        "a device step cannot hold another device step; put devices side by side",
                    )
        steps.append(Step(name, body, located.line((*item_loc, name)), raw, children))
    return tuple(steps)


def _parse_expectation(raw: Any, loc: Loc, located: _Located) -> ExpectationBase | None:
    """One expectation, validated as the model of the one check it names (schema.Expectation's rule)."""
    if not isinstance(raw, dict):
        located.add(loc, f"Input should be a valid dictionary or instance of Expectation (got {raw!r})")
        return None
    kinds = expectation_kinds(raw)
    if len(kinds) == 1:
        expectation = located.validate(EXPECTATION_MODELS[kinds[0]], raw, loc)
        return expectation if isinstance(expectation, ExpectationBase) else None
    # No check or several: what else is wrong comes first, as it would for a one-check expectation.
    before = len(located.errors)
    located.validate(ExpectationFields, {k: v for k, v in raw.items() if k not in CHECK_KEYS}, loc)
    for kind in kinds:
        check = EXPECTATION_MODELS[kind].model_fields[kind].annotation
        assert isinstance(check, type) and issubclass(check, BaseModel)
        located.validate(check, raw[kind], (*loc, kind))
    if len(located.errors) == before:
        located.add(loc, f"{ONE_CHECK} (got {kinds})")
    return None


def _workspace_refs(steps: Iterable[Step]) -> Iterable[tuple[Step, str]]:
    for step in steps:
        for attribute in ("in_", "cwd", "workspace"):
            value = getattr(step.body, attribute, None)
            if isinstance(value, str):
                yield step, value
        yield from _workspace_refs(step.children)


def _all_steps(steps: Iterable[Step]) -> Iterable[Step]:
    for step in steps:
        yield step
        yield from _all_steps(step.children)


def _check_labels(
    steps: tuple[Step, ...], expectations: list[ExpectationAt], path: Path, errors: list[str]
) -> None:
    """Step labels are unique; windows name a label, and `at:` an observe step's `as`."""
    labels: dict[str, int] = {}
    observed: set[str] = set()
    for step in _all_steps(steps):
        names: list[str] = [label for label in [getattr(step.body, "label", None)] if label is not None]
        if isinstance(step.body, ObserveStep):
            observed.add(step.body.as_)
            names.append(step.body.as_)
        for label in names:
            if label in labels and labels[label] != step.line:
                errors.append(
                    f"{path}:{step.line}: {step.name}: label {label!r} is already used at line {labels[label]}; "
                    "labels (and observe names) must be unique"
                )
            labels.setdefault(label, step.line)
    declared = ", ".join(sorted(labels)) or "none (add label: NAME to a step)"
    for at in expectations:
        check = at.expectation.check
        for key in ("since", "until"):
            wanted = getattr(check, key, None)
            if wanted is not None and wanted not in labels:
                errors.append(
                    f"{path}:{at.line}: expect.{at.index}.{at.expectation.kind}.{key}: unknown step label "
                    f"{wanted!r}; labels: {declared}"
                )
        point = getattr(check, "at", None)
        if point is not None and point not in observed:
            points = ", ".join(sorted(observed)) or "none (add an `observe: NAME` step)"
            errors.append(
                f"{path}:{at.line}: expect.{at.index}.{at.expectation.kind}.at: no observe step named "
                f"{point!r}; observe points: {points}"
            )


def _parent_cycle(name: str, header: Header) -> list[str] | None:
    """The chain of parents from NAME back to NAME, if it loops (the world builder would wait forever)."""
    chain = [name]
    parent = header.workspaces[name].parent
    while parent is not None and parent in header.workspaces:
        chain.append(parent)
        if parent == name:
            return chain
        if parent in chain[:-1]:
            return None  # a loop further up, reported at its own members
        parent = header.workspaces[parent].parent
    return None


def parse_scenario(text: str, path: Path) -> Scenario:
    try:
        source = load_yaml(text)
    except YamlSyntaxError as error:
        raise ScenarioError(f"{path}:{error.line}: not valid YAML: {error.problem.splitlines()[0]}") from None
    data = source.data
    if source.node is None or not isinstance(data, dict):
        raise ScenarioError(
            f"{path}:1: a scenario is a mapping with keys {', '.join(TOP_LEVEL_KEYS)} (got {type(data).__name__})"
        )
    located = _Located(path, source)
    for loc in source.duplicate_keys:
        located.add(loc, f"duplicate key {loc[-1]!r}; each key may appear once")

    for key in data:
        if key not in TOP_LEVEL_KEYS:
            located.add(
                (key,),
                f"unknown key {key!r}{did_you_mean(key, TOP_LEVEL_KEYS)}; allowed: {', '.join(TOP_LEVEL_KEYS)}",
            )
    header_data = {key: value for key, value in data.items() if key in Header.model_fields}
    header = located.validate(Header, header_data, ())
    if "steps" not in data:
        located.add(("steps",), "missing required key 'steps' (a list of steps)")
    steps: tuple[Step, ...] = ()
    if (count := _raw_step_count(data.get("steps"))) > MAX_SCENARIO_STEPS:
        located.add(
            ("steps",),
            f"{count} steps (nested ones counted); a scenario holds at most {MAX_SCENARIO_STEPS}: split it",
        )
    else:
        steps = _parse_steps(data.get("steps", []), ("steps",), located)

    expectations: list[ExpectationAt] = []
    raw_expect = data.get("expect", [])
    if not isinstance(raw_expect, list):
        located.add(("expect",), "expect must be a list of expectations")
        raw_expect = []
    for index, raw in enumerate(raw_expect):
        expectation = _parse_expectation(raw, ("expect", index), located)
        if expectation is not None:
            expectations.append(ExpectationAt(expectation, located.line(("expect", index)), index))

    _check_labels(steps, expectations, path, located.errors)
    if isinstance(header, Header):
        known = set(header.workspaces)
        for step, name in _workspace_refs(steps):
            if name not in known:
                allowed = ", ".join(sorted(known)) or "none declared (add a workspaces: section)"
                located.errors.append(
                    f"{path}:{step.line}: {step.name}: unknown workspace {name!r}; declared: {allowed}"
                )
        for name, spec in header.workspaces.items():
            if spec.parent is not None and spec.parent not in known:
                located.add(("workspaces", name, "parent"), f"unknown workspace {spec.parent!r}")
            elif (cycle := _parent_cycle(name, header)) is not None:
                located.add(
                    ("workspaces", name, "parent"),
                    f"workspace {name!r} is its own ancestor ({' -> '.join(cycle)}); parents must form a tree",
                )

    if located.errors:
        raise ScenarioError("\n".join(located.errors))
    assert isinstance(header, Header)
    return Scenario(
        path=path,
        line=source.lines.get(("name",), 1),
        header=header,
        steps=steps,
        expectations=tuple(expectations),
        source=text,
    )


def load_scenario(path: Path) -> Scenario:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_YAML_BYTES + 1)  # never more than the YAML bound into memory
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read: {error.strerror}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise ScenarioError(f"{path}:1: not valid YAML: too large to load: more than {MAX_YAML_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScenarioError(
            f"{path}: cannot read: not UTF-8 ({error.reason} at byte {error.start})"
        ) from None
    return parse_scenario(text, path)


def discover(paths: Sequence[Path]) -> list[Path]:
    """Scenario files under PATHS (files taken as given, directories searched recursively), sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.rglob(f"*{SCENARIO_SUFFIX}")))
        elif path.is_file():
            found.append(path)
        else:
            raise ScenarioError(f"{path}: no such file or directory")
    return found


def load_each(paths: Sequence[Path]) -> tuple[list[Scenario], list[InvalidScenarioFile]]:
    """Every scenario under PATHS that loads, and a one-line error for each file that does not."""
    scenarios: list[Scenario] = []
    invalid: list[InvalidScenarioFile] = []
    for path in discover(paths):
        try:
            scenarios.append(load_scenario(path))
        except ScenarioError as error:
            invalid.append(InvalidScenarioFile(path, str(error)))
    return scenarios, invalid


@dataclass(frozen=True)
class InvalidScenarioFile:
    path: Path
    error: str


def load_all(paths: Sequence[Path]) -> list[Scenario]:
    """Every scenario under PATHS; one invalid file refuses them all (for tools that need every one)."""
    scenarios, invalid = load_each(paths)
    if invalid:
        raise ScenarioError("\n".join(file.error for file in invalid))
    return scenarios
