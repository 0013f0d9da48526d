"""inbox list / claim / drop and cleanup-phantoms on rows the real engram v1.20 wrote."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from inbox_support import (
    aliases_file,
    by_key,
    canary,
    db_digest,
    engram_ok,
    engram_serve,
    inbox_json,
    query,
    save,
    table_digest,
)

from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


@dataclass
class InboxWorld:
    world: EngramEnvironment
    scratch: Path
    repo: Path

    @property
    def db(self) -> Path:
        return self.world.db_path


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


@pytest.fixture
def inbox_world(engram_world: EngramEnvironment) -> InboxWorld:
    """Rows under three kinds of keys, all written by the real engram.

    - side-project: `engram save --project side-project` twice (a session designation, not enrolled;
      engram journals the manual-save session upsert once per save);
    - lm-studio-model: a session whose cwd is the git repo LM_Studio_Model (engram recorded lm_studio_model);
    - unsorted: sessions named after the basename of a non-repo dir (the home dir, a scratch dir).
    """
    world = engram_world
    root = world.root / "work"
    repo = git_repo(root / "LM_Studio_Model")
    scratch = root / "scratch"
    scratch.mkdir(parents=True)
    save(world, "side-project", "first", cwd=repo)
    save(world, "side-project", "second", cwd=repo)
    with engram_serve(world) as server:
        for session, project, directory, notes in (
            ("s-repo", "lm_studio_model", repo, 1),
            ("s-home", world.home.name, world.home, 1),
            ("s-scratch", "scratch", scratch, 2),
        ):
            server.post("/sessions", {"id": session, "project": project, "directory": str(directory)})
            for number in range(notes):
                server.post(
                    "/observations",
                    {"session_id": session, "type": "manual", "title": f"{session} {number}", "content": "c"},
                )
        assert set(server.statuses) <= {200, 201}, server.statuses
    engram_ok(world, "cloud", "enroll", "main-proj")
    engram_ok(world, "cloud", "enroll", "lm-studio-model")
    return InboxWorld(world, scratch, repo)


def test_list_groups_rows_by_inbox_key(inbox_world: InboxWorld) -> None:
    entries = by_key(inbox_json(inbox_world.world))
    home = str(inbox_world.world.home)
    scratch = str(inbox_world.scratch)
    assert sorted(entries) == ["lm-studio-model", "side-project", "unsorted"]
    picked = {
        key: {name: entry[name] for name in ("count", "telemetry", "entities", "cwds", "claim_command")}
        for key, entry in entries.items()
    }
    assert picked == {
        "lm-studio-model": {
            "count": 1,
            "telemetry": 1,
            "entities": {"observation": 1, "session": 1},
            "cwds": {},
            "claim_command": "engram-canary inbox claim --project lm-studio-model --as lm-studio-model",
        },
        "side-project": {
            "count": 2,
            "telemetry": 2,
            "entities": {"observation": 2, "session": 2},
            "cwds": {},
            "claim_command": None,
        },
        "unsorted": {
            "count": 3,
            "telemetry": 2,
            "entities": {"observation": 3, "session": 2},
            "cwds": {home: 2, scratch: 3},
            "claim_command": None,
        },
    }
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["oldest"]) for entry in entries.values()
    )


def test_list_text_shows_claim_commands_for_aliases(inbox_world: InboxWorld) -> None:
    aliases = aliases_file(inbox_world.world)
    aliases.parent.mkdir(parents=True)
    aliases.write_text(f"keys:\n  side-project: main-proj\ncwds:\n  {inbox_world.scratch}: main-proj\n")
    result = canary(inbox_world.world, "inbox", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "inbox: 6 memories and 5 telemetry rows in 3 keys (not enrolled: engram's worker never delivers them)"
    )
    assert "    claim: engram-canary inbox claim --project side-project --as main-proj" in lines
    assert (
        f"      claim: engram-canary inbox claim --project unsorted --cwd {inbox_world.scratch} --as main-proj"
        in lines
    )
    assert f"    cwd {inbox_world.scratch}: 3" in lines


def test_claim_dry_run_writes_nothing_and_says_what_would_change(inbox_world: InboxWorld) -> None:
    before = db_digest(inbox_world.db)
    result = canary(inbox_world.world, "inbox", "claim", "--project", "side-project", "--as", "main-proj")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "dry run: claim 2 rows of inbox key 'side-project' (memories: observations and relations) "
        "into enrolled project 'main-proj'; nothing was written"
    )
    assert sum(line.startswith("  insert: legacy-lane row observation ") for line in lines) == 2
    assert sum(line.startswith("  ack: seq ") for line in lines) == 2
    # the memories' session goes along (once, its latest upsert), or the cloud refuses the copies; its
    # originals stay in the inbox as telemetry
    [(session_seq,)] = query(
        inbox_world.db,
        "SELECT MAX(seq) FROM sync_mutations WHERE entity = 'session' AND project = 'side-project'",
    )
    assert [line for line in lines if line.startswith("  insert: legacy-lane row session ")] == [
        "  insert: legacy-lane row session manual-save-side-project upsert for project 'main-proj' "
        f"(copy of seq {session_seq}, project 'side-project', the session of the claimed memories)"
    ]
    assert "  alias: keys 'side-project' -> 'main-proj'" in lines
    assert db_digest(inbox_world.db) == before
    assert not aliases_file(inbox_world.world).exists()
    assert not (inbox_world.db.parent / "engram-canary-backups").exists()


def test_claim_apply_copies_acks_backs_up_and_registers_the_alias(inbox_world: InboxWorld) -> None:
    db = inbox_world.db
    originals = query(
        db,
        "SELECT seq, entity, entity_key, op, payload FROM sync_mutations WHERE project = 'side-project' ORDER BY seq",
    )
    result = canary(
        inbox_world.world,
        "inbox",
        "claim",
        "--project",
        "side-project",
        "--as",
        "main-proj",
        "--with-telemetry",
        "--apply",
    )
    assert result.returncode == 0, result.stderr
    backup = Path(result.stdout.splitlines()[0].removeprefix("backup: "))
    assert backup.is_file() and backup.parent == db.parent / "engram-canary-backups"
    assert query(
        backup, "SELECT COUNT(*) FROM sync_mutations WHERE project = 'side-project' AND acked_at IS NULL"
    ) == [(4,)]
    # originals: same content, now acked
    after = query(
        db,
        "SELECT seq, entity, entity_key, op, payload, acked_at FROM sync_mutations WHERE project = 'side-project' "
        "ORDER BY seq",
    )
    assert [row[:5] for row in after] == originals
    assert all(row[5] is not None for row in after)
    # copies: same entity, key, op and payload except the project, in the legacy lane, unacked
    copies = query(
        db,
        "SELECT target_key, entity, entity_key, op, payload, source, acked_at FROM sync_mutations "
        "WHERE project = 'main-proj' ORDER BY seq",
    )
    assert [(c[0], c[1], c[2], c[3], c[5], c[6]) for c in copies] == [
        ("cloud", o[1], o[2], o[3], "local", None) for o in originals
    ]
    for copy, original in zip(copies, originals, strict=True):
        assert json.loads(copy[4]) == {**json.loads(original[4]), "project": "main-proj"}
    # sync_state as engram's enqueue and ack leave it
    max_copy = query(db, "SELECT MAX(seq) FROM sync_mutations WHERE project = 'main-proj'")[0][0]
    max_original = max(row[0] for row in originals)
    states = dict(
        (row[0], row[1:])
        for row in query(
            db, "SELECT target_key, lifecycle, last_enqueued_seq, last_acked_seq FROM sync_state"
        )
    )
    assert states["cloud:main-proj"] == ("pending", max_copy, 0)
    assert states["cloud:side-project"] == ("healthy", max_original, max_original)
    assert states["cloud"][0:2] == ("pending", max_copy)
    assert aliases_file(inbox_world.world).read_text() == 'keys:\n  "side-project": "main-proj"\n'
    assert "side-project" not in by_key(inbox_json(inbox_world.world))
    # engram's own validator accepts the copies
    doctor = json.loads(
        engram_ok(inbox_world.world, "doctor", "--json", "--check", "sync_mutation_required_fields")
    )
    assert [check["result"] for check in doctor["checks"]] == ["ok"]


def test_a_claim_without_telemetry_copies_the_session_its_memories_reference_so_the_sync_delivers(
    inbox_world: InboxWorld,
) -> None:
    """The canary's own bug, found by explore (I4): the copies referenced a session main-proj never held,
    so engram's next `sync --cloud --project main-proj` failed with 'references missing session_id'."""
    world, db = inbox_world.world, inbox_world.db
    claim = canary(world, "inbox", "claim", "--project", "side-project", "--as", "main-proj", "--apply")
    assert claim.returncode == 0, claim.stderr
    assert query(
        db,
        "SELECT entity, entity_key FROM sync_mutations WHERE project = 'main-proj' AND acked_at IS NULL ORDER BY seq",
    ) == [
        ("session", "manual-save-side-project"),
        *[
            ("observation", key)
            for (key,) in query(
                db,
                "SELECT entity_key FROM sync_mutations WHERE project = 'side-project' AND entity = 'observation' "
                "ORDER BY seq",
            )
        ],
    ]
    # the session's originals stay in the inbox (never acked by a claim without --with-telemetry)
    assert query(
        db,
        "SELECT COUNT(*) FROM sync_mutations WHERE project = 'side-project' AND entity = 'session' "
        "AND acked_at IS NULL",
    ) == [(2,)]
    config = FakeCloudConfig(token="t", allowed_projects=("main-proj",), server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        synced = world.run(
            ["sync", "--cloud", "--project", "main-proj"],
            env={"ENGRAM_CLOUD_SERVER": cloud.base_url, "ENGRAM_CLOUD_TOKEN": "t"},
        )
        received = cloud.client.received()
    assert synced.returncode == 0, synced.stderr
    assert sorted(
        (r.project, r.entity, r.entity_key) for r in received if r.entity == "observation"
    ) == sorted(
        ("main-proj", "observation", key)
        for (key,) in query(
            db, "SELECT entity_key FROM sync_mutations WHERE project = 'main-proj' AND entity = 'observation'"
        )
    )
    assert query(
        db, "SELECT COUNT(*) FROM sync_mutations WHERE project = 'main-proj' AND acked_at IS NULL"
    ) == [(0,)]
    # a second claim of the same session's memories finds the session already on the lane: no second copy
    save(world, "side-project", "third", cwd=inbox_world.repo)
    again = canary(world, "inbox", "claim", "--project", "side-project", "--as", "main-proj")
    assert again.returncode == 0, again.stderr
    assert not any(
        line.startswith("  insert: legacy-lane row session ") for line in again.stdout.splitlines()
    )


def test_the_same_claim_twice_changes_nothing_the_second_time(inbox_world: InboxWorld) -> None:
    args = ("inbox", "claim", "--project", "side-project", "--as", "main-proj", "--apply")
    assert canary(inbox_world.world, *args).returncode == 0
    before = db_digest(inbox_world.db)
    backups = sorted((inbox_world.db.parent / "engram-canary-backups").glob("*.db"))
    aliases = aliases_file(inbox_world.world).read_text()
    again = canary(inbox_world.world, *args)
    assert (again.returncode, again.stdout) == (3, "")
    assert again.stderr == (
        "engram-canary: error: nothing to claim: no unacked inbox rows match inbox key 'side-project' "
        "(memories: observations and relations) (see: engram-canary inbox list)\n"
    )
    assert db_digest(inbox_world.db) == before
    assert sorted((inbox_world.db.parent / "engram-canary-backups").glob("*.db")) == backups
    assert aliases_file(inbox_world.world).read_text() == aliases


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--project", "side-project", "--as", "nowhere"),
            "cannot claim into 'nowhere': it is not enrolled (enrolled: lm-studio-model, main-proj); "
            "run: engram cloud enroll nowhere",
        ),
        (
            ("--project", "side-project", "--as", "Inbox"),
            "'inbox' is a reserved name; rows cannot be claimed into it",
        ),
        (
            ("--project", "no-such-key", "--as", "main-proj"),
            "nothing to claim: no unacked inbox rows match inbox key 'no-such-key' "
            "(memories: observations and relations) (see: engram-canary inbox list)",
        ),
        (
            ("--project", "side-project"),
            "inbox key 'side-project' (memories: observations and relations) does not resolve to one enrolled "
            "project (no alias, no enrolled match); "
            "pass --as <enrolled project>",
        ),
    ],
    ids=["not-enrolled", "reserved-inbox", "empty-selection", "no-target"],
)
def test_claim_refusals_are_one_line_and_write_nothing(
    inbox_world: InboxWorld, args: tuple[str, ...], message: str
) -> None:
    before = db_digest(inbox_world.db)
    result = canary(inbox_world.world, "inbox", "claim", *args, "--apply")
    assert (result.returncode, result.stdout, result.stderr) == (3, "", f"engram-canary: error: {message}\n")
    assert db_digest(inbox_world.db) == before
    assert not (inbox_world.db.parent / "engram-canary-backups").exists()


