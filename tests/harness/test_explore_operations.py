"""Issue 38's second step, item 2, without engram: the operations that edit, relate and re-enqueue a saved
memory, move a session, jump the clock and kill -9 `engram serve` are drawn, every history with them is a
scenario the loader accepts, and what each names exists in the history before it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engram_sync_kit.harness.explore.execute import parsed_steps
from engram_sync_kit.harness.explore.operations import (
    KILLED_CYCLE_TIMEOUT,
    MACHINE_B,
    NEMESIS_KINDS,
    OPERATION_NAMES,
    RELATIONS,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.explore.scenario_out import scenario_document

NEW_OPERATIONS = ("revise", "relate", "reenqueue", "move_session", "clock_jump", "kill9", "revise_b")
SEEDS = range(300)


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


def test_what_a_new_operation_names_exists_on_its_machine_before_it_and_titles_stay_unique() -> None:
    for settings, seed, history in _all_histories():
        labels: dict[str, dict[str, str]] = {"a": {}, MACHINE_B: {}}  # machine -> label -> title now
        titles: list[str] = []
        sessions: dict[str, str] = {}  # id -> the workspace it last ran in
        triaged = killed = False
        for step in history:
            machine, children = _on_machine(step.raw)
            for child in children:
                ((name, body),) = child.items()
                context = f"seed {seed} {settings}: {child}"
                if name == "save":
                    assert body["as"] not in labels["a"] and body["as"] not in labels[MACHINE_B], context
                    labels[machine][body["as"]] = body["title"]
                    titles.append(body["title"])
                elif name == "revise":
                    assert body["of"] in labels[machine], context
                    assert {"content", "title"} & set(body), context
                    if "title" in body:
                        titles.append(body["title"])
                        labels[machine][body["of"]] = body["title"]
                elif name == "relate":
                    assert body["a"] != body["b"] and {body["a"], body["b"]} <= set(labels[machine]), context
                    assert body["relation"] in RELATIONS, context
                elif name == "reenqueue":
                    assert body == {"of": body["of"], "how": "update"} and body["of"] in labels[machine]
                elif name == "delete":  # by the title the memory has now, on the machine that saved it
                    assert body in labels[machine].values(), context
                elif name == "session":
                    if step.operation == "move_session":
                        assert body["id"] in sessions and body["in"] != sessions[body["id"]], context
                        assert "directory" not in body, context  # the new directory is sent
                    else:
                        assert body["id"] not in sessions, context
                    sessions[body["id"]] = body["in"]
                elif name == "time_travel":
                    assert step.operation == "clock_jump" and set(body) == {"days"}, context
                    assert 1 <= body["days"] <= 40 and not triaged, context  # the triage log is not moved
                elif name == "triage":
                    triaged = True
                elif name == "daemon" and step.operation == "kill9":
                    assert body == "kill" and settings.autosync, context
                    killed = True
                elif name == "sync" and step.operation == "sync_autosync":
                    # the first worker cycle after a kill waits out the dead worker's 60 s lease
                    assert body.get("timeout", 0) == (KILLED_CYCLE_TIMEOUT if killed else 0), context
                    killed = False
        assert len(titles) == len(set(titles)), f"seed {seed}: {titles}"


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
