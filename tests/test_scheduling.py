"""The suite's own order (tests/scheduling.py): longest blocks first, files and groups kept whole."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from scheduling import DURATIONS, DurationRecorder, block_of_nodeid, block_seconds, longest_first


@pytest.mark.parametrize(
    ("nodeid", "block"),
    [
        ("tests/test_install.py::test_a@install", "@install"),
        ("tests/a.py::test_x[v1.20.0]@validate-scale-1", "@validate-scale-1"),
        ("tests/a.py::test_x[user_version 2-newer than v3 @d4397781 (user_version 2)]", "tests/a.py"),
        ("tests/a.py::TestThing::test_y", "tests/a.py"),
        ("scenarios/x.scenario.yaml::x[docker]", "scenarios/x.scenario.yaml"),
    ],
)
def test_a_report_names_its_group_or_its_file(nodeid: str, block: str) -> None:
    assert block_of_nodeid(nodeid) == block


def test_the_longest_block_goes_first_and_every_block_keeps_its_order() -> None:
    blocks = ["a.py", "a.py", "@slow", "b.py", "@slow", "c.py", "b.py"]
    seconds = {"@slow": 200.0, "b.py": 30.0, "a.py": 1.0}
    assert longest_first(blocks, seconds) == [2, 4, 3, 6, 0, 1, 5]


def test_a_groups_cost_is_its_sum_and_a_files_its_longest_test() -> None:
    durations = {
        "t/a.py::one@g": 40.0,
        "t/a.py::two@g": 30.0,
        "t/b.py::one": 50.0,
        "t/b.py::two": 60.0,
        "t/c.py::quick": 0.99,
        "t/d.py::edge": 1.0,
    }
    assert block_seconds(durations) == {"@g": 70.0, "t/b.py": 60.0, "t/d.py": 1.0}


def test_the_recorder_adds_setup_call_and_teardown_and_writes_longest_first(tmp_path: Path) -> None:
    target = tmp_path / "durations.json"
    recorder = DurationRecorder(target)
    for nodeid, spent in [
        ("t/a.py::x", 2.0),
        ("t/a.py::x", 1.5),
        ("t/b.py::y@grp", 5.0),
        ("t/b.py::z@grp", 4.0),
    ]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=spent))  # type: ignore[arg-type]
    recorder.pytest_sessionfinish()
    assert target.read_text(encoding="utf-8") == '{\n "@grp": 9.0,\n "t/a.py": 3.5\n}\n'


def test_the_committed_durations_name_blocks_that_exist() -> None:
    seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    repository = DURATIONS.parents[1]
    files = [block for block in seconds if not block.startswith("@")]
    assert files and all((repository / block).is_file() for block in files)
    assert list(seconds.values()) == sorted(seconds.values(), reverse=True)
