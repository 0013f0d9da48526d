"""The smaller triage defects of issue 10 and the private, bounded backups, on rows the real engram v1.20 wrote."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from inbox_support import CANARY, canary, canary_env, db_digest, engram_ok, engram_serve, query, save

from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram


@dataclass
class Home:
    world: EngramEnvironment
    ana: Path
    scratch: Path

    @property
    def db(self) -> Path:
        return self.world.db_path

    @property
    def backups(self) -> Path:
        return self.db.parent / "engram-canary-backups"


@pytest.fixture
def home(engram_world: EngramEnvironment) -> Home:
    """`ana` saved from a dir named ana and `scratch` from scratch (both cwd-detected: key unsorted), two
    designated side-project saves, one save without a project; enrolled: client_portal and main-proj."""
    world = engram_world
    ana = world.root / "users" / "ana"
    scratch = world.root / "users" / "scratch"
    ana.mkdir(parents=True)
    scratch.mkdir()
    save(world, "ana", "home note", cwd=ana)
    save(world, "scratch", "scratch note", cwd=scratch)
    save(world, "side-project", "first", cwd=ana)
    save(world, "side-project", "second", cwd=ana)
    engram_ok(world, "save", "loose", "saved without --project", cwd=ana)
    engram_ok(world, "cloud", "enroll", "client_portal")
    engram_ok(world, "cloud", "enroll", "main-proj")
    home = Home(world, ana, scratch)
    home.db.chmod(0o600)
    return home


def refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert (result.returncode, result.stdout, result.stderr) == (3, "", f"engram-canary: error: {message}\n")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def log_entries(home: Home) -> list[dict[str, object]]:
    return [json.loads(line) for line in (home.backups / "triage-log.jsonl").read_text().splitlines()]


def test_backups_and_the_triage_log_are_private(home: Home) -> None:
    result = canary(home.world, "inbox", "claim", "--project", "side-project", "--as", "main-proj", "--apply")
    assert result.returncode == 0, result.stderr
    backup = Path(result.stdout.splitlines()[0].removeprefix("backup: "))
    assert (mode(home.db), mode(home.backups), mode(backup)) == (0o600, 0o700, 0o600)
    assert mode(home.backups / "triage-log.jsonl") == 0o600
    [entry] = log_entries(home)
    assert entry["backup"] == str(backup)
    assert entry["backup_protects"] == {
        "db": str(home.db.resolve()),
        "state": "the database as it was just before this claim",
        "restore": f"stop engram, then copy {backup} over {home.db.resolve()}",
    }


def test_an_older_wide_backup_dir_and_log_are_tightened(home: Home) -> None:
    home.backups.mkdir(mode=0o755)
    home.backups.chmod(0o755)
    (home.backups / "triage-log.jsonl").write_text("")
    (home.backups / "triage-log.jsonl").chmod(0o644)
    assert canary(home.world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
    assert (mode(home.backups), mode(home.backups / "triage-log.jsonl")) == (0o700, 0o600)


def test_keep_backups_prunes_the_oldest_and_the_log_says_so(home: Home) -> None:
    keep_one = home.world.root / "canary.yaml"
    keep_one.write_text("backups:\n  keep: 1\n")
    runs = (
        ("inbox", "drop", "--project", "side-project", "--noise"),
        ("inbox", "drop", "--unattributed"),
        ("inbox", "drop", "--project", "side-project"),
    )
    for run in runs:
        result = canary(home.world, *run, "--apply", ENGRAM_CANARY_CONFIG=str(keep_one))
        assert result.returncode == 0, result.stderr
    entries = log_entries(home)
    # The three applies are one series (issue 35 item 4): its first backup, the state from before it,
    # stays besides the newest; the middle one goes.
    assert result.stdout.splitlines()[-1] == (
        f"pruned 1 old backups (backups.keep 1); kept {entries[0]['backup']}, from before this series"
    )
    kept = sorted(str(path) for path in home.backups.glob("*.db"))
    assert kept == [entries[0]["backup"], entries[2]["backup"]]
    assert [len(entry["pruned_backups"]) for entry in entries] == [0, 0, 1]  # type: ignore[arg-type]
    assert entries[2]["pruned_backups"] == [entries[1]["backup"]]
    keep_one.write_text("backups:\n  keep: 0\n")
    bad = canary(home.world, "inbox", "drop", "--unattributed", ENGRAM_CANARY_CONFIG=str(keep_one))
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        3,
        "",
        f"engram-canary: error: {keep_one}:2: backups.keep: Input should be greater than or equal to 1\n",
    )


def test_a_failed_apply_removes_its_backup(home: Home) -> None:
    before = db_digest(home.db)
    holder = sqlite3.connect(str(home.db), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the 5 s busy timeout
        result = canary(home.world, "inbox", "drop", "--unattributed", "--apply")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    refused(result, f"{home.db}: the change was rolled back (database is locked); nothing was changed")
    assert list(home.backups.glob("*.db")) == []
    assert db_digest(home.db) == before


def test_a_relative_cwd_is_resolved_against_the_callers_directory(home: Home) -> None:
    result = subprocess.run(
        [str(CANARY), "inbox", "claim", "--project", "unsorted", "--cwd", "scratch", "--as", "main-proj"],
        env=canary_env(home.world),
        cwd=home.scratch.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        f"dry run: claim 1 rows of inbox key 'unsorted' with cwd {home.scratch} (memories: observations and "
        "relations) into enrolled project 'main-proj'; nothing was written"
    )


def test_claiming_unsorted_across_directories_needs_all_cwds(home: Home) -> None:
    refused(
        canary(home.world, "inbox", "claim", "--project", "unsorted", "--as", "main-proj", "--apply"),
        f"inbox key 'unsorted' holds rows from 2 directories ({home.ana}, {home.scratch}); "
        "pick one with --cwd, or pass --all-cwds to claim them all",
    )
    result = canary(home.world, "inbox", "claim", "--project", "unsorted", "--as", "main-proj", "--all-cwds")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("dry run: claim 2 rows of inbox key 'unsorted' (memories: ")


def test_dropping_unsorted_memories_across_directories_needs_all_cwds(home: Home) -> None:
    refused(
        canary(home.world, "inbox", "drop", "--project", "unsorted"),
        f"inbox key 'unsorted' holds rows from 2 directories ({home.ana}, {home.scratch}); "
        "pick one with --cwd, or pass --all-cwds to drop them all",
    )
    result = canary(home.world, "inbox", "drop", "--project", "unsorted", "--all-cwds")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("dry run: drop "), result.stdout
    noise = canary(home.world, "inbox", "drop", "--project", "unsorted", "--noise")  # telemetry: no guard
    assert noise.returncode == 0, noise.stderr


def test_a_near_miss_project_name_gets_a_did_you_mean(home: Home) -> None:
    refused(
        canary(home.world, "inbox", "claim", "--project", "side-project", "--as", "client-portal"),
        "cannot claim into 'client-portal': it is not enrolled (enrolled: client_portal, main-proj); "
        "did you mean 'client_portal'? else run: engram cloud enroll client-portal",
    )


def test_a_new_aliases_file_is_created(home: Home) -> None:
    new_file = home.world.root / "fresh dir" / "aliases.yaml"
    config = home.world.root / "canary.yaml"
    config.write_text(f"inbox:\n  aliases: {new_file}\n")
    args = ("--project", "side-project", "--as", "main-proj", "--apply")
    result = canary(home.world, "--config", str(config), "inbox", "claim", *args)
    assert result.returncode == 0, result.stderr
    assert new_file.read_text() == 'keys:\n  "side-project": "main-proj"\n'
    assert f"alias registered: keys 'side-project' -> 'main-proj' in {new_file}" in result.stdout


def test_claim_keeps_telemetry_in_the_inbox_and_says_how_to_drop_it(home: Home) -> None:
    result = canary(home.world, "inbox", "claim", "--project", "side-project", "--as", "main-proj")
    assert result.returncode == 0, result.stderr
    assert (
        "  keep: 2 session/prompt rows stay in the inbox (telemetry is never sent to the cloud by design); "
        "drop them (engram-canary inbox drop --project side-project --noise) or claim with --with-telemetry"
    ) in result.stdout.splitlines()


def test_the_cleanup_hint_names_the_key_the_rows_really_have(home: Home) -> None:
    result = canary(home.world, "cleanup-phantoms")
    assert result.returncode == 0, result.stderr
    assert (
        "  keep: 'cloud:ana' still holds 2 unacked rows (triage them with engram-canary inbox claim/drop "
        f"--project unsorted --cwd {home.ana} (2 rows))"
    ) in result.stdout.splitlines()


def test_drop_unattributed_acks_the_rows_without_a_project_as_discarded(home: Home) -> None:
    seqs = [
        row[0] for row in query(home.db, "SELECT seq FROM sync_mutations WHERE project = '' ORDER BY seq")
    ]
    dry = canary(home.world, "inbox", "drop", "--unattributed")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == (
        "dry run: drop 2 legacy-lane rows without a project; nothing was written"
    )
    assert canary(home.world, "inbox", "drop", "--unattributed", "--apply").returncode == 0
    assert query(home.db, "SELECT COUNT(*) FROM sync_mutations WHERE project = '' AND acked_at IS NULL") == [
        (0,)
    ]
    [entry] = log_entries(home)
    assert (entry["discarded"], entry["acked_seqs"], entry["rows"]) == (
        True,
        seqs,
        "legacy-lane rows without a project",
    )
    refused(
        canary(home.world, "inbox", "drop", "--unattributed", "--apply"),
        "nothing to drop: no unacked legacy-lane rows without a project",
    )


def test_drop_seq_takes_exact_undeliverable_rows(home: Home) -> None:
    [(scratch_seq,)] = query(
        home.db, "SELECT seq FROM sync_mutations WHERE project = 'scratch' AND entity = 'observation'"
    )
    result = canary(home.world, "inbox", "drop", "--seq", f"{scratch_seq}", "--apply")
    assert result.returncode == 0, result.stderr
    assert query(home.db, "SELECT acked_at IS NOT NULL FROM sync_mutations WHERE seq = ?", scratch_seq) == [
        (1,)
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--seq", "1,x"), "--seq expects positive row numbers separated by commas (N[,N...]), got 'x'"),
        (("--seq", "0"), "--seq expects positive row numbers separated by commas (N[,N...]), got '0'"),
        (("--seq", "99999"), "seq 99999: no such row in sync_mutations (nothing was changed)"),
        (
            ("--seq", "1", "--noise"),
            "--noise, --cwd and --all-cwds narrow a --project selection; they do not apply to --seq",
        ),
        ((), "drop needs exactly one of --project KEY, --unattributed or --seq N[,N...]"),
        (
            ("--unattributed", "--seq", "1"),
            "drop needs exactly one of --project KEY, --unattributed or --seq N[,N...]",
        ),
    ],
    ids=["not-a-number", "zero", "unknown", "noise-with-seq", "no-selector", "two-selectors"],
)
def test_drop_refuses_bad_selections_in_one_line(home: Home, args: tuple[str, ...], message: str) -> None:
    before = db_digest(home.db)
    refused(canary(home.world, "inbox", "drop", *args, "--apply"), message)
    assert db_digest(home.db) == before
    assert not home.backups.exists()


def test_drop_seq_never_takes_a_deliverable_or_acked_row(home: Home) -> None:
    engram_ok(home.world, "save", "deliverable", "content", "--project", "main-proj", cwd=home.ana)
    [(good,)] = query(
        home.db, "SELECT seq FROM sync_mutations WHERE project = 'main-proj' AND entity = 'observation'"
    )
    before = db_digest(home.db)
    refused(
        canary(home.world, "inbox", "drop", "--seq", str(good), "--apply"),
        f"seq {good} is deliverable (project 'main-proj' is enrolled and the cloud accepts it); "
        "drop selects only rows engram cannot deliver",
    )
    assert db_digest(home.db) == before
    [(loose,)] = query(
        home.db, "SELECT seq FROM sync_mutations WHERE project = '' AND entity = 'observation'"
    )
    assert canary(home.world, "inbox", "drop", "--seq", str(loose), "--apply").returncode == 0
    [(acked_at,)] = query(home.db, "SELECT acked_at FROM sync_mutations WHERE seq = ?", loose)
    refused(
        canary(home.world, "inbox", "drop", "--seq", str(loose), "--apply"),
        f"seq {loose} is already acked (at {acked_at}); nothing was changed",
    )


def test_an_alias_file_that_cannot_be_written_refuses_before_any_write(home: Home) -> None:
    """The alias is registered after the commit, so an unwritable place must stop the claim first."""
    blocker = home.world.root / "a-file"
    blocker.write_text("")
    before = db_digest(home.db)
    aliases = blocker / "aliases.yaml"
    config = home.world.root / "canary.yaml"
    config.write_text(f"inbox:\n  aliases: {aliases}\n")
    args = ("--project", "side-project", "--as", "main-proj", "--apply")
    refused(
        canary(home.world, "--config", str(config), "inbox", "claim", *args),
        f"{aliases}: the alias file cannot be written there; nothing was changed "
        "(set inbox.aliases in the config file)",
    )
    assert db_digest(home.db) == before
    assert not home.backups.exists()


def test_claim_repair_copies_a_directory_less_session_with_the_directory_engram_recorded(
    engram_world: EngramEnvironment,
) -> None:
    """POST /sessions without a directory, then again with one: engram updates the sessions row but the
    first journaled upsert stays directory-less. Claim refuses it, and offers --repair."""
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    workdir = world.root / "répertoire de travail"
    workdir.mkdir()
    with engram_serve(world) as server:
        server.post("/sessions", {"id": "s-late", "project": "side-project"})
        server.post("/sessions", {"id": "s-late", "project": "side-project", "directory": str(workdir)})
        assert not server.failures
    [first, _] = [row[0] for row in query(world.db_path, "SELECT seq FROM sync_mutations ORDER BY seq")]
    args = ("inbox", "claim", "--project", "side-project", "--as", "main-proj", "--with-telemetry")
    dry = canary(world, *args)
    assert dry.returncode == 0, dry.stderr
    assert (
        f"  refuse: seq {first} session s-late upsert: the cloud would answer 500 session payload directory is "
        f"required for upsert; its directory {str(workdir)!r} is known from the sessions table: run again with "
        f"--repair to copy it with that directory, or drop it (engram-canary inbox drop --seq {first})"
    ) in dry.stdout.splitlines()
    repaired = canary(world, *args, "--repair", "--apply")
    assert repaired.returncode == 0, repaired.stderr
    copies = query(
        world.db_path, "SELECT payload FROM sync_mutations WHERE project = 'main-proj' ORDER BY seq"
    )
    assert [json.loads(payload)["directory"] for (payload,) in copies] == [str(workdir), str(workdir)]
    doctor = json.loads(engram_ok(world, "doctor", "--json", "--check", "sync_mutation_required_fields"))
    assert [check["result"] for check in doctor["checks"]] == ["ok"]
