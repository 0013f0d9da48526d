"""One spelling per setting (issue 28): at most 55 option slots on engram-canary, `engram-canary config` says
where each setting came from, and every spelling that moved still works for one release with one line."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from engram_schemas.builder import V120, build

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.canary.settings import MOVED

MAX_OPTION_SLOTS = 55
CANARY_DOC = Path(__file__).resolve().parents[2] / "docs" / "canary.md"


def option_slots(command: click.Command, path: str) -> list[tuple[str, click.Option]]:
    """Every (command path, option) pair, subcommands included; --help is not a slot."""
    context = click.Context(cli)
    slots = [(path, param) for param in command.params if isinstance(param, click.Option)]
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            subcommand = command.get_command(context, name)
            assert subcommand is not None
            slots += option_slots(subcommand, f"{path} {name}")
    return slots


def test_engram_canary_has_at_most_55_option_slots() -> None:
    visible = [
        (path, option.opts[0]) for path, option in option_slots(cli, "engram-canary") if not option.hidden
    ]
    assert len(visible) <= MAX_OPTION_SLOTS, visible
    # The count the issue started from, old spellings included: 84 (now 85 with the program's --config).
    assert len(option_slots(cli, "engram-canary")) == 85


def test_every_hidden_option_is_a_moved_spelling_with_its_row_in_the_docs() -> None:
    hidden = {
        (path.split()[-1], option.opts[0])
        for path, option in option_slots(cli, "engram-canary")
        if option.hidden
    }
    assert hidden == {
        (command, moved.option) for key, moved in MOVED.items() for command in [key.split("@")[1]]
    }
    table = CANARY_DOC.read_text(encoding="utf-8").split("### What moved where", 1)[1].split("\n## ", 1)[0]
    for moved in {moved.option: moved for moved in MOVED.values()}.values():
        assert f"`{moved.option}`" in table, moved.option


def invoke(tmp_path: Path, *args: str, **env: str) -> Result:
    environment = {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "ENGRAM_CANARY_STATE_DIR": str(tmp_path / "state"),
        "ENGRAM_DATA_DIR": str(tmp_path / "data"),
        "ENGRAM_CANARY_CONFIG": None,
        "ENGRAM_CANARY_KEY_MAP": None,
        **env,
    }
    return CliRunner(mix_stderr=False).invoke(cli, list(args), prog_name="engram-canary", env=environment)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "engram.db"
    path.parent.mkdir()
    build(V120, path)
    return path


def test_an_old_spelling_works_and_says_where_the_setting_went_in_one_line(db: Path, tmp_path: Path) -> None:
    config = tmp_path / "old.yaml"
    config.write_text("thresholds:\n  critical_unacked_row: 3\n", encoding="utf-8")
    old = invoke(tmp_path, "check", "--db", str(db), "--config", str(config))
    new = invoke(tmp_path, "--config", str(config), "check", "--db", str(db))
    assert old.stderr == (
        "engram-canary: check --config is deprecated and goes in the next release; "
        "use: engram-canary --config FILE COMMAND\n"
    )
    assert new.stderr == ""
    assert (old.exit_code, old.stdout) == (new.exit_code, new.stdout) == (3, new.stdout)
    assert new.stdout.startswith(
        f"ENGRAM-CANARY UNKNOWN - {config}:2: unknown key 'thresholds.critical_unacked_row'"
    )


def test_the_old_key_map_option_and_the_environment_read_the_same_file(db: Path, tmp_path: Path) -> None:
    key_map = tmp_path / "keys.json"
    key_map.write_text('{"schema": "no"}', encoding="utf-8")
    old = invoke(tmp_path, "inbox", "--key-map", str(key_map), "list", "--db", str(db))
    new = invoke(tmp_path, "inbox", "list", "--db", str(db), ENGRAM_CANARY_KEY_MAP=str(key_map))
    notice = (
        "engram-canary: inbox --key-map is deprecated and goes in the next release; "
        "set key_map: FILE in the config file, or ENGRAM_CANARY_KEY_MAP\n"
    )
    assert old.stderr == notice + new.stderr
    assert new.stderr.startswith(f"engram-canary: error: --key-map {key_map}: not an export of")


def test_cleanup_keeps_the_allowed_targets_and_the_old_keep_option_adds_to_them(
    db: Path, tmp_path: Path
) -> None:
    # SIMULATED LEGACY DATA: two empty phantom targets, as derived project keys leave behind.
    with closing(sqlite3.connect(db)) as connection, connection:
        for key in ("cloud:old-phantom", "cloud:keep-me"):
            connection.execute(
                "INSERT INTO sync_state (target_key, lifecycle, updated_at) VALUES (?, 'idle', datetime('now'))",
                (key,),
            )

    def planned(*args: str) -> tuple[str, str]:
        result = invoke(tmp_path, "cleanup-phantoms", "--db", str(db), *args)
        assert result.exit_code == 0, result.stderr
        return result.stdout.splitlines()[0], result.stderr

    assert planned() == ("dry run: delete 2 phantom sync_state rows; nothing was written", "")
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("allowed_targets:\n  - cloud:keep-me\n", encoding="utf-8")
    assert planned() == ("dry run: delete 1 phantom sync_state rows; nothing was written", "")
    assert planned("--keep", "cloud:old-phantom") == (
        "dry run: delete 0 phantom sync_state rows; nothing was written",
        "engram-canary: cleanup-phantoms --keep is deprecated and goes in the next release; "
        "list the target under allowed_targets in the config file\n",
    )


def test_config_prints_every_setting_and_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("allowed_targets:\n  - cloud:legacy\nwatch:\n  debounce_ms: 5\n", encoding="utf-8")
    result = invoke(tmp_path, "config", ENGRAM_CANARY_KEY_MAP=str(tmp_path / "keys.json"))
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0] == f"config file: {config}"
    settings = {line.split(" = ")[0].strip(): line.split(" = ", 1)[1] for line in lines[1:]}
    assert settings["allowed_targets"] == f"['cloud:legacy']  [{config}:1]"
    assert settings["watch.debounce_ms"] == f"5.0  [{config}:4]"
    assert settings["key_map"] == f"{tmp_path / 'keys.json'}  [environment ENGRAM_CANARY_KEY_MAP]"
    assert settings["watch.full_recheck_seconds"] == "300.0  [default]"
    assert settings["backups.keep"] == "10  [default]"
    assert settings["baseline"] == f"{config.with_name('baseline.json')}  [default]"
    assert settings["db"].startswith(f"{tmp_path / 'data' / 'engram.db'} ")


def test_config_names_a_missing_default_file_and_the_program_option_file(tmp_path: Path) -> None:
    missing = invoke(tmp_path, "config")
    assert missing.stdout.splitlines()[0] == (
        f"config file: {tmp_path / 'xdg' / 'engram-canary' / 'config.yaml'} (not found: every setting is its default)"
    )
    named = tmp_path / "mine.yaml"
    named.write_text("db: /srv/engram.db\n", encoding="utf-8")
    for args, env in (
        (("--config", str(named), "config"), {}),
        (("config",), {"ENGRAM_CANARY_CONFIG": str(named)}),
    ):
        result = invoke(tmp_path, *args, **env)
        assert result.stdout.splitlines()[0] == f"config file: {named}"
        assert f"/srv/engram.db  [{named}:1]" in result.stdout
