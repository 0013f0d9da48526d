"""The suite's order for xdist: the longest work first, so no worker starts a 2-minute test at the end.

xdist's loadgroup scheduler hands out work in collection order, and collection order put a 120 s test and
the 200 s install group near the end: the last worker ran alone for minutes while three were idle. Files
and xdist groups are moved as blocks (a module's fixtures stay contiguous, its tests keep their order),
longest block first, by the seconds in tests/durations.json. `--record-test-durations=PATH` writes that
file from a run (refresh it when the slow tests change: `bash scripts/test.sh
--record-test-durations=tests/durations.json`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
# Blocks shorter than this are left out of the file: their order changes nothing measurable.
RECORDED_AT_LEAST_SECONDS = 1.0


def block_of_nodeid(nodeid: str) -> str:
    """`@group` for a test xdist runs in a group (its report's nodeid ends in `@group`), else its file."""
    head, at, tail = nodeid.rpartition("@")
    if at and head and "]" not in tail and "::" not in tail:
        return f"@{tail}"
    return nodeid.split("::", 1)[0]


def block_of_item(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        name = marker.kwargs.get("name", marker.args[0] if marker.args else "default")
        return f"@{name}"
    return item.nodeid.split("::", 1)[0]


def longest_first(blocks: Sequence[str], seconds: Mapping[str, float]) -> list[int]:
    """Indices of `blocks` (one per item, in collection order), the longest block first; a stable sort,
    so items of one block keep their order and unknown blocks keep theirs after the known ones."""
    return sorted(range(len(blocks)), key=lambda index: -seconds.get(blocks[index], 0.0))


def block_seconds(durations: Mapping[str, float]) -> dict[str, float]:
    """What a block costs the worker that runs it: a group's tests run one after another on one worker,
    so a group's cost is their sum; a file's tests spread over the workers, so a file's is its longest."""
    blocks: dict[str, float] = defaultdict(float)
    for nodeid, spent in durations.items():
        block = block_of_nodeid(nodeid)
        if block.startswith("@"):
            blocks[block] += spent
        else:
            blocks[block] = max(blocks[block], spent)
    return {block: round(spent, 1) for block, spent in blocks.items() if spent >= RECORDED_AT_LEAST_SECONDS}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-test-durations",
        metavar="PATH",
        default=None,
        help="write each file's and xdist group's seconds (the suite's scheduling order) to PATH",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not DURATIONS.is_file():
        return
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    order = longest_first([block_of_item(item) for item in items], seconds)
    items[:] = [items[index] for index in order]


class DurationRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.spent: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.spent[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        blocks = block_seconds(self.spent)
        ordered = dict(sorted(blocks.items(), key=lambda entry: (-entry[1], entry[0])))
        self.path.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")


def pytest_configure(config: pytest.Config) -> None:
    target = config.getoption("--record-test-durations")
    # Only the controller records: under xdist each worker sees a part, and the controller sees all reports.
    if target and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(Path(target)), "engram-kit-duration-recorder")
