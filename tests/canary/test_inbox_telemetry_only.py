"""`inbox list` on a key that holds telemetry only (issue 35, item 19): it suggests dropping the noise,
never a claim (a claim moves memories, finds none and fails). Failed first: it printed the claim."""

from __future__ import annotations

import contextlib
import shlex
import sqlite3

import pytest
from inbox_support import aliases_file, canary, engram_ok, inbox_json

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

DROP = "engram-canary inbox drop --project chatter --noise"


@pytest.fixture
def world(engram_world: EngramEnvironment) -> EngramEnvironment:
    """alpha enrolled; 'chatter' (aliased to alpha) keeps its session row after its one memory was
    dropped by seq: telemetry only."""
    engram_ok(engram_world, "save", "alpha note", "c", "--project", "alpha")
    engram_ok(engram_world, "cloud", "enroll", "alpha")
    engram_ok(engram_world, "save", "chatter note", "c", "--project", "chatter")
    aliases = aliases_file(engram_world)
    aliases.parent.mkdir(parents=True, exist_ok=True)
    aliases.write_text("keys:\n  chatter: alpha\n")
    before = canary(engram_world, "inbox", "list")
    assert "    claim: engram-canary inbox claim --project chatter --as alpha" in before.stdout.splitlines()
    return engram_world


def test_a_telemetry_only_key_suggests_drop_noise_not_claim(world: EngramEnvironment) -> None:
    with contextlib.closing(sqlite3.connect(f"file:{world.db_path}?mode=ro", uri=True)) as connection:
        (seq,) = connection.execute(
            "SELECT seq FROM sync_mutations WHERE project = 'chatter' AND entity = 'observation'"
        ).fetchone()
    dropped = canary(world, "inbox", "drop", "--seq", str(seq), "--apply")  # v2/v3: refused, ends here
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    listed = canary(world, "inbox", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert f"    drop: {DROP} (telemetry only: nothing to claim)" in lines, listed.stdout
    assert not [line for line in lines if "claim --project chatter" in line], listed.stdout
    (entry,) = (e for e in inbox_json(world) if e["key"] == "chatter")
    assert (entry["count"], entry["telemetry"], entry["claim_command"]) == (0, 1, None)
    assert entry["drop_command"] == DROP
    dropped = canary(world, *shlex.split(DROP)[1:], "--apply")
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    assert "chatter" not in [e["key"] for e in inbox_json(world)]