def test_an_unwritable_backup_dir_is_one_line_and_writes_nothing(inbox_world: InboxWorld) -> None:
    before = db_digest(inbox_world.db)
    not_a_dir = inbox_world.world.root / "a-file"
    not_a_dir.write_text("")
    backup_dir = not_a_dir / "backups"
    config = inbox_world.world.root / "canary.yaml"
    config.write_text(f"backups:\n  dir: {backup_dir}\n")
    args = ("--project", "side-project", "--as", "main-proj", "--apply")

    result = canary(inbox_world.world, "--config", str(config), "inbox", "claim", *args)

    assert (result.returncode, result.stdout, result.stderr) == (
        3,
        "",
        f"engram-canary: error: {backup_dir}: cannot write the backup (Not a directory); nothing was changed "
        "(set backups.dir in the config file)\n",
    )
    assert db_digest(inbox_world.db) == before


def test_claim_without_as_uses_the_enrolled_match(inbox_world: InboxWorld) -> None:
    result = canary(
        inbox_world.world, "inbox", "claim", "--project", "lm-studio-model", "--with-telemetry", "--apply"
    )
    assert result.returncode == 0, result.stderr
    assert query(
        inbox_world.db,
        "SELECT entity FROM sync_mutations WHERE project = 'lm-studio-model' AND acked_at IS NULL",
    ) == [("session",), ("observation",)]
    assert not aliases_file(inbox_world.world).exists()


