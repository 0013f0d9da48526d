"""The shortcuts that keep check linear and cheap at 10k targets answer as the plain rules do."""

from __future__ import annotations

from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from engram_sync_kit.canary.inbox.selection import KeyTotals
from engram_sync_kit.engram_contract.names import enrolled_name

_names = st.text(alphabet="aA-_ b", max_size=6)
_epochs = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))


@given(project=_names, enrolled=st.frozensets(_names, max_size=6))
def test_enrolled_name_of_a_frozenset_is_the_first_normalized_match(
    project: str, enrolled: frozenset[str]
) -> None:
    assert enrolled_name(project, enrolled) == enrolled_name(project, list(enrolled))


def test_enrolled_name_matches_after_normalizing_both_sides() -> None:
    assert enrolled_name(" My--App ", frozenset({"my-app", "other"})) == "my-app"
    assert enrolled_name("my_app", frozenset({"my-app"})) is None


@given(
    count=st.integers(min_value=0),
    telemetry=st.integers(min_value=0),
    oldest=_epochs,
    oldest_memory=_epochs,
    projects=st.lists(st.one_of(st.none(), _names)),
)
def test_key_totals_as_json_is_asdict(
    count: int, telemetry: int, oldest: float | None, oldest_memory: float | None, projects: list[str | None]
) -> None:
    totals = KeyTotals(count, telemetry, oldest, oldest_memory, projects)
    document = totals.as_json()
    assert document == asdict(totals)
    document["projects"].append("x")
    assert totals.projects == projects
