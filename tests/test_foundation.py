"""One real test per tier: the CLIs and the real engram's journal.

The docker tier tests the project's own image (tests/fake_cloud/test_fake_cloud_container.py: the fake
cloud in a container, its health check and the contract through it), not the engine itself.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr
from engram_sync_kit.harness.engram.install import parse_release
from engram_sync_kit.harness.errors import EngramInstallError


@pytest.mark.unit
@pytest.mark.parametrize("script", ["engram-canary", "engram-harness", "engram-fake-cloud"])
def test_console_scripts_answer_help_and_version(script: str) -> None:
    bin_dir = Path(sys.executable).parent
    version = subprocess.run([bin_dir / script, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0
    assert version.stdout.strip() == f"{script}, version 0.1.0"
    helped = subprocess.run([bin_dir / script, "--help"], capture_output=True, text=True, check=False)
    assert helped.returncode == 0
    assert helped.stdout.startswith(f"Usage: {script} [OPTIONS] COMMAND [ARGS]...")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("version", "module"),
    [
        ("v1.20.0", "github.com/Gentleman-Programming/engram"),
        ("2.2.1", "github.com/Gentleman-Programming/engram/v2"),
        ("v3.2.1", "github.com/Gentleman-Programming/engram/v3"),
    ],
)
def test_each_major_line_installs_from_its_own_module_path(version: str, module: str) -> None:
    assert parse_release(version).module == module


@pytest.mark.unit
def test_a_version_that_is_not_a_tag_is_refused_in_one_line() -> None:
    with pytest.raises(EngramInstallError, match=r"'latest' is not a release tag; expected vMAJOR"):
        parse_release("latest")


@pytest.mark.engram
def test_engram_save_journals_a_mutation_that_python_reads_back(engram_world: EngramEnvironment) -> None:
    workspace = engram_world.root / "ws"
    workspace.mkdir()
    saved = engram_world.run(
        ["save", "first memory", "written by the real binary", "--project", "demo"], cwd=workspace
    )
    assert saved.returncode == 0, meaningful_stderr(saved.stderr)
    assert saved.stdout.startswith('Memory saved: #1 "first memory"')

    db = sqlite3.connect(f"file:{engram_world.db_path}?mode=ro", uri=True)
    try:
        targets = dict(db.execute("SELECT target_key, lifecycle FROM sync_state").fetchall())
        rows = db.execute(
            "SELECT target_key, entity, op, project, acked_at FROM sync_mutations ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    assert targets == {"cloud": "pending", "cloud:demo": "pending"}
    assert rows == [
        ("cloud", "session", "upsert", "demo", None),
        ("cloud", "observation", "upsert", "demo", None),
    ]