def test_claim_one_cwd_of_unsorted_registers_a_cwd_alias(inbox_world: InboxWorld) -> None:
    scratch = str(inbox_world.scratch)
    result = canary(
        inbox_world.world,
        "inbox",
        "claim",
        "--project",
        "unsorted",
        "--cwd",
        scratch,
        "--as",
        "main-proj",
        "--apply",
    )
    assert result.returncode == 0, result.stderr
    unsorted = by_key(inbox_json(inbox_world.world))["unsorted"]
    # the scratch session's telemetry row stays in the inbox: claim copies memories only by default
    assert unsorted["cwds"] == {str(inbox_world.world.home): 2, scratch: 1}
    assert unsorted["entities"] == {"observation": 1, "session": 2}
    assert aliases_file(inbox_world.world).read_text() == f'cwds:\n  "{scratch}": "main-proj"\n'


def test_drop_noise_then_drop_acks_without_delivering_or_deleting(inbox_world: InboxWorld) -> None:
    db = inbox_world.db
    total = query(db, "SELECT COUNT(*) FROM sync_mutations")[0][0]
    noise = canary(inbox_world.world, "inbox", "drop", "--project", "unsorted", "--noise", "--apply")
    assert noise.returncode == 0, noise.stderr
    assert noise.stdout.splitlines()[1].startswith(
        "applied: drop 2 rows of inbox key 'unsorted' (noise: session and prompt rows only) (write lock held "
    )
    assert by_key(inbox_json(inbox_world.world))["unsorted"]["entities"] == {"observation": 3}
    rest = canary(inbox_world.world, "inbox", "drop", "--project", "unsorted", "--all-cwds", "--apply")
    assert rest.returncode == 0, rest.stderr
    assert "unsorted" not in by_key(inbox_json(inbox_world.world))
    assert query(db, "SELECT COUNT(*) FROM sync_mutations")[0][0] == total
    log = (db.parent / "engram-canary-backups" / "triage-log.jsonl").read_text().splitlines()
    assert [
        (json.loads(line)["operation"], json.loads(line)["discarded"], len(json.loads(line)["acked_seqs"]))
        for line in log
    ] == [
        ("drop", True, 2),
        ("drop", True, 3),
    ]


