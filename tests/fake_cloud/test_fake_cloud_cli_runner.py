"""engram-fake-cloud in process (click's CliRunner): exact output and exit codes."""

from __future__ import annotations

from click.testing import CliRunner, Result

from engram_sync_kit.fake_cloud.cli import cli


def invoke(*args: str) -> Result:
    return CliRunner(mix_stderr=False).invoke(cli, list(args), prog_name="engram-fake-cloud")


def test_version_and_help() -> None:
    version = invoke("--version")
    assert (version.exit_code, version.stdout, version.stderr) == (
        0,
        "engram-fake-cloud, version 0.1.0\n",
        "",
    )
    shown = invoke("--help")
    assert shown.exit_code == 0
    assert shown.stdout.startswith("Usage: engram-fake-cloud [OPTIONS] COMMAND [ARGS]...\n")
    assert "  serve " in shown.stdout


def test_a_port_out_of_range_is_a_usage_error_before_anything_binds() -> None:
    result = invoke("serve", "--port", "99999")
    # Before: click's three-line usage block and exit 2; now one line and exit 3, as in every kit CLI.
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == (
        "engram-fake-cloud: Invalid value for '--port': 99999 is not in the range 0<=x<=65535. "
        "(see engram-fake-cloud serve --help)\n"
    )
