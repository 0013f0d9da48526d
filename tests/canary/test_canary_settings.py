"""The canary's settings: one frozen, typed CanaryConfig built from the config file; a bad value in any
section is one line with file:line, in the library and through the CLI, never a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from engram_sync_kit.canary.cli import cli
from engram_sync_kit.canary.config import CanaryConfig, ConfigError, load_config
from engram_sync_kit.canary.inbox.settings import InboxSettings

BAD_VALUES = [
    ("inbox:\n  age_days: 0\n", ":2: inbox.age_days: Input should be greater than 0"),
    (
        "inbox:\n  unsorted_growth_rows: many\n",
        ":2: inbox.unsorted_growth_rows: Input should be a valid integer, unable to parse string as an integer",
    ),
    (
        "inbox:\n  unsorted_window_days: -1\n",
        ":2: inbox.unsorted_window_days: Input should be greater than 0",
    ),
    (
        "inbox:\n  aliases: [a, b]\n",
        ":2: inbox.aliases: Input is not a valid path for <class 'pathlib.Path'>",
    ),
    ("inbox: 5\n", ":1: inbox: Input should be a valid dictionary or instance of InboxSettings"),
    ("inbox:\n  age_day: 3\n", ":2: unknown key 'inbox.age_day' (allowed: age_days, aliases, "),
    ("key_map:\n  a: 1\n", ":1: key_map: Input is not a valid path for <class 'pathlib.Path'>"),
    (
        "thresholds:\n  critical_unacked_rows: 0\n",
        ":2: thresholds.critical_unacked_rows: Input should be greater than or equal to 1",
    ),
    (
        "watch:\n  full_recheck_seconds: soon\n",
        ":2: watch.full_recheck_seconds: Input should be a valid number, unable to parse string as a number",
    ),
    ("db: 12\n", ":1: db: Input is not a valid path for <class 'pathlib.Path'>"),
]
IDS = [
    "age-zero",
    "rows-text",
    "window-negative",
    "aliases-list",
    "inbox-scalar",
    "inbox-typo",
    "key-map-mapping",
    "threshold-zero",
    "recheck-text",
    "db-number",
]


@pytest.mark.parametrize(("text", "message"), BAD_VALUES, ids=IDS)
def test_a_bad_setting_is_one_line_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert str(refused.value).startswith(f"{config}{message}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("text", "message"), BAD_VALUES, ids=IDS)
def test_check_and_watch_report_a_bad_setting_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text(text, encoding="utf-8")
    runner = CliRunner(mix_stderr=False)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    db = str(tmp_path / "engram.db")

    checked = runner.invoke(cli, ["--config", str(config), "check", "--db", db], env=env)
    assert checked.exit_code == 3 and isinstance(checked.exception, SystemExit)
    assert checked.stdout.startswith(f"ENGRAM-CANARY UNKNOWN - {config}{message}")
    assert checked.stdout.count("\n") == 1

    watched = runner.invoke(cli, ["--config", str(config), "watch", "--db", db], env=env)
    assert watched.exit_code == 3 and isinstance(watched.exception, SystemExit)
    assert watched.stdout == ""
    assert watched.stderr.startswith(f"engram-canary: error: {config}{message}")
    assert watched.stderr.count("\n") == 1


V120_SCHEMA = Path(__file__).parents[1] / "fixtures" / "engram_schemas" / "v1.20.0.sql"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # the NUL is shown escaped: a text line never carries a control character (canary.text)
        ('inbox:\n  aliases: "a\\0b"\n', "a\\x00b: alias file not found"),
        ('key_map: "a\\0b"\n', "--key-map a\\x00b: cannot read (embedded null byte)"),
        ("key_map: /nonexistent/keys.json\n", "--key-map /nonexistent/keys.json: cannot read ("),
    ],
    ids=["aliases-nul", "key-map-nul", "key-map-missing"],
)
def test_a_path_setting_that_cannot_be_read_is_unknown_in_one_line(
    tmp_path: Path, text: str, shown: str
) -> None:
    # Parsed fine, broken later: the paths are only read once the database is open.
    db = tmp_path / "engram.db"
    connection = sqlite3.connect(db)
    connection.executescript(V120_SCHEMA.read_text(encoding="utf-8"))
    connection.close()
    config = tmp_path / "canary.yaml"
    config.write_text(text, encoding="utf-8")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ENGRAM_CANARY_STATE_DIR": str(tmp_path / "state")}
    checked = CliRunner(mix_stderr=False).invoke(
        cli, ["--config", str(config), "check", "--db", str(db)], env=env
    )
    assert checked.exit_code == 3 and isinstance(checked.exception, SystemExit)
    assert checked.stdout.startswith(f"ENGRAM-CANARY UNKNOWN - {shown}")
    assert checked.stdout.count("\n") == 1


def test_the_settings_are_frozen(tmp_path: Path) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text("inbox:\n  age_days: 3\nwatch:\n  debounce_ms: 5\n", encoding="utf-8")
    settings, _ = load_config(config)
    assert isinstance(settings.inbox, InboxSettings) and settings.inbox.age_days == 3.0
    with pytest.raises(ValidationError, match="frozen"):
        settings.watch = settings.watch.model_copy(update={"debounce_ms": 1.0})  # type: ignore[misc]  # the point: frozen
    with pytest.raises(ValidationError, match="frozen"):
        settings.inbox.age_days = 1.0  # type: ignore[misc]  # the point: frozen
    with pytest.raises(ValidationError, match="frozen"):
        CanaryConfig().thresholds.critical_unacked_rows = 5  # type: ignore[misc]  # the point: frozen
    assert settings.watch.debounce_ms == 5.0
