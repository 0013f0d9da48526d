"""A click group whose every error is one line on stderr: click's usage errors and the package's own."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import click

from engram_sync_kit.engram_contract.files import overwrite_problem

#: The exit code of a usage error, in every command line of the kit: 2 is CRITICAL in the canary's
#: monitoring-plugin convention, so the canary's usage errors are 3 (UNKNOWN), and the harness and the fake
#: cloud use the same number so that one rule holds for all three.
USAGE_EXIT = 3


class OneLineErrorGroup(click.Group):
    """click's standalone error handling, each error printed as one line; subclasses pick words and exits."""

    program = ""
    #: one exit code for every error; None keeps the exception's own (click: usage 2, others 1)
    error_exit: int | None = None
    #: the package's exception root, reported like a ClickException
    package_error: type[Exception] = click.ClickException

    def usage_line(self, where: str, message: str) -> str:
        return f"Error: {message} (see {where} --help)"

    def error_line(self, message: str) -> str:
        return f"Error: {message}"

    def abort_line(self) -> str:
        return "Aborted!"

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else self.program
            self._exit(self.usage_line(where, error.format_message()), USAGE_EXIT)
        except click.ClickException as error:
            self._exit(self.error_line(error.format_message()), error.exit_code)
        except click.exceptions.Abort:
            self._exit(self.abort_line(), 1)
        except self.package_error as error:
            self._exit(self.error_line(str(error)), 1)

    def _exit(self, line: str, code: int) -> NoReturn:
        click.echo(line, err=True)
        sys.exit(self.error_exit if self.error_exit is not None else code)


def refuse_overwriting_inputs(
    outputs: Mapping[str, Path | None],
    databases: Mapping[str, Path | None],
    inputs: Mapping[str, Path | None] | None = None,
) -> None:
    """Before any work: a report that would land on a database (any spelling, or a side file), on another
    input or on the other report is a usage error in one line, and nothing is written."""
    named = [(option, path) for option, path in outputs.items() if path is not None]
    bases = [path for path in databases.values() if path is not None]
    others = [(f"{option} {path}", path) for option, path in (inputs or {}).items() if path is not None]
    for position, (option, output) in enumerate(named):
        earlier = [(f"{other} {path}", path) for other, path in named[:position]]
        problem = overwrite_problem(output, bases, [*others, *earlier])
        if problem is not None:
            raise click.UsageError(f"{option} {output}: {problem}; name another file")
