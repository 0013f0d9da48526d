"""The owner v3 wants on PATCH/DELETE /observations/{id} (predicted from server.go@d4397781)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from engram_sync_kit.engram_contract.local_api import EXPECTED_PROJECT_PARAM, observation_path


@pytest.mark.parametrize("project", ["engram", "my app", "a&b=c?d#e/f", "proyecto-ñandú", "x" * 5000, "100%"])
def test_the_owner_round_trips_through_the_query(project: str) -> None:
    path = observation_path(42, project)
    parts = urlsplit(path)
    assert parts.path == "/observations/42" and not parts.fragment
    assert parse_qs(parts.query, keep_blank_values=True) == {EXPECTED_PROJECT_PARAM: [project]}


@pytest.mark.parametrize("project", ["", " ", "\t\n"])
def test_an_observation_without_a_project_names_no_owner(project: str) -> None:
    assert observation_path(7, project) == "/observations/7"
