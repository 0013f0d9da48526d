"""engram-canary in process (click's CliRunner): exact output and exit codes, no console script needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from engram_sync_kit.canary import __version__
from engram_sync_kit.canary.cli import cli


def invoke(tmp_path: Path, *args: str) -> Result:
    runner = CliRunner(mix_stderr=False)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    return runner.invoke(cli, list(args), prog_name="engram-canary", env=env)


def test_version_and_help(tmp_path: Path) -> None:
    version = invoke(tmp_path, "--version")
    assert (version.exit_code, version.stdout, version.stderr) == (
        0,
        f"engram-canary, version {__version__}\n",
        "",
    )
    shown = invoke(tmp_path, "--help")
    assert shown.exit_code == 0
    assert shown.stdout.startswith("Usage: engram-canary [OPTIONS] COMMAND [ARGS]...\n")
    assert "  check " in shown.stdout and "  watch " in shown.stdout


def test_a_missing_database_is_unknown_on_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "engram.db"
    result = invoke(tmp_path, "check", "--db", str(missing))
    assert result.exit_code == 3
    assert (
        result.stdout
        == f"ENGRAM-CANARY UNKNOWN - {missing}: no such file (pass --db or set ENGRAM_DATA_DIR)\n"
    )


def test_an_unknown_command_is_one_line_and_unknown(tmp_path: Path) -> None:
    result = invoke(tmp_path, "nosuch")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == "engram-canary: error: No such command 'nosuch'. (see engram-canary --help)\n"


@pytest.mark.parametrize(
    ("option", "value", "shown"), [("--debounce-ms", "10001", "10001"), ("--debounce-ms", "1e9", "1e+09")]
)
def test_watch_overrides_keep_the_settings_bounds(
    tmp_path: Path, option: str, value: str, shown: str
) -> None:
    # Before the fix, --debounce-ms was assigned past WatchSettings' bound (at most 10000 ms) and the
    # watch went on to open the database. The old spelling still works for a release, and says so.
    result = invoke(tmp_path, "watch", "--db", str(tmp_path / "engram.db"), option, value)
    assert result.exit_code == 3
    assert result.stderr == (
        "engram-canary: watch --debounce-ms is deprecated and goes in the next release; "
        "set watch.debounce_ms in the config file\n"
        f"engram-canary watch: error: Invalid value for '{option}': {shown}: "
        "Input should be less than or equal to 10000 (see engram-canary watch --help)\n"
    )
