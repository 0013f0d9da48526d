"""engram_contract's shared helpers: one definition each, pinned here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.engram_contract import LANE_COUNTS, ContractError, enrolled_name, go_escape, go_json
from engram_sync_kit.engram_contract.files import atomic_write, xdg_config_home
from engram_sync_kit.engram_contract.journal_match import field_text, matches, mismatched_fields
from engram_sync_kit.engram_contract.yaml_source import YamlSyntaxError, load_yaml
from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.lanes import MeasuredLaneRow
from engram_sync_kit.harness.scenario import schema


def test_xdg_config_home_follows_the_variable_and_falls_back_to_dot_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", "/srv/conf")
    assert xdg_config_home() == Path("/srv/conf")
    monkeypatch.setenv("XDG_CONFIG_HOME", "  ")
    monkeypatch.setenv("HOME", "/home/someone")
    assert xdg_config_home() == Path("/home/someone/.config")


def test_atomic_write_fsyncs_before_the_rename_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        events.append("fsync")
        real_fsync(descriptor)

    def replace(source: str, target: Path) -> None:
        events.append("replace")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "deep" / "file.yaml"
    atomic_write(target, "new: text\n")
    assert target.read_text(encoding="utf-8") == "new: text\n"
    assert events == ["fsync", "replace"]

    def refuse(_a: object, _b: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        atomic_write(target, "other\n")
    assert target.read_text(encoding="utf-8") == "new: text\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.yaml"]


def test_yaml_errors_are_the_contracts_own_not_a_canary_or_harness_error() -> None:
    with pytest.raises(YamlSyntaxError) as caught:
        load_yaml("a: [1, 2\nb: 3\n")
    assert isinstance(caught.value, ContractError)
    assert not isinstance(caught.value, CanaryError | HarnessError)
    assert caught.value.line == 2


def test_enrolled_name_returns_the_stored_spelling() -> None:
    assert enrolled_name("  My--Repo ", ["other", "my-repo"]) == "my-repo"
    assert enrolled_name("my_repo", ["my-repo"]) is None


def test_go_escape_escapes_what_go_escapes() -> None:
    assert go_escape('{"a":"<&>\u2028\u2029"}') == '{"a":"\\u003c\\u0026\\u003e\\u2028\\u2029"}'
    assert go_json({"b": "\u2028", "a": 1}) == '{"a":1,"b":"\\u2028"}'


def test_journal_match_compares_fields_as_text() -> None:
    class Entry:
        status = 200
        project = None
        acked = True

    assert matches(Entry(), {"status": "200", "project": "", "acked": "true"})
    assert mismatched_fields(Entry(), {"status": 403, "project": "x", "acked": True}) == ["project", "status"]
    assert mismatched_fields(Entry(), {"status": 200}, fields={"project"}) == ["status"]
    assert field_text(False) == "false"


def test_lane_count_names_have_one_definition() -> None:
    assert schema.LANE_COUNTS is LANE_COUNTS
    assert tuple(MeasuredLaneRow("cloud", "p").counts()) == LANE_COUNTS


def test_a_current_state_delivers_a_row_when_it_carries_every_field_but_the_ignored_ones() -> None:
    from engram_sync_kit.engram_contract import carries_fields, decoded_payload

    local = decoded_payload('{"id": "o1", "title": "t", "project": "My-App"}')
    assert local == {"id": "o1", "title": "t", "project": "My-App"}
    assert decoded_payload("not json") == "not json"
    state = {"id": "o1", "title": "t", "project": "my-app", "revision": 3}
    assert not carries_fields(state, local)
    assert carries_fields(state, local, ignoring=frozenset({"project"}))
    assert not carries_fields({"id": "o1", "title": "other", "project": "My-App"}, local)
    # omitempty: a chunk's delete lacks the journal row's zero counters, and still carries it
    deleted = {"sync_id": "o1", "deleted": True, "revision_count": 0, "duplicate_count": 0}
    assert carries_fields({"sync_id": "o1", "deleted": True}, deleted)
    assert not carries_fields({"sync_id": "o1", "deleted": True}, {**deleted, "revision_count": 2})
    assert not carries_fields("o1", local)
    assert not carries_fields(state, "o1")


@pytest.mark.parametrize(
    "text",
    ["[" * 1000, "[" * 100_000, "9" * 5000, '{"a": ' * 2000],
    ids=["1000 [", "100000 [", "5000 digits", "deep object"],
)
def test_a_payload_string_that_does_not_decode_is_digested_as_given(text: str) -> None:
    """A payload that is a JSON string of 1,000 `[` gave the fake cloud a RecursionError (issue 24, item 11)."""
    from engram_sync_kit.engram_contract import decoded_payload, payload_digest

    assert decoded_payload(text) == text
    assert payload_digest(text) == payload_digest(text)
