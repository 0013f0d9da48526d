"""The canary knows the sync_state keys of engram's per-project remotes (predicted from source).

A v2-module engram newer than the commits in docs/version-reach.md can route a project to a remote of
its own (cloud.json `projects`); each remote's worker keeps its lease, pull cursor, pulled and deferred
rows and status under `cloud@<RemoteID>`, RemoteID being the first 12 hex digits of
sha256(normalized server URL + NUL + token) (internal/cloudconfig: RemoteStateKeyPrefix, RemoteID,
StateKey; index file id 71421280347). engram's doctor keeps a live remote's row, warns about an
orphaned one (a key no configured remote has, e.g. after a token rotation) and still flags every other
key as foreign (internal/diagnostic test, module /v2, index file id 70921172791). No v2 binary builds
here, so every row below is SIMULATED as that engram would leave it, and the expectations are
predictions. `cloud@` keys exist only in /v2-module source: the /v3 worker has no StateKey (manager.go,
index file id 70742347905) and v3's CleanupForeignSyncTargets (store.go @d4397781) spares no such key. So
while cloud.json cannot be read, a `cloud@<12 hex>` key passes unflagged only on a generation with
remotes (v2.0.0-rc.12+ here; engram_contract.generations); elsewhere it could hide a foreign key.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engram_schemas.builder import FIXTURE_VERSIONS, PHANTOM_TARGET, V2_RC12, build

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.engram_contract.remotes import remote_state_key

# The URL/token pairs engram's own tests use (seedLiveRemoteConfig); the ids are pinned literally so a
# change in the derivation shows here, not only in both sides of a comparison.
TEAM_URL, TEAM_TOKEN = "https://team.example.test", "team-token"
LIVE_KEY = "cloud@" + "919fe4ca6138"
ORPHAN_KEY = "cloud@" + "d5a7e45acb19"  # the same server after a token rotation ("old-token")
FOREIGN_KEY = "satellite:inert"


def check_json(db: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["check", "--db", str(db), "--format", "json", "--no-baseline"])
    return result.exit_code, json.loads(result.output)


def write_cloud_json(data_dir: Path, text: str) -> None:
    (data_dir / "cloud.json").write_text(text, encoding="utf-8")


def team_config() -> str:
    # SIMULATED: cloud.json as `engram cloud` saves it with one per-project override.
    return json.dumps(
        {
            "server_url": "https://global.example.test",
            "token": "global-token",
            "projects": {"alpha": {"server_url": TEAM_URL, "token": TEAM_TOKEN}},
        },
        indent=2,
    )


def add_state_rows(db: Path, *keys: str) -> None:
    # SIMULATED: the rows a remote's worker leaves (AdvanceSyncPullCursor, AcquireSyncLease).
    with contextlib.closing(sqlite3.connect(db)) as connection:
        for key in keys:
            connection.execute(
                "INSERT INTO sync_state (target_key, lifecycle, last_pulled_seq, updated_at) "
                "VALUES (?, 'idle', 42, datetime('now'))",
                (key,),
            )
        connection.commit()


def foreign_keys(result: dict[str, Any]) -> list[str]:
    return sorted(f["target_key"] for f in result["findings"] if f["check"] == "foreign_sync_target")


# The fixtures whose generation has per-project remotes.
WITH_REMOTES = frozenset({V2_RC12})


@pytest.fixture(params=FIXTURE_VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(version: str, tmp_path: Path) -> Path:
    path = tmp_path / "engram.db"
    build(version, path)
    return path


def test_remote_state_key_is_engrams_naming() -> None:
    assert remote_state_key(TEAM_URL, TEAM_TOKEN) == LIVE_KEY
    assert remote_state_key(TEAM_URL, "old-token") == ORPHAN_KEY
    # engram trims both, lowercases scheme and host and drops trailing slashes before hashing
    assert remote_state_key("  HTTPS://Team.Example.TEST///", " team-token ") == LIVE_KEY


def test_a_live_remotes_state_row_is_not_foreign(db: Path) -> None:
    write_cloud_json(db.parent, team_config())
    add_state_rows(db, LIVE_KEY, FOREIGN_KEY)
    _, result = check_json(db)
    assert foreign_keys(result) == sorted([PHANTOM_TARGET, FOREIGN_KEY])
    assert LIVE_KEY in result["allowed_targets"]
    assert result["summary"]["remote_state_keys"] == {"cloud_json": "read", "live": [LIVE_KEY]}


def test_an_orphaned_remote_key_is_still_foreign_and_says_why(db: Path) -> None:
    write_cloud_json(db.parent, team_config())
    add_state_rows(db, LIVE_KEY, ORPHAN_KEY)
    _, result = check_json(db)
    assert foreign_keys(result) == sorted([PHANTOM_TARGET, ORPHAN_KEY])
    (orphan,) = (f for f in result["findings"] if f["target_key"] == ORPHAN_KEY)
    assert orphan["evidence"]["remote_state"].startswith(
        "orphaned: no remote in cloud.json has id d5a7e45acb19"
    )


def test_without_cloud_json_every_remote_key_is_an_orphan(db: Path) -> None:
    add_state_rows(db, LIVE_KEY)
    _, result = check_json(db)
    assert foreign_keys(result) == sorted([PHANTOM_TARGET, LIVE_KEY])
    assert result["summary"]["remote_state_keys"] == {"cloud_json": "absent", "live": []}


@pytest.mark.parametrize(
    "text", ["{not json", '{"projects": []}', '{"projects": {"a": {"token": 7}}}', "\udcff"]
)
def test_an_unreadable_cloud_json_leaves_remote_shaped_keys_unflagged(
    version: str, db: Path, text: str
) -> None:
    """As engram's doctor does (one note, no foreign error for cloud@ rows): the remotes are unknown. On a
    generation without remotes the key is foreign like any other."""
    (db.parent / "cloud.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    add_state_rows(db, LIVE_KEY, FOREIGN_KEY, "cloud@not-an-id")
    _, result = check_json(db)
    unflagged = version in WITH_REMOTES
    expected = [PHANTOM_TARGET, FOREIGN_KEY, "cloud@not-an-id", *([] if unflagged else [LIVE_KEY])]
    assert foreign_keys(result) == sorted(expected)
    assert result["summary"]["remote_state_keys"]["cloud_json"].startswith("unreadable: ")
    assert "\n" not in result["summary"]["remote_state_keys"]["cloud_json"]


def test_a_huge_cloud_json_is_not_read_whole(db: Path) -> None:
    write_cloud_json(db.parent, '{"projects": {' + " " * (2 << 20) + "}}")
    add_state_rows(db, LIVE_KEY)
    _, result = check_json(db)
    assert result["summary"]["remote_state_keys"]["cloud_json"] == "unreadable: larger than 1 MiB"


@pytest.mark.parametrize("kind", ["directory", "fifo", "deep", "dangling-symlink"])
def test_a_cloud_json_that_is_not_a_file_of_json_is_unreadable_in_one_line(
    version: str, db: Path, kind: str
) -> None:
    path = db.parent / "cloud.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # nobody writes: a blocking open would hang the check
    elif kind == "deep":
        path.write_text('{"projects": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    else:
        path.symlink_to(db.parent / "missing.json")
    add_state_rows(db, LIVE_KEY)
    _, result = check_json(db)
    state = result["summary"]["remote_state_keys"]
    if kind == "dangling-symlink":
        assert state == {"cloud_json": "absent", "live": []}
        return
    assert state["cloud_json"].startswith("unreadable: ") and "\n" not in state["cloud_json"], state
    assert (LIVE_KEY in foreign_keys(result)) is (version not in WITH_REMOTES)


def test_cloud_json_names_match_as_go_decodes_them(db: Path) -> None:
    """encoding/json matches field names case-insensitively, the last key naming a field wins, and
    unknown fields are ignored."""
    override = {"SERVER_URL": TEAM_URL, "Token": TEAM_TOKEN, "note": "x"}
    write_cloud_json(db.parent, json.dumps({"projects": None, "Projects": {"alpha": override}, "x": 1}))
    add_state_rows(db, LIVE_KEY)
    _, result = check_json(db)
    assert result["summary"]["remote_state_keys"] == {"cloud_json": "read", "live": [LIVE_KEY]}
    write_cloud_json(db.parent, json.dumps({"Projects": {"alpha": override}, "projects": None}))
    _, result = check_json(db)
    assert result["summary"]["remote_state_keys"] == {"cloud_json": "read", "live": []}
