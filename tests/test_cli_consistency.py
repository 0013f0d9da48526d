"""The kit's three command lines behave alike (issue 37): usage errors are one line and exit 3, every
option says what it does, each top-level --help shows examples that name real commands, and `--keep`
takes an optional DIR wherever it appears."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from engram_sync_kit.canary.cli import cli as canary_cli
from engram_sync_kit.engram_contract.one_line_cli import USAGE_EXIT
from engram_sync_kit.fake_cloud.cli import cli as fake_cloud_cli
from engram_sync_kit.harness.cli import cli as harness_cli

CLIS = {"engram-canary": canary_cli, "engram-harness": harness_cli, "engram-fake-cloud": fake_cloud_cli}
BIN = Path(sys.executable).parent


def commands(command: click.Command, path: str) -> dict[str, click.Command]:
    found = {path: command}
    if isinstance(command, click.Group):
        context = click.Context(command)
        for name in command.list_commands(context):
            subcommand = command.get_command(context, name)
            assert subcommand is not None
            found |= commands(subcommand, f"{path} {name}")
    return found


def test_every_option_of_every_command_says_what_it_does() -> None:
    # Before: check/inbox list/inbox show/reconcile --format, fake cloud --journal-limit and
    # --max-push-bytes had no help text.
    silent = [
        f"{path} {param.opts[0]}"
        for program, cli in CLIS.items()
        for path, command in commands(cli, program).items()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert silent == []


@pytest.mark.parametrize("program", sorted(CLIS))
def test_each_top_level_help_shows_examples_of_real_commands(program: str) -> None:
    shown = subprocess.run(
        [str(BIN / program), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    examples = shown.stdout.split("Examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(examples) >= 2
    known = commands(CLIS[program], program)
    for example in examples:
        words = example.split("#")[0].split()
        assert words[0] == program, example
        named = max((path for path in known if " ".join(words).startswith(path)), key=len)
        assert named != program, example
        command = known[named]
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {word for word in words if word.startswith("--")} <= options, example


USAGE_ERRORS = {
    "engram-canary": ["check", "--bogus"],
    "engram-harness": ["run", "--bogus"],
    "engram-fake-cloud": ["serve", "--bogus"],
}


@pytest.mark.parametrize("program", sorted(USAGE_ERRORS))
def test_a_usage_error_is_one_line_and_exit_3_in_every_cli(program: str) -> None:
    # Before: exit 3 in engram-canary, 2 in the other two, and click's usage block in engram-fake-cloud.
    done = subprocess.run(
        [str(BIN / program), *USAGE_ERRORS[program]], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (USAGE_EXIT, "") == (3, "")
    [line] = done.stderr.splitlines()
    assert re.search(rf"No such option: --bogus.* \(see {program} {USAGE_ERRORS[program][0]} --help\)$", line)


def test_keep_takes_an_optional_dir_wherever_it_appears() -> None:
    # Before: `run --keep [DIR]`, but `validate --keep DIR` required its value.
    keeps = {
        path: param
        for program, cli in CLIS.items()
        for path, command in commands(cli, program).items()
        for param in command.params
        if isinstance(param, click.Option) and "--keep" in param.opts and not param.hidden
    }
    assert sorted(keeps) == ["engram-harness run", "engram-harness validate"]
    for path, option in keeps.items():
        assert (option.metavar, option.is_flag, option.flag_value is not None) == ("[DIR]", False, True), path
