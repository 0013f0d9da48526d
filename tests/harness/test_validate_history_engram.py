"""`engram-harness validate` on a home with sync history, made with the real engram v1.20.0 (issue 33).

An agent saves through `engram mcp` from a git repo; the enrolled project is synced to the fake cloud by
`engram serve`'s worker; then the agent saves again. engram v1.20 re-queues the same session row, byte
for byte, on every MCP save: the new rows have twins that were acked before the validation run. The run
receives one copy of each new row, so nothing may read as lost (it read "Lost: 6", "Its proof FAILS").
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession
from engram_sync_kit.harness.engram.serve import EngramDaemon
from engram_sync_kit.harness.lanes import read_local_mutations
from engram_sync_kit.harness.polling import eventually

pytestmark = [pytest.mark.engram]

TOKEN = "history-token"
SESSION = "week-1"


def _agent_saves(world: EngramEnvironment, repo: Path, titles: list[str]) -> None:
    """What an agent does on each turn: start (resume) its session from the repo, then save into it."""
    for title in titles:
        mcp = McpSession(world, repo, {}, world.root / "mcp.log")
        try:
            mcp.call_tool("mem_session_start", {"id": SESSION, "directory": str(repo)})
            mcp.call_tool(
                "mem_save",
                {
                    "title": title,
                    "content": f"what we decided: {title}",
                    "type": "decision",
                    "session_id": SESSION,
                },
            )
        finally:
            mcp.close()


def _unacked(world: EngramEnvironment) -> int:
    return sum(1 for row in read_local_mutations(world.db_path) if not row.acked)


def test_validate_on_a_home_with_sync_history_then_mcp_saves_loses_nothing(
    engram_world: EngramEnvironment, tmp_path: Path
) -> None:
    world = engram_world
    repo = world.home / "src" / "shop-app"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _agent_saves(world, repo, ["week one decision 1", "week one decision 2"])
    assert world.run(["cloud", "enroll", "shop-app"]).returncode == 0
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, server_version="v1.20")) as cloud:
        env = {"ENGRAM_CLOUD_SERVER": cloud.base_url, "ENGRAM_CLOUD_TOKEN": TOKEN}
        daemon = EngramDaemon(world, env, tmp_path / "serve.log")
        try:
            daemon.start(autosync=True)
            eventually(
                lambda: True if _unacked(world) == 0 else None,
                timeout=120,
                interval=0.5,
                what=f"the worker to ack the history (log: {daemon.log_text()[-500:]})",
            )
        finally:
            daemon.close()
    history = read_local_mutations(world.db_path)
    _agent_saves(world, repo, ["week two decision 1", "week two decision 2"])
    new = [row for row in read_local_mutations(world.db_path) if row.seq > max(r.seq for r in history)]
    # the precondition of the false loss: new rows byte-identical to rows acked before the run
    twins = Counter(row.key for row in history) & Counter(row.key for row in new)
    assert all(row.acked for row in history) and not any(row.acked for row in new)
    assert sum(twins.values()) >= 2, [(row.seq, row.entity) for row in new]

    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(
        cli,
        [
            "validate",
            "--db",
            str(world.db_path),
            "--engram",
            str(world.binary),
            "--ticks",
            "2",
            "--json",
            str(report_path),
            "--quiet",
        ],
    )
    report = json.loads(report_path.read_text())
    assert result.exit_code == 0, result.output
    assert report["current"]["totals"] == {
        "enqueued": len(history) + len(new),
        "acked_before_run": len(history),
        "delivered": len(new),
        "stranded": 0,
        "refused": 0,
        "lost": 0,
        "duplicated": 0,
    }
    assert "**Lost:** 0 rows (nothing was acked without reaching the cloud)." in result.output
    assert "its proof holds" in result.output and "FAILS" not in result.output
