"""canary.deadline_json: the same values and errors as json.loads, and an end at the deadline."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram_sync_kit.canary import deadline_json
from engram_sync_kit.canary.deadline_json import DeadlinePassed, loads_by

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=40,
)


@pytest.fixture
def always_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline_json, "SMALL_ANSWER_BYTES", 0)


@given(value=JSON, indent=st.sampled_from([None, 1]))
def test_a_walked_answer_is_what_json_loads_gives(value: Any, indent: int | None) -> None:
    body = json.dumps(value, indent=indent).encode()
    original = deadline_json.SMALL_ANSWER_BYTES
    deadline_json.SMALL_ANSWER_BYTES = 0
    try:
        assert loads_by(body, time.monotonic() + 60) == json.loads(body)
    finally:
        deadline_json.SMALL_ANSWER_BYTES = original


@pytest.mark.usefixtures("always_walked")
@pytest.mark.parametrize(
    "text", ["", "[1,", "[1,]", '{"a" 1}', '{"a":1,}', "[1 2]", "[1] x", '{"a":1', "nul"]
)
def test_a_malformed_answer_is_a_value_error_as_from_json_loads(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads_by(text.encode(), time.monotonic() + 60)


def test_a_big_answer_ends_at_the_deadline() -> None:
    body = b"[" + b'{"a":[1]},' * 2_000_000 + b"{}]"  # about 20 MiB of small objects
    started = time.monotonic()
    with pytest.raises(DeadlinePassed):
        loads_by(body, started + 0.3)
    assert time.monotonic() - started < 1.0


def test_a_small_answer_is_parsed_whole_in_c() -> None:
    assert deadline_json.SMALL_ANSWER_BYTES == 1 << 20
    assert loads_by(b'{"a":1}', time.monotonic() - 1) == {"a": 1}  # no clock look below the threshold
