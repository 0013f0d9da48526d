"""Every YAML file the kit reads is bounded before anything is built from it (issue 35, item 10): the
document's size, its nodes with every alias expanded, and a scenario's steps. Each answer is one line in
the file:line style, within a second. Failed first: an alias bomb raised MemoryError after 50 s, and a
50,000-step scenario loaded for 15-67 s."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engram_sync_kit.canary.config import ConfigError, load_config
from engram_sync_kit.canary.inbox.aliases import AliasError, parse_aliases
from engram_sync_kit.engram_contract.yaml_source import (
    MAX_YAML_BYTES,
    MAX_YAML_NODES,
    YamlSyntaxError,
    load_yaml,
)
from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import MAX_SCENARIO_STEPS, load_scenario, parse_scenario

pytestmark = pytest.mark.unit

# Nine levels of nine: 9^9 = 387M strings once constructed, 90 nodes as written.
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + level)}: &{chr(98 + level)} [{', '.join([f'*{chr(97 + level)}'] * 9)}]\n"
    for level in range(8)
)
BOMB_LINE = 6  # level f: 9^6 strings, the first level past the bound


def _nodes(total: int) -> str:
    """A sequence whose tree, aliases expanded, has exactly TOTAL nodes (TOTAL > 1000)."""
    shared = "- &a [" + ",".join(["x"] * 999) + "]\n"  # 1,000 nodes, counted again at each alias
    copies, rest = divmod(total - 1 - 1000, 1000)
    return shared + "- *a\n" * copies + "- x\n" * rest


def test_the_bounds() -> None:
    assert (MAX_YAML_BYTES, MAX_YAML_NODES, MAX_SCENARIO_STEPS) == (128 * 1024, 100_000, 1_000)


def test_the_node_bound_is_exact() -> None:
    assert len(load_yaml(_nodes(MAX_YAML_NODES)).data) == 1 + 98 + 999
    with pytest.raises(YamlSyntaxError) as caught:
        load_yaml(_nodes(MAX_YAML_NODES + 1))
    assert (
        str(caught.value)
        == f"line 1: too large to load: its aliases expand to more than {MAX_YAML_NODES} nodes"
    )


def test_the_size_bound_is_exact() -> None:
    fits = "# " + "x" * (MAX_YAML_BYTES - 3) + "\n"
    assert load_yaml(fits).data is None
    with pytest.raises(YamlSyntaxError) as caught:
        load_yaml(fits + "\n")
    assert (
        str(caught.value)
        == f"line 1: too large to load: {MAX_YAML_BYTES + 1} bytes (at most {MAX_YAML_BYTES})"
    )
    # bytes, not characters: 'é' is two
    with pytest.raises(YamlSyntaxError):
        load_yaml("# " + "é" * (MAX_YAML_BYTES // 2))


def test_an_alias_bomb_is_one_line_at_once_in_a_scenario_the_config_and_the_alias_map(tmp_path: Path) -> None:
    began = time.monotonic()
    with pytest.raises(ScenarioError) as scenario:
        parse_scenario("name: bomb\nsteps: []\n" + BOMB, Path("bomb.scenario.yaml"))
    assert str(scenario.value) == (
        f"bomb.scenario.yaml:{BOMB_LINE + 2}: not valid YAML: too large to load: its aliases expand to more "
        f"than {MAX_YAML_NODES} nodes"
    )
    config = tmp_path / "config.yaml"
    config.write_text("thresholds: {}\n" + BOMB)
    with pytest.raises(ConfigError) as configured:
        load_config(config)
    assert str(configured.value) == (
        f"{config}:{BOMB_LINE + 1}: invalid YAML (too large to load: its aliases expand to more than "
        f"{MAX_YAML_NODES} nodes)"
    )
    with pytest.raises(AliasError) as aliased:
        parse_aliases("keys: {}\n" + BOMB, tmp_path / "aliases.yaml")
    assert "invalid YAML (too large to load: its aliases expand" in str(aliased.value)
    assert time.monotonic() - began < 2


def test_a_50000_step_scenario_is_refused_by_size_at_once(tmp_path: Path) -> None:
    path = tmp_path / "long.scenario.yaml"
    path.write_text("name: long\nsteps:\n" + "  - enroll: p\n" * 50_000)
    began = time.monotonic()
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert (
        str(caught.value) == f"{path}:1: not valid YAML: too large to load: more than {MAX_YAML_BYTES} bytes"
    )
    assert time.monotonic() - began < 1


def _steps(count: int) -> str:
    nested = "  - repeat:\n      times: 1\n      steps:\n        - enroll: p\n"  # two steps
    return "name: many\nsteps:\n" + nested + "  - enroll: p\n" * (count - 2)


def test_the_step_bound_is_exact_and_counts_nested_steps() -> None:
    assert (
        len(parse_scenario(_steps(MAX_SCENARIO_STEPS), Path("s.scenario.yaml")).steps)
        == MAX_SCENARIO_STEPS - 1
    )
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(_steps(MAX_SCENARIO_STEPS + 1), Path("s.scenario.yaml"))
    assert str(caught.value) == (
        f"s.scenario.yaml:2: steps: {MAX_SCENARIO_STEPS + 1} steps (nested ones counted); a scenario holds at "
        f"most {MAX_SCENARIO_STEPS}: split it"
    )


def test_a_scenario_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.scenario.yaml"
    path.write_bytes(b"name: caf\xe9\nsteps: []\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == f"{path}: cannot read: not UTF-8 (invalid continuation byte at byte 9)"
