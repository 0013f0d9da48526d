"""Issue 38's second step, item 2, without engram: the operations that edit, relate and re-enqueue a saved
memory, move a session, jump the clock and kill -9 `engram serve` are drawn, every history with them is a
scenario the loader accepts, and what each names exists in the history before it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_sync_kit.harness.explore.execute import parsed_steps
from engram_sync_kit.harness.explore.operations import (
    KILLED_CYCLE_TIMEOUT,
    MACHINE_B,
    NEMESIS_KINDS,
    OPERATION_NAMES,
    PLACE_KEYS,
    RELATIONS,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.explore.scenario_out import scenario_document

NEW_OPERATIONS = ("revise", "relate", "reenqueue", "move_session", "clock_jump", "kill9", "revise_b")
SEEDS = range(400)  # relate needs two live memories of one project: rare (2.5% of histories)


def _all_histories() -> Iterator[tuple[GeneratorSettings, int, list[GeneratedStep]]]:
    for machines in (1, 2):
        for autosync in (True, False):
            settings = GeneratorSettings(autosync=autosync, nemesis=tuple(NEMESIS_KINDS), machines=machines)
            for seed in SEEDS:
                yield settings, seed, generate_history(seed, settings)


def test_every_new_operation_is_drawn_and_every_history_with_them_is_a_scenario_the_loader_accepts() -> None:
    drawn: Counter[str] = Counter()
    where: dict[str, set[tuple[int, bool]]] = {name: set() for name in NEW_OPERATIONS}
    for settings, _seed, history in _all_histories():
        assert len(parsed_steps(history, settings.autosync)) == len(history)
        for step in history:
            drawn[step.operation] += 1
            if step.operation in where:
                where[step.operation].add((settings.machines, settings.autosync))
    assert {name: drawn[name] for name in NEW_OPERATIONS if not drawn[name]} == {}
    assert where["kill9"] == {(1, True), (2, True)}  # only with the worker
    assert where["revise_b"] == {(2, True), (2, False)}  # only with machine B
    for name in ("revise", "relate", "reenqueue", "move_session", "clock_jump"):
        assert where[name] == {(1, True), (1, False), (2, True), (2, False)}, name
    # small weights: together they stay well under the saves they work on
    assert sum(drawn[name] for name in NEW_OPERATIONS) < drawn["save_mcp"] + drawn["save_cli"]


def _on_machine(raw: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    if "device" in raw:
        return raw["device"]["name"], raw["device"]["steps"]
    return "a", [raw]


@dataclass
class Seen:
    """What a history's steps made so far, read from the raw steps alone (not from the generator's Model)."""

    titles: dict[str, dict[str, str]] = field(default_factory=lambda: {"a": {}, MACHINE_B: {}})
    projects: dict[str, str] = field(default_factory=dict)  # label -> the project engram v1.20 gives it
    keys: dict[str, str] = field(default_factory=lambda: dict(PLACE_KEYS))  # place -> mcp's key there
    deleted: set[str] = field(default_factory=set)
    every_title: list[str] = field(default_factory=list)
    sessions: dict[str, str] = field(default_factory=dict)  # id -> the workspace it last ran in
    triaged: bool = False
    killed: bool = False

    def live(self, machine: str, label: str) -> bool:
        return label in self.titles[machine] and label not in self.deleted

    def save(self, machine: str, body: dict[str, Any]) -> None:
        assert all(body["as"] not in titles for titles in self.titles.values())
        self.titles[machine][body["as"]] = body["title"]
        self.every_title.append(body["title"])
        via = body.get("via", "mcp")
        self.projects[body["as"]] = self.keys[body["in"]] if via == "mcp" else body.get("project", "")


def _check_step(seen: Seen, operation: str, machine: str, name: str, body: Any, autosync: bool) -> None:
    if name == "save":
        seen.save(machine, body)
    elif name == "revise":
        assert seen.live(machine, body["of"]) and {"content", "title"} & set(body)
        if "title" in body:
            seen.every_title.append(body["title"])
            seen.titles[machine][body["of"]] = body["title"]
    elif name == "relate":  # two live memories of one project (v1.20 refuses a relation across two)
        assert body["a"] != body["b"] and seen.live(machine, body["a"]) and seen.live(machine, body["b"])
        assert seen.projects[body["a"]] == seen.projects[body["b"]] and body["relation"] in RELATIONS
    elif name == "reenqueue":
        assert body == {"of": body["of"], "how": "update"} and seen.live(machine, body["of"])
    elif name == "delete":  # by the title the memory has now, on the machine that saved it
        ((label,),) = [[label for label, title in seen.titles[machine].items() if title == body]]
        seen.deleted.add(label)
    elif name == "rename":
        seen.keys[body["workspace"]] = body["to"]
    elif name == "session":
        if operation == "move_session":
            assert seen.sessions[body["id"]] != body["in"] and "directory" not in body  # the new one sent
        else:
            assert body["id"] not in seen.sessions
        seen.sessions[body["id"]] = body["in"]
    elif name == "time_travel":
        assert operation == "clock_jump" and set(body) == {"days"} and 1 <= body["days"] <= 40
        assert not seen.triaged  # the triage log's times are not moved
    elif name == "triage":
        seen.triaged = True
    elif name == "daemon" and operation == "kill9":
        assert body == "kill" and autosync
        seen.killed = True
    elif name == "sync" and operation == "sync_autosync":
        # the first worker cycle after a kill waits out the dead worker's 60 s lease
        assert body.get("timeout", 0) == (KILLED_CYCLE_TIMEOUT if seen.killed else 0)
        seen.killed = False


def test_what_a_new_operation_names_exists_on_its_machine_before_it_and_titles_stay_unique() -> None:
    for settings, seed, history in _all_histories():
        seen = Seen()
        for step in history:
            machine, children = _on_machine(step.raw)
            for child in children:
                ((name, body),) = child.items()
                try:
                    _check_step(seen, step.operation, machine, name, body, settings.autosync)
                except (AssertionError, KeyError, ValueError) as failed:
                    raise AssertionError(f"seed {seed} {settings}: {step.operation} {child}") from failed
        assert len(seen.every_title) == len(set(seen.every_title)), f"seed {seed}: {seen.every_title}"


def test_a_seeds_history_with_the_new_operations_is_still_a_function_of_the_seed() -> None:
    settings = GeneratorSettings(autosync=True, nemesis=tuple(NEMESIS_KINDS), steps=30, machines=2)
    first = [step.raw for step in generate_history(5, settings)]
    assert first == [step.raw for step in generate_history(5, settings)]
    assert {step.operation for step in generate_history(5, settings)} & set(NEW_OPERATIONS)


def test_a_scenario_with_a_cycle_after_a_kill_allows_for_its_longer_wait() -> None:
    kill = {"daemon": "kill"}
    cycle = {"sync": {"via": "autosync", "timeout": KILLED_CYCLE_TIMEOUT}}
    plain = scenario_document("x", [{"sync": {"via": "autosync"}}], autosync=True)["timeout"]
    assert (
        scenario_document("x", [kill, cycle], autosync=True)["timeout"] == plain - 50 + KILLED_CYCLE_TIMEOUT
    )
    settle = {"sync": {"via": "autosync", "cycles": 2, "timeout": 100}}
    assert scenario_document("x", [settle], autosync=True)["timeout"] == 120 + 100  # as before: 2 cycles


def test_docs_explore_names_every_operation_in_its_table() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "explore.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in docs.splitlines() if line.startswith("| `"))
    for name in OPERATION_NAMES:
        assert f"`{name}`" in table, name


def test_two_machine_histories_with_the_worker_run_machine_bs_worker_and_the_others_do_not() -> None:
    """B's worker pushes through /sync/mutations/push, what machine A's worker pulls (I9, #1273's class);
    histories without the worker, and one-machine ones, draw exactly what they drew before."""
    worker_b = {
        "device": {
            "name": MACHINE_B,
            "steps": [{"daemon": {"action": "start", "autosync": True}}, {"sync": {"via": "autosync"}}],
        }
    }
    drawn = [
        step
        for seed in range(200)
        for step in generate_history(seed, GeneratorSettings(autosync=True, nemesis=(), machines=2))
        if step.operation == "worker_b"
    ]
    assert drawn and all(step.raw == worker_b for step in drawn)
    for settings in (
        GeneratorSettings(autosync=False, nemesis=(), machines=2),
        GeneratorSettings(autosync=True, nemesis=(), machines=1),
    ):
        assert not any(
            step.operation == "worker_b" for seed in range(200) for step in generate_history(seed, settings)
        )