def test_cleanup_phantoms_deletes_only_empty_foreign_states(inbox_world: InboxWorld) -> None:
    db = inbox_world.db
    dropped = canary(inbox_world.world, "inbox", "drop", "--project", "unsorted", "--all-cwds", "--apply")
    assert dropped.returncode == 0, dropped.stderr
    mutations = table_digest(db, "sync_mutations")
    dry = canary(inbox_world.world, "cleanup-phantoms")
    assert dry.returncode == 0, dry.stderr
    home = inbox_world.world.home.name
    assert dry.stdout.splitlines() == [
        "dry run: delete 2 phantom sync_state rows; nothing was written",
        f"  delete: sync_state row 'cloud:{home}' (lifecycle healthy, 0 unacked rows)",
        "  delete: sync_state row 'cloud:scratch' (lifecycle healthy, 0 unacked rows)",
        "  keep: 'cloud:lm_studio_model' still holds 2 unacked rows "
        "(triage them with engram-canary inbox claim/drop --project lm-studio-model (2 rows))",
        "  keep: 'cloud:side-project' still holds 4 unacked rows "
        "(triage them with engram-canary inbox claim/drop --project side-project (4 rows))",
        "run again with --apply to make these changes (a backup is taken first)",
    ]
    applied = canary(inbox_world.world, "cleanup-phantoms", "--apply")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("backup: ")
    targets = {row[0] for row in query(db, "SELECT target_key FROM sync_state")}
    assert targets == {"cloud", "cloud:lm_studio_model", "cloud:side-project"}
    assert table_digest(db, "sync_mutations") == mutations


