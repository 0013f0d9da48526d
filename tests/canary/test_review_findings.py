"""Defects found by an independent review that used the kit as an engram power user would (issues 10, 12
and 18): hand-edited, huge, deep and out-of-range files and flags, damaged databases, and acknowledgements
that must alarm again. Each must give one line and a clear exit code, never a traceback.

Databases come from tests/engram_schemas/builder.py (v1.20.0's dumped schema with simulated rows) unless a
test needs the real engram; rows written straight into engram's tables are SIMULATIONS OF LEGACY DATA and
say so where they happen.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from canary_support import CANARY, WatchProcess, canary_env
from click.testing import CliRunner, Result
from engram_schemas.builder import ENROLLED, V120, build
from inbox_support import canary, engram_ok, engram_serve, save

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.mcp_client import McpSession

DEEP = 100_000


def invoke(home: Path, *args: str, **env: str | None) -> Result:
    runner = CliRunner(mix_stderr=False)
    environment: dict[str, str | None] = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "ENGRAM_CANARY_STATE_DIR": str(home / "state" / "engram-canary"),
        "ENGRAM_DATA_DIR": str(home / "data"),
        "ENGRAM_CLOUD_SERVER": "",
        "ENGRAM_CLOUD_TOKEN": "",
        "SSL_CERT_FILE": "",
        **env,
    }
    return runner.invoke(cli, list(args), prog_name="engram-canary", env=environment)


def default_baseline(home: Path) -> Path:
    """The baseline next to the default config (XDG_CONFIG_HOME is home/config in `invoke`)."""
    return home / "config" / "engram-canary" / "baseline.json"


def default_config(home: Path, text: str) -> Path:
    config = home / "config" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")
    return config


def one_line_error(result: Result, exit_code: int = 3) -> str:
    """The result is an exit with `exit_code` and exactly one line of output, never a traceback."""
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), f"{type(result.exception).__name__}: {result.exception}"
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    text = (result.stderr or result.stdout).strip()
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    build(V120, tmp_path / "data" / "engram.db")
    return tmp_path


def db_of(home: Path) -> Path:
    return home / "data" / "engram.db"


# --- issue 12: acknowledgements and the baseline file ---------------------------------------------------


@pytest.mark.parametrize("expires", ["99999999999d", "9999-12-31", "0001-01-01T00:00:00+14:00"])
def test_an_expiry_beyond_the_calendar_is_one_line(home: Path, expires: str) -> None:
    baseline = default_baseline(home)
    result = invoke(home, "baseline", "--db", str(db_of(home)), "--expires", expires)
    line = one_line_error(result)
    assert line.startswith(f"engram-canary: error: --expires {expires!r}: "), line
    assert not baseline.exists()


def recorded_baseline(home: Path) -> tuple[Path, dict[str, Any]]:
    baseline = default_baseline(home)
    recorded = invoke(home, "baseline", "--db", str(db_of(home)))
    assert recorded.exit_code == 0, recorded.stderr
    document = json.loads(baseline.read_text(encoding="utf-8"))
    return baseline, document


def with_expiry(baseline: Path, document: dict[str, Any], expires: str) -> None:
    for database in document["databases"].values():
        for acknowledgement in database["acknowledgements"]:
            acknowledgement["expires"] = expires
    baseline.write_text(json.dumps(document), encoding="utf-8")


def test_a_hand_edited_expiry_that_is_no_time_is_one_line_unknown(home: Path) -> None:
    baseline, document = recorded_baseline(home)
    with_expiry(baseline, document, "next week")
    result = invoke(home, "check", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith(f"ENGRAM-CANARY UNKNOWN - {baseline}: not a readable canary baseline ("), line
    assert "expires" in line


def test_a_hand_edited_expiry_without_a_zone_is_utc(home: Path) -> None:
    """As --expires reads an ISO time without a zone: UTC (it was a TypeError traceback)."""
    baseline, document = recorded_baseline(home)
    silenced = invoke(home, "check", "--db", str(db_of(home)))
    assert silenced.exit_code == 0, silenced.stdout
    with_expiry(baseline, document, "2999-01-01T00:00:00")
    still = invoke(home, "check", "--db", str(db_of(home)))
    assert (still.exit_code, still.stdout.splitlines()[0]) == (0, silenced.stdout.splitlines()[0])
    assert "until 2999-01-01T00:00:00Z" in still.stdout
    with_expiry(baseline, document, "2001-01-01T00:00:00")
    lapsed = invoke(home, "check", "--db", str(db_of(home)), "--format", "json")
    assert lapsed.exit_code != 0, lapsed.stdout
    realarms = {finding["realarm"] for finding in json.loads(lapsed.stdout)["findings"]}
    assert realarms == {"acknowledgement expired at 2001-01-01T00:00:00Z"}


def test_a_deeply_nested_baseline_is_one_line_unknown(home: Path) -> None:
    baseline = default_baseline(home)
    baseline.parent.mkdir(parents=True)
    baseline.write_text("[" * DEEP + "]" * DEEP, encoding="utf-8")
    result = invoke(home, "check", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith(f"ENGRAM-CANARY UNKNOWN - {baseline}: not a readable canary baseline ("), line


# --- config, alias and key-map files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["a: &a [*a]\n", "inbox: " + "[" * 20_000 + "]" * 20_000 + "\n"],
    ids=["recursive-alias", "deep"],
)
def test_a_recursive_or_deep_yaml_config_is_one_line_unknown(home: Path, text: str) -> None:
    config = home / "config.yaml"
    config.write_text(text, encoding="utf-8")
    result = invoke(home, "--config", str(config), "check", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith(f"ENGRAM-CANARY UNKNOWN - {config}:"), line
    assert "invalid YAML" in line


def test_a_deep_alias_file_is_one_line(home: Path) -> None:
    aliases = home / "aliases.yaml"
    aliases.write_text("[" * 20_000 + "]" * 20_000 + "\n", encoding="utf-8")
    default_config(home, f"inbox:\n  aliases: {aliases}\n")
    result = invoke(home, "inbox", "list", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith(f"engram-canary: error: {aliases}:"), line


@pytest.mark.parametrize("value", ["1e300", ".inf"])
def test_an_unsorted_window_beyond_the_calendar_is_a_config_error(home: Path, value: str) -> None:
    config = home / "config.yaml"
    config.write_text(f"inbox:\n  unsorted_window_days: {value}\n", encoding="utf-8")
    result = invoke(home, "--config", str(config), "check", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith(f"ENGRAM-CANARY UNKNOWN - {config}:2: inbox.unsorted_window_days: "), line


def test_a_deeply_nested_key_map_is_one_line(home: Path) -> None:
    key_map = home / "keys.json"
    key_map.write_text("[" * DEEP, encoding="utf-8")
    checked = invoke(home, "check", "--db", str(db_of(home)), ENGRAM_CANARY_KEY_MAP=str(key_map))
    assert one_line_error(checked).startswith(
        f"ENGRAM-CANARY UNKNOWN - --key-map {key_map}: "
    ), checked.stdout
    listed = invoke(home, "inbox", "list", "--db", str(db_of(home)), ENGRAM_CANARY_KEY_MAP=str(key_map))
    assert one_line_error(listed).startswith(f"engram-canary: error: --key-map {key_map}: "), listed.stderr


# --- issue 10: rows engram's tables hold that no JSON reader can take ------------------------------------


def simulate_legacy_row(db: Path, project: str, payload: str) -> int:
    """SIMULATION OF LEGACY DATA: one pending legacy-lane row with this payload, straight into the table."""
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        cursor = connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
            "occurred_at) VALUES ('cloud', 'observation', 'obs-deep', 'upsert', ?, 'local', ?, "
            "datetime('now'))",
            (payload, project),
        )
        return int(cursor.lastrowid or 0)


def test_a_payload_nested_too_deep_blocks_the_lane_and_is_named_not_a_traceback(home: Path) -> None:
    seq = simulate_legacy_row(db_of(home), ENROLLED, "[" * DEEP + "]" * DEEP)
    checked = invoke(home, "check", "--full", "--db", str(db_of(home)), "--format", "json")
    assert checked.exception is None or isinstance(checked.exception, SystemExit), repr(checked.exception)
    assert checked.exit_code == 2, checked.stdout
    [lane] = [f for f in json.loads(checked.stdout)["findings"] if f["check"] == "legacy_lane_blocked"]
    assert lane["evidence"]["blocking_seqs"] == [seq]
    assert lane["evidence"]["reason"] == "400 invalid request body: payload is not valid JSON"
    repaired = invoke(home, "repair", "--db", str(db_of(home)))
    assert repaired.exit_code == 0, repaired.stderr
    assert f"  refuse: seq {seq} observation obs-deep upsert: the cloud would answer 400 " in repaired.stdout


def damage_page(db: Path, page: int) -> None:
    """SIMULATION OF A DAMAGED FILE: one page of the database overwritten with noise."""
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big") or 65536
    data[page * size : (page + 1) * size] = b"\xa5" * size
    db.write_bytes(bytes(data))


def test_a_damaged_database_is_one_line_for_every_reading_command(home: Path) -> None:
    db = db_of(home)
    with closing(sqlite3.connect(str(db))) as connection:
        connection.execute("PRAGMA journal_mode=DELETE")
        [(pages,)] = connection.execute("PRAGMA page_count").fetchall()
    pristine = db.read_bytes()
    commands = (
        ("check", "--full"),
        ("repair",),
        ("inbox", "list"),
        ("inbox", "drop", "--unattributed"),
        ("inbox", "export-keys"),
        ("cleanup-phantoms",),
    )
    for page in range(1, pages):  # page 0 holds the header: the open itself refuses that
        db.write_bytes(pristine)
        damage_page(db, page)
        for command in commands:
            result = invoke(home, *command, "--db", str(db))
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                page,
                command,
                repr(result.exception),
            )
            assert result.exit_code in (0, 1, 2, 3), (page, command, result.exit_code)
            if result.exit_code == 3:
                assert len((result.stderr or result.stdout).strip().splitlines()) == 1, (page, command)


# --- issue 18: reconcile's inputs ------------------------------------------------------------------------


def token_file(home: Path) -> Path:
    path = home / "token"
    path.write_text("t\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "options",
    [
        ("--since", "99999999999d"),
        ("--since", "0001-01-01"),
        ("--timeout", "inf"),
        ("--timeout", "nan"),
        ("--timeout", "1e308"),
    ],
    ids=["since-huge", "since-year-1", "timeout-inf", "timeout-nan", "timeout-huge"],
)
def test_reconcile_options_out_of_range_are_one_line_unknown(home: Path, options: tuple[str, str]) -> None:
    result = invoke(
        home,
        "reconcile",
        "--db",
        str(db_of(home)),
        "--cloud-url",
        "https://127.0.0.1:1",
        "--cloud-token-file",
        str(token_file(home)),
        *options,
    )
    line = one_line_error(result)
    assert line.startswith(("ENGRAM-CANARY-RECONCILE UNKNOWN - ", "engram-canary reconcile: error: ")), line
    assert options[0] in line, line


def test_reconcile_a_cloud_url_that_does_not_parse_is_one_line_unknown(home: Path) -> None:
    result = invoke(
        home,
        "reconcile",
        "--db",
        str(db_of(home)),
        "--cloud-url",
        "https://[::1",
        "--cloud-token-file",
        str(token_file(home)),
    )
    assert one_line_error(result) == (
        "ENGRAM-CANARY-RECONCILE UNKNOWN - cloud URL 'https://[::1' (from --cloud-url) is not an http(s) URL "
        "with a host"
    )


@pytest.mark.parametrize("content", [b"[" * DEEP, b"\xff\xfe{"], ids=["deep", "not-utf8"])
def test_reconcile_a_deeply_nested_or_non_utf8_cloud_json_is_one_line_unknown(
    home: Path, content: bytes
) -> None:
    (home / "data" / "cloud.json").write_bytes(content)
    result = invoke(home, "reconcile", "--db", str(db_of(home)))
    line = one_line_error(result)
    assert line.startswith("ENGRAM-CANARY-RECONCILE UNKNOWN - "), line
    assert "cloud.json" in line, line


# --- watch's periods -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ("full_recheck_seconds: .inf", "watch.full_recheck_seconds"),
        ("full_recheck_seconds: 1e308", "watch.full_recheck_seconds"),
        ("poll: true\n  poll_interval_seconds: 1e308", "watch.poll_interval_seconds"),
    ],
    ids=["full-every-inf", "full-every-huge", "poll-interval-huge"],
)
def test_watch_periods_beyond_the_clock_are_one_line(home: Path, settings: str, key: str) -> None:
    config = default_config(home, f"watch:\n  {settings}\n")
    done = subprocess.run(
        [str(CANARY), "watch", "--db", str(db_of(home))],
        env=canary_env(home / "config", HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[0].startswith(f"engram-canary: error: {config}:"), lines[0]
    assert f": {key}: Input should be less than or equal to " in lines[0], lines[0]


# --- issue 12 on the real engram: an acknowledged lane block alarms again when it grows ------------------


@pytest.mark.engram
def test_an_acknowledged_lane_block_alarms_again_when_more_rows_wait_behind_it(
    engram_world: EngramEnvironment,
) -> None:
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    engram_ok(world, "save", "loose", "saved without --project", cwd=world.home)
    save(world, "main-proj", "held one", cwd=world.home)
    recorded = canary(world, "baseline")
    assert recorded.returncode == 0, recorded.stderr
    lane_line = next(line for line in recorded.stdout.splitlines() if "_lane_blocked" in line)
    assert not lane_line.endswith("(0 rows)"), recorded.stdout
    assert canary(world, "check").returncode == 0

    save(world, "main-proj", "held two", cwd=world.home)
    checked = canary(world, "check", "--format", "json")
    assert checked.returncode == 2, checked.stdout
    [lane] = [f for f in json.loads(checked.stdout)["findings"] if f["check"].endswith("_lane_blocked")]
    assert lane["new"] is True
    assert lane["realarm"].startswith(f"grew from {lane['acknowledgement']['size']} to "), lane["realarm"]
    assert lane["size"] > lane["acknowledgement"]["size"]


# --- issue 18 after issue 10: rows the kit's own triage acked are not "lost" ------------------------------


@pytest.mark.engram
def test_rows_that_triage_acked_are_never_reported_lost(engram_world: EngramEnvironment) -> None:
    """repair acks the refused original (its corrected copy is what the cloud gets) and drop --seq acks a
    row as discarded: reconcile must not call either one lost, as it did (CRITICAL after following the
    kit's own advice)."""
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    with engram_serve(world) as server:
        server.post("/sessions", {"id": "s-nodir", "project": "main-proj"})
        server.post("/sessions", {"id": "s-late", "project": "main-proj"})
        server.post("/sessions", {"id": "s-late", "project": "main-proj", "directory": str(world.home)})
        assert set(server.statuses) <= {200, 201}, server.failures
    [late, nodir] = [
        int(seq)
        for (seq,) in sqlite3.connect(f"file:{world.db_path}?mode=ro", uri=True).execute(
            "SELECT min(seq) FROM sync_mutations WHERE entity = 'session' GROUP BY entity_key ORDER BY entity_key"
        )
    ]
    repaired = canary(world, "repair", "--apply")  # on v2/v3 the refusal ends the test (schema_under_test)
    assert repaired.returncode == 0, repaired.stderr
    dropped = canary(world, "inbox", "drop", "--seq", str(nodir), "--apply")
    assert dropped.returncode == 0, dropped.stderr
    with start_fake_cloud(FakeCloudConfig(token="t", tls=True, server_version="v1.20")) as cloud:
        ran = canary(
            world,
            "reconcile",
            "--format",
            "json",
            ENGRAM_CLOUD_SERVER=cloud.base_url,
            ENGRAM_CLOUD_TOKEN="t",
            SSL_CERT_FILE=str(cloud.ca_file),
        )
    document = json.loads(ran.stdout)
    assert [row["seq"] for row in document["lost"]] == [], document["lost"]
    assert (ran.returncode, document["summary"]["lost"], document["summary"]["triaged"]) == (0, 0, 2)
    [lane] = [lane for lane in document["lanes"] if lane["project"] == "main-proj"]
    assert (lane["triaged"], lane["lost"]) == (2, 0)
    assert late != nodir


# --- one value, one line: a project name with a newline cannot forge output lines ------------------------

# Observed on engram v1.20.0: `POST /sessions {"project": "evil\nENGRAM-CANARY OK - forged"}` is accepted,
# and the name (lowercased) becomes a project and a `cloud:<project>` sync target.
FORGED = "evil\nengram-canary ok - forged"


def simulate_forged_project(db: Path) -> None:
    """SIMULATION OF LEGACY DATA: the rows engram v1.20 writes for a save into that project."""
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        connection.execute("BEGIN")
        connection.execute(
            "INSERT INTO sync_state (target_key, lifecycle, updated_at) VALUES (?, 'pending', datetime('now'))",
            (f"cloud:{FORGED}",),
        )
        connection.execute(
            "INSERT INTO sessions (id, project, directory, started_at) VALUES ('s-forged', ?, '/tmp', "
            "datetime('now'))",
            (FORGED,),
        )
        payload = json.dumps({"id": "s-forged", "project": FORGED, "directory": "/tmp"})
        connection.execute(
            "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
            "occurred_at) VALUES ('cloud', 'session', 's-forged', 'upsert', ?, 'local', ?, datetime('now'))",
            (payload, FORGED),
        )
        connection.execute("COMMIT")


def no_forged_line(text: str) -> None:
    lines = text.splitlines()
    assert not [line for line in lines if line.lstrip("<0123456789>").startswith("engram-canary ok")], text
    assert any("evil\\nengram-canary ok - forged" in line for line in lines), text


def test_a_project_name_with_a_newline_never_forges_a_line(home: Path) -> None:
    db = db_of(home)
    simulate_forged_project(db)
    checked = invoke(home, "check", "--db", str(db), "--no-baseline")
    assert checked.exit_code == 1, checked.stdout
    no_forged_line(checked.stdout)
    listed = invoke(home, "inbox", "list", "--db", str(db))
    assert listed.exit_code == 0, listed.stderr
    no_forged_line(listed.stdout)
    recorded = invoke(home, "baseline", "--db", str(db))
    assert recorded.exit_code == 0, recorded.stderr
    no_forged_line(recorded.stdout)
    for triage in (
        ("inbox", "claim", "--project", FORGED, "--as", ENROLLED, "--with-telemetry"),
        ("inbox", "drop", "--project", FORGED),
        ("cleanup-phantoms",),
    ):
        planned = invoke(home, *triage, "--db", str(db))
        assert planned.exit_code == 0, (triage, planned.stderr)
        no_forged_line(planned.stdout)
    watcher = WatchProcess(["--db", str(db), "--no-baseline"], home / "config", HOME=str(home))
    try:
        watcher.wait_started()
        watcher.wait_for(lambda line: "NEW foreign sync target cloud:evil" in line, what="the alert")
    finally:
        assert watcher.stop() == 0
    no_forged_line("\n".join(watcher.snapshot()))


# --- watch: a database file that goes away or is replaced is not watched as a ghost ------------------------


def test_watch_says_unknown_when_the_database_goes_away_and_reads_its_replacement(
    home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    db = db_of(home)
    default_config(home, "watch:\n  full_recheck_seconds: 0.2\n")
    watcher = WatchProcess(["--db", str(db), "--no-baseline"], home / "config", HOME=str(home))
    try:
        watcher.wait_started()
        db.unlink()
        gone = watcher.wait_for(lambda line: "UNKNOWN" in line, what="the database is gone")
        assert (
            gone == f"engram-canary: UNKNOWN - {db}: no such file or directory; engram's database is gone"
        ), gone
        replacement = tmp_path_factory.mktemp("replacement") / "engram.db"
        build(V120, replacement)
        simulate_forged_project(replacement)  # one more foreign target than the first file had
        replacement.replace(db)
        watcher.wait_for(
            lambda line: "NEW foreign sync target cloud:evil" in line, what="the new file's target"
        )
    finally:
        assert watcher.stop() == 0


@pytest.mark.parametrize("check", ["full", "incremental"])
def test_a_database_that_vanishes_between_the_look_and_the_open_is_gone(
    home: Path, tmp_path: Path, check: str
) -> None:
    """Failed first (a CI flake of the test above): the file was there when the watcher looked and gone when
    it opened it, and the line said "pass --db or set ENGRAM_DATA_DIR" instead of "the database is gone"."""
    from engram_sync_kit.canary.config import CanaryConfig
    from engram_sync_kit.canary.watch import FileState, Watcher, WatchOptions

    db = db_of(home)
    stream = io.StringIO()
    watcher = Watcher(WatchOptions(db_path=db, config=CanaryConfig(), baseline=None, stream=stream))
    watcher._full_check(initial=True)
    db.unlink()
    if check == "full":
        watcher._full_check(initial=False, state=FileState.WRITTEN)  # what it saw a moment before
    else:
        assert not watcher._incremental_check()
    assert stream.getvalue().splitlines()[-1] == (
        f"engram-canary: UNKNOWN - {db}: no such file or directory; engram's database is gone"
    )


# --- a relative --cwd is the directory the shell is in, as engram records it ------------------------------


def test_a_relative_cwd_inside_a_symlinked_directory_is_the_path_engram_recorded(home: Path) -> None:
    """engram (Go's os.Getwd) records $PWD, the path through the symlink, when the shell is in a linked
    directory (observed: `cd link && engram save ...` gives sessions.directory = .../link). `--cwd .`
    there must mean that path, not the symlink's target."""
    real = home / "real dir"
    real.mkdir()
    link = home / "lnk"
    link.symlink_to(real)
    db = db_of(home)
    with closing(sqlite3.connect(str(db), isolation_level=None)) as connection:
        # SIMULATION OF LEGACY DATA: the rows of an MCP save made in the linked directory.
        connection.execute("BEGIN")
        connection.execute(
            "INSERT INTO sessions (id, project, directory, started_at) VALUES ('s-lnk', 'lnk', ?, "
            "datetime('now'))",
            (str(link),),
        )
        for entity, key, payload in (
            ("session", "s-lnk", {"id": "s-lnk", "project": "lnk", "directory": str(link)}),
            (
                "observation",
                "obs-lnk",
                {
                    "sync_id": "obs-lnk",
                    "session_id": "s-lnk",
                    "type": "manual",
                    "title": "saved via the link",
                    "content": "c",
                    "project": "lnk",
                    "scope": "project",
                },
            ),
        ):
            connection.execute(
                "INSERT INTO sync_mutations (target_key, entity, entity_key, op, payload, source, project, "
                "occurred_at) VALUES ('cloud', ?, ?, 'upsert', ?, 'local', 'lnk', datetime('now'))",
                (entity, key, json.dumps(payload)),
            )
        connection.execute("COMMIT")
    done = subprocess.run(
        [str(CANARY), "inbox", "show", "unsorted", "--cwd", ".", "--db", str(db)],
        env=canary_env(home / "config", HOME=str(home), PWD=str(link)),
        cwd=real,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "saved via the link" in done.stdout


# --- XDG base directories: a relative path is invalid and ignored (the XDG spec) --------------------------


def test_relative_xdg_directories_are_ignored(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`XDG_CONFIG_HOME=relative` made check miss the baseline in ~/.config (every finding new again) and
    `XDG_STATE_HOME=relative` wrote the canary's state into whatever directory cron ran it from."""
    recorded = invoke(home, "baseline", "--db", str(db_of(home)))
    assert recorded.exit_code == 0, recorded.stderr
    (home / ".config" / "engram-canary").mkdir(parents=True)
    default_baseline(home).replace(home / ".config" / "engram-canary" / "baseline.json")
    elsewhere = home / "cron cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    checked = invoke(
        home,
        "check",
        "--db",
        str(db_of(home)),
        XDG_CONFIG_HOME="relative-config",
        XDG_STATE_HOME="relative-state",
        ENGRAM_CANARY_STATE_DIR=None,
    )
    assert checked.exit_code == 0, checked.stdout
    assert list(elsewhere.iterdir()) == []
    assert (home / ".local" / "state" / "engram-canary").is_dir()


# --- install-systemd: a value with a line break cannot add a directive to a unit --------------------------


@pytest.mark.parametrize(
    "options",
    [
        ("--db", "/tmp/x y\nExecStartPre=/bin/evil"),
        ("--on-calendar", "*:0/15\nExecStartPre=/bin/evil"),
        ("exec", "logger alert\nExecStartPre=/bin/evil"),
        ("ping_url", "https://hc.example/x\rExecStartPre=/bin/evil"),
        ("--system", "--user", "me\nExecStartPre=/bin/evil"),
    ],
    ids=["db", "on-calendar", "exec", "ping-url", "user"],
)
def test_install_systemd_refuses_a_value_that_would_add_a_unit_line(
    home: Path, options: tuple[str, ...]
) -> None:
    if options[0] in ("exec", "ping_url"):
        default_config(home, f"watch:\n  {options[0]}: {json.dumps(options[1])}\n")
        options = ()
    result = invoke(home, "install-systemd", "--print", "--db", str(db_of(home)), *options)
    line = one_line_error(result)
    assert line.startswith("engram-canary: error: "), line
    assert "line break or control character" in line, line
    assert "ExecStartPre" not in result.stdout


# --- issue 12, Stage A: a repo renamed before the canary ever ran, saved from a subdirectory ---------------


@pytest.mark.engram
def test_a_repo_renamed_before_the_canary_ran_goes_to_unsorted_even_when_saved_from_a_subdirectory(
    engram_world: EngramEnvironment,
) -> None:
    """A recorded project that names an ancestor of a missing cwd is no proof of a git root: the design
    measured one non-repo directory filed under two keys at two times (context-dependent resolution),
    so a cwd gone before the canary saw it goes to `unsorted`, marked missing, as docs/canary.md says."""
    world = engram_world
    repo = world.home / "código" / "Deep_Old"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    session = McpSession(world, repo / "src", {}, world.root / "mcp.log")
    try:
        session.call_tool("mem_save", {"title": "saved in src", "content": "c", "type": "manual"})
    finally:
        session.close()
    repo.rename(repo.with_name("Deep_New"))
    listed = canary(world, "inbox", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    entries = {entry["key"]: entry for entry in json.loads(listed.stdout)}
    assert "deep-old" not in entries, entries
    assert entries["unsorted"]["missing_cwds"] == [str(repo / "src")]
