"""engram-harness in process (click's CliRunner): exact output and exit codes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from engram_sync_kit.harness import __version__
from engram_sync_kit.harness.cli import cli


def invoke(*args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(cli, list(args), prog_name="engram-harness")


def test_version_and_help() -> None:
    version = invoke("--version")
    assert (version.exit_code, version.stdout, version.stderr) == (
        0,
        f"engram-harness, version {__version__}\n",
        "",
    )
    shown = invoke("--help")
    assert shown.exit_code == 0
    assert shown.stdout.startswith("Usage: engram-harness [OPTIONS] COMMAND [ARGS]...\n")
    assert "  run " in shown.stdout and "  make-deployment " in shown.stdout


def test_a_missing_scenario_is_one_line_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "absent.scenario.yaml"
    result = invoke("run", str(missing))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"Error: {missing}: no such file or directory\n"


def test_an_unknown_command_is_one_line_and_exit_3() -> None:
    result = invoke("nosuch")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == "Error: No such command 'nosuch'. (see engram-harness --help)\n"
