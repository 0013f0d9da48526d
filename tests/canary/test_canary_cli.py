"""Exit codes, UNKNOWN for anything that is not a readable engram database, config file errors."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from canary_support import run_canary

from engram_sync_kit.canary.config import CanaryConfig, ConfigError, load_config


def test_bad_arguments_are_unknown_with_one_line(tmp_path: Path) -> None:
    result = run_canary(["check", "--bogus"], tmp_path)

    assert result.returncode == 3
    assert result.stdout == ""
    assert (
        result.stderr
        == "engram-canary check: error: No such option: --bogus (see engram-canary check --help)\n"
    )


def test_bad_choice_is_unknown(tmp_path: Path) -> None:
    result = run_canary(["check", "--format", "xml"], tmp_path)

    assert result.returncode == 3
    assert len(result.stderr.splitlines()) == 1
    assert "'xml' is not one of 'text', 'json'" in result.stderr


def test_unknown_command_is_unknown(tmp_path: Path) -> None:
    result = run_canary(["frobnicate"], tmp_path)

    assert result.returncode == 3
    assert result.stderr == "engram-canary: error: No such command 'frobnicate'. (see engram-canary --help)\n"


def test_help_exits_zero(tmp_path: Path) -> None:
    result = run_canary(["check", "--help"], tmp_path)

    assert result.returncode == 0
    assert "--no-baseline" in result.stdout


def test_missing_database_is_unknown(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "engram.db"

    result = run_canary(["check", "--db", str(missing)], tmp_path)

    assert result.returncode == 3
    assert (
        result.stdout
        == f"ENGRAM-CANARY UNKNOWN - {missing}: no such file (pass --db or set ENGRAM_DATA_DIR)\n"
    )


def test_text_file_is_unknown_in_json_too(tmp_path: Path) -> None:
    not_a_db = tmp_path / "engram.db"
    not_a_db.write_text("hello, I am not SQLite\n" * 100)

    result = run_canary(["check", "--db", str(not_a_db), "--format", "json"], tmp_path)

    assert result.returncode == 3
    document = json.loads(result.stdout)
    assert document["status"] == "unknown"
    assert document["findings"] == []
    assert "cannot be read as SQLite" in document["error"]


def test_sqlite_file_without_engram_tables_is_unknown(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE things (id INTEGER)")
    connection.commit()
    connection.close()

    result = run_canary(["check", "--db", str(other)], tmp_path)

    assert result.returncode == 3
    assert result.stdout.startswith(
        f"ENGRAM-CANARY UNKNOWN - {other}: not an engram database with cloud sync"
    )


def test_config_error_is_unknown_with_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text("allowed_targets: []\nthresholds:\n  critical_new_foreign_target: 3\n")

    result = run_canary(["--config", str(config), "check", "--db", str(tmp_path / "x.db")], tmp_path)

    assert result.returncode == 3
    assert result.stdout == (
        f"ENGRAM-CANARY UNKNOWN - {config}:3: unknown key 'thresholds.critical_new_foreign_target' "
        "(allowed: critical_new_foreign_targets, critical_unacked_rows, stall_after_seconds)\n"
    )


def test_default_config_location_and_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))

    config, path = load_config(None)

    assert path == tmp_path / "engram-canary" / "config.yaml"
    assert config == CanaryConfig()


def test_explicit_missing_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"canary\.yaml: config file not found$"):
        load_config(tmp_path / "canary.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus: 1\n", ":1: unknown key 'bogus' (allowed: allowed_targets, backups, baseline, db, "),
        ("watch:\n  debounce_ms: -1\n", ":2: watch.debounce_ms: Input should be greater than or equal to 0"),
        (
            "allowed_targets:\n  - ''\n",
            ":1: allowed_targets: Value error, an allowed target key must not be empty",
        ),
        ("allowed_targets: [a\n", ": invalid YAML"),
        ("- a\n- b\n", ":1: expected a mapping of settings, got list"),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "canary.yaml"
    config.write_text(text)

    with pytest.raises(ConfigError) as caught:
        load_config(config)

    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