def test_mcp_saves_get_the_designs_keys(engram_world: EngramEnvironment) -> None:
    """engram mcp's own project detection: basename fallback -> unsorted, ENGRAM_PROJECT -> designation,
    git root -> slugged repo name (engram itself recorded 'ana', 'agent-ws', 'lm_studio_model')."""
    from engram_sync_kit.harness.engram.mcp_client import McpSession

    world = engram_world
    home = world.home / "ana"
    workspace = home / "agent-ws"
    workspace.mkdir(parents=True)
    repo = git_repo(home / "code" / "LM_Studio_Model")
    for cwd, extra_env in (
        (home, {}),
        (workspace, {}),
        (workspace, {"ENGRAM_PROJECT": "future-project"}),
        (repo, {}),
    ):
        session = McpSession(world, cwd, extra_env, world.root / "mcp.log")
        try:
            session.call_tool("mem_save", {"title": f"from {cwd.name}", "content": "c", "type": "manual"})
        finally:
            session.close()
    recorded = {row[0] for row in query(world.db_path, "SELECT project FROM sessions")}
    assert recorded == {"ana", "agent-ws", "future-project", "lm_studio_model"}
    entries = by_key(inbox_json(world))
    assert {key: entry["total"] for key, entry in entries.items()} == {
        "future-project": 2,
        "lm-studio-model": 2,
        "unsorted": 4,
    }
    assert entries["unsorted"]["cwds"] == {str(home): 2, str(workspace): 2}


def test_claim_commands_repeat_a_named_db_and_alias_file(inbox_world: InboxWorld) -> None:
    aliases = inbox_world.world.root / "my-aliases.yaml"
    aliases.write_text("keys:\n  side-project: main-proj\n")
    config = inbox_world.world.root / "canary.yaml"
    config.write_text(f"inbox:\n  aliases: {aliases}\n")
    entries = by_key(
        inbox_json(inbox_world.world, "--db", str(inbox_world.db), ENGRAM_CANARY_CONFIG=str(config))
    )
    assert entries["side-project"]["claim_command"] == (
        f"engram-canary --config {config} inbox claim --project side-project --as main-proj --db {inbox_world.db}"
    )
    claim = canary(inbox_world.world, *entries["side-project"]["claim_command"].split()[1:], "--apply")
    assert claim.returncode == 0, claim.stderr
    assert aliases.read_text() == "keys:\n  side-project: main-proj\n"
    assert not aliases_file(inbox_world.world).exists()
