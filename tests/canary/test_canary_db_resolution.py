"""One database per command (issue 35 item 1): every engram-canary command that reads or writes engram.db
takes it from --db, else the config file's `db:`, else $ENGRAM_DATA_DIR, else ~/.engram, through one
resolution and one --db declaration. With the config naming A and ENGRAM_DATA_DIR naming B, no command may
read or write B."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from engram_schemas.builder import V120, build

from engram_sync_kit.canary import settings
from engram_sync_kit.canary.cli import cli

# Every command that names a database, with arguments that run it without a cloud or a loop.
COMMANDS: list[tuple[str, ...]] = [
    ("check", "--format", "json"),
    ("baseline",),
    ("install-systemd", "--print"),
    ("reconcile", "--cloud-url", "http://127.0.0.1:9", "--timeout", "0.5"),
    ("inbox", "export-keys"),
    ("inbox", "list"),
    ("inbox", "show", "side-project"),
    ("inbox", "claim", "--project", "side-project", "--as", "main-proj"),
    ("inbox", "drop", "--project", "side-project"),
    ("inbox", "drop", "--seq", "1"),
    ("inbox", "drop", "--unattributed"),
    ("cleanup-phantoms",),
    ("cleanup-phantoms", "--apply"),
    ("repair",),
    ("repair", "--apply"),
]


def db_commands() -> list[tuple[str, click.Command]]:
    context = click.Context(cli)
    found: list[tuple[str, click.Command]] = []

    def walk(command: click.Command, path: str) -> None:
        if any(isinstance(param, click.Option) and "--db" in param.opts for param in command.params):
            found.append((path, command))
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                subcommand = command.get_command(context, name)
                assert subcommand is not None
                walk(subcommand, f"{path} {name}".strip())

    walk(cli, "")
    return found


@pytest.fixture
def homes(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(config naming A, A, B): A is an engram database; B, named by ENGRAM_DATA_DIR, does not exist."""
    a = tmp_path / "named-in-config" / "engram.db"
    a.parent.mkdir()
    build(V120, a)
    b = tmp_path / "named-by-environment" / "engram.db"
    config = tmp_path / "canary.yaml"
    config.write_text(f"db: {a}\nbackups:\n  dir: {tmp_path / 'backups'}\n", encoding="utf-8")
    return config, a, b


def invoke(tmp_path: Path, args: tuple[str, ...], config: Path | None, data_dir: Path) -> Result:
    environment = {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "ENGRAM_CANARY_STATE_DIR": str(tmp_path / "state"),
        "ENGRAM_DATA_DIR": str(data_dir),
        "ENGRAM_CANARY_CONFIG": str(config) if config is not None else None,
        "ENGRAM_CANARY_KEY_MAP": None,
    }
    return CliRunner(mix_stderr=False).invoke(cli, list(args), prog_name="engram-canary", env=environment)


def test_every_command_with_a_database_is_in_the_list_and_shares_one_declaration() -> None:
    found = db_commands()
    assert {path.split()[0] for path, _ in found} | {"inbox"} == {args[0] for args in COMMANDS} | {"watch"}
    declarations = {
        tuple(sorted((key, repr(value)) for key, value in param.to_info_dict().items()))
        for _, command in found
        for param in command.params
        if isinstance(param, click.Option) and "--db" in param.opts
    }
    assert len(declarations) == 1, declarations


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args))
def test_the_config_files_db_wins_over_engram_data_dir(
    tmp_path: Path, homes: tuple[Path, Path, Path], args: tuple[str, ...]
) -> None:
    config, a, b = homes
    through_config = invoke(tmp_path, args, config, b.parent)
    said = through_config.output + through_config.stderr
    assert str(b.parent) not in said, said
    assert through_config.exception is None or isinstance(through_config.exception, SystemExit), said
    # The config's db reads exactly as --db A does.
    path = 2 if args[0] == "inbox" else 1
    named = invoke(tmp_path, (*args[:path], "--db", str(a), *args[path:]), None, b.parent)
    assert (through_config.exit_code, said.count(str(a)) > 0) == (
        named.exit_code,
        (named.output + named.stderr).count(str(a)) > 0,
    ), (said, named.output + named.stderr)


def test_watch_takes_the_config_files_db(
    tmp_path: Path, homes: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engram_sync_kit.canary import watch

    config, a, b = homes
    seen: list[Path] = []

    def fake_watch(options: Any) -> int:
        seen.append(options.db_path)
        return 0

    monkeypatch.setattr(watch, "watch", fake_watch)
    result = invoke(tmp_path, ("watch",), config, b.parent)
    assert result.exit_code == 0, result.output + result.stderr
    assert seen == [a]


def test_one_resolution_in_order_db_then_config_then_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolve: Callable[..., Path] = settings.resolve_db
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.delenv("ENGRAM_CANARY_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert resolve(None) == tmp_path / "env" / "engram.db"
    assert resolve(Path("~/x.db")) == Path.home() / "x.db"
    config = tmp_path / "xdg" / "engram-canary" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"db: {tmp_path / 'cfg.db'}\n", encoding="utf-8")
    assert resolve(None) == tmp_path / "cfg.db"
    assert resolve(tmp_path / "typed.db") == tmp_path / "typed.db"


@pytest.mark.engram
def test_drop_apply_writes_the_config_files_database_not_engram_data_dir(
    engram_bin: Path, tmp_path: Path
) -> None:
    """The defect as the user met it: both homes hold side-project rows that the real engram wrote; the
    drop goes to the config's A, and B (ENGRAM_DATA_DIR) keeps every byte of its tables."""
    from inbox_support import canary, db_digest, save

    from engram_sync_kit.harness.engram.env import EngramEnvironment

    named = EngramEnvironment(binary=engram_bin, root=tmp_path / "named").prepare()
    environment = EngramEnvironment(binary=engram_bin, root=tmp_path / "environment").prepare()
    for world in (named, environment):
        save(world, "side-project", "a memory")
    config = tmp_path / "canary.yaml"
    config.write_text(f"db: {named.db_path}\nbackups:\n  dir: {tmp_path / 'backups'}\n", encoding="utf-8")
    before = (db_digest(named.db_path), db_digest(environment.db_path))
    result = canary(
        environment, "inbox", "drop", "--project", "side-project", "--apply", ENGRAM_CANARY_CONFIG=str(config)
    )
    assert result.returncode == 0, result.stderr
    assert "applied: drop" in result.stdout
    assert db_digest(environment.db_path) == before[1]
    assert db_digest(named.db_path) != before[0]
