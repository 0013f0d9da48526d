"""A payload that triage rewrites is written as engram itself writes it: Go's encoding/json, whose
HTML-safe escapes (<, >, & and U+2028/U+2029 as \\u escapes) Python's json.dumps does not make."""

from __future__ import annotations

import pytest
from inbox_support import canary, engram_ok, query

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

TITLE = "a <b> & c\u2028d"
CONTENT = "x <y> && z\u2029 ñ"


def test_a_claimed_copy_is_byte_identical_to_engrams_own_encoding(engram_world: EngramEnvironment) -> None:
    engram_ok(engram_world, "save", TITLE, CONTENT, "--project", "side-project")
    engram_ok(engram_world, "cloud", "enroll", "main-proj")
    [(original,)] = query(
        engram_world.db_path,
        "SELECT payload FROM sync_mutations WHERE project = 'side-project' AND entity = 'observation'",
    )
    assert "\\u003cb\\u003e \\u0026 c\\u2028d" in original  # engram escapes as Go does

    claim = canary(
        engram_world, "inbox", "claim", "--project", "side-project", "--as", "main-proj", "--apply"
    )
    assert claim.returncode == 0, claim.stderr

    [(copy,)] = query(
        engram_world.db_path,
        "SELECT payload FROM sync_mutations WHERE project = 'main-proj' AND entity = 'observation'",
    )
    assert copy == original.replace('"project":"side-project"', '"project":"main-proj"')
