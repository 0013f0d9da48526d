"""YAML with the line of every key, for one-line file:line errors (the canary's files and harness scenarios).

Each package catches YamlSyntaxError and raises its own error with the file name and its own wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from engram_sync_kit.engram_contract.errors import ContractError

Loc = tuple[str | int, ...]
TOO_DEEP = "nested too deeply, or an alias that contains itself"
# Bounds on what one of the kit's YAML files may cost, checked before anything is built from it: the
# largest shipped scenario is 7 KB, and PyYAML reads about 100 KB a second on a loaded 2-core machine.
# Aliases are counted as expanded (an alias bomb composes in a few nodes and constructs billions).
MAX_YAML_BYTES = 128 * 1024
MAX_YAML_NODES = 100_000


class YamlSyntaxError(ContractError):
    """The text is not YAML; callers add the file name and their own wording."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


@dataclass(frozen=True)
class YamlSource:
    """The constructed document, the line of every key path, and the paths of repeated keys."""

    node: yaml.Node | None
    data: Any
    lines: dict[Loc, int]
    duplicate_keys: tuple[Loc, ...]

    def line(self, loc: Loc, *, keys_only: bool = False) -> int:
        """The line of the deepest known part of LOC; with keys_only, of a mapping key (not a list item)."""
        for end in range(len(loc), -1, -1):
            prefix = loc[:end]
            if keys_only and prefix and isinstance(prefix[-1], int):
                continue
            if prefix in self.lines:
                return self.lines[prefix]
        return 1


def syntax_error(error: yaml.YAMLError) -> YamlSyntaxError:
    mark = getattr(error, "problem_mark", None)
    line = mark.line + 1 if mark is not None else 1
    return YamlSyntaxError(line, getattr(error, "problem", None) or str(error))


def check_size(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_YAML_BYTES:
        raise YamlSyntaxError(1, f"too large to load: {size} bytes (at most {MAX_YAML_BYTES})")


def check_expansion(node: yaml.Node) -> None:
    """Raise when NODE's tree, every alias expanded, has more than MAX_YAML_NODES nodes (linear time:
    each shared node is measured once)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def measure(current: yaml.Node) -> int:
        key = id(current)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise YamlSyntaxError(current.start_mark.line + 1, TOO_DEEP)
        open_nodes.add(key)
        total = 1
        if isinstance(current, yaml.SequenceNode):
            total += sum(measure(item) for item in current.value)
        elif isinstance(current, yaml.MappingNode):
            total += sum(measure(name) + measure(value) for name, value in current.value)
        open_nodes.discard(key)
        if total > MAX_YAML_NODES:
            raise YamlSyntaxError(
                current.start_mark.line + 1,
                f"too large to load: its aliases expand to more than {MAX_YAML_NODES} nodes",
            )
        sizes[key] = total
        return total

    try:
        measure(node)
    except RecursionError:
        raise YamlSyntaxError(1, TOO_DEEP) from None


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of TEXT (for callers that check tags themselves)."""
    check_size(text)
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise syntax_error(error) from None
    except RecursionError:
        raise YamlSyntaxError(1, TOO_DEEP) from None
    if node is not None:
        check_expansion(node)
    return node


def load_yaml(text: str) -> YamlSource:
    check_size(text)
    loader = yaml.SafeLoader(text)
    duplicates: list[Loc] = []
    try:
        node = loader.get_single_node()
        if node is not None:
            check_expansion(node)
            # Before constructing: that merges `<<: *anchor` keys into the mapping, and a key written
            # beside the merge (`{<<: *s, title: x}`) is a legal override, not a duplicate.
            _collect_duplicates(node, (), duplicates)
        data = loader.construct_document(node) if node is not None else None  # type: ignore[no-untyped-call]
    except yaml.YAMLError as error:
        raise syntax_error(error) from None
    except RecursionError:
        raise YamlSyntaxError(1, TOO_DEEP) from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
    lines: dict[Loc, int] = {}
    if node is not None:
        try:
            _collect_lines(node, (), lines)
        except RecursionError:  # an alias that contains itself: `a: &a [*a]`
            raise YamlSyntaxError(1, TOO_DEEP) from None
    return YamlSource(node=node, data=data, lines=lines, duplicate_keys=tuple(duplicates))


def _collect_lines(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = str(key_node.value)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _collect_lines(value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect_lines(item, (*loc, index), lines)


MERGE_TAG = "tag:yaml.org,2002:merge"


def _collect_duplicates(node: yaml.Node, loc: Loc, duplicates: list[Loc]) -> None:
    """Keys written twice in one mapping (merge keys `<<` aside), in the document as composed."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = str(key_node.value)
            if key in seen:
                duplicates.append((*loc, key))
            seen.add(key)
            _collect_duplicates(value_node, (*loc, key), duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect_duplicates(item, (*loc, index), duplicates)
