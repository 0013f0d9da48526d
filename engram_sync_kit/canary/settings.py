"""One spelling per setting: every command reads its settings through `effective_config`, which lays the
environment and the options a user typed over the config file, validated by the same model. The spellings
that moved into the config file still work for one release, each with a one-line deprecation notice."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, ValidationError

from engram_sync_kit.canary.config import CanaryConfig, ConfigError, default_config_path, load_config
from engram_sync_kit.canary.db import default_db_path

PROG = "engram-canary"
CONFIG_ENV = "ENGRAM_CANARY_CONFIG"
#: The environment variables that set a config key (read by the same code path as the file).
ENV_SETTINGS = {"key_map": "ENGRAM_CANARY_KEY_MAP"}


@dataclass(frozen=True)
class Moved:
    """An option that became a config key (or another spelling); it works until the next release."""

    option: str
    commands: tuple[str, ...]
    now: str

    def notice(self, command: str) -> str:
        return f"{PROG}: {command} {self.option} is deprecated and goes in the next release; {self.now}"


#: Every old spelling, where it was, and where the setting lives now (docs/canary.md has the same table).
MOVED: dict[str, Moved] = {
    moved.option + "@" + command: moved
    for moved in (
        Moved(
            "--config",
            ("check", "baseline", "watch", "install-systemd", "reconcile"),
            "use: engram-canary --config FILE COMMAND",
        ),
        Moved("--baseline", ("check", "baseline", "watch"), "set baseline: FILE in the config file"),
        Moved(
            "--key-map", ("check", "inbox"), "set key_map: FILE in the config file, or ENGRAM_CANARY_KEY_MAP"
        ),
        Moved("--poll", ("watch",), "set watch.poll: true in the config file"),
        Moved("--poll-interval", ("watch",), "set watch.poll_interval_seconds in the config file"),
        Moved("--debounce-ms", ("watch",), "set watch.debounce_ms in the config file"),
        Moved("--full-every", ("watch",), "set watch.full_recheck_seconds in the config file"),
        Moved("--exec", ("install-systemd",), "set watch.exec in the config file"),
        Moved("--ping-url", ("install-systemd",), "set watch.ping_url in the config file"),
        Moved("--textfile-dir", ("install-systemd",), "set textfile_dir in the config file"),
        Moved("--aliases", ("list", "show", "claim", "drop"), "set inbox.aliases: FILE in the config file"),
        Moved(
            "--backup-dir",
            ("claim", "drop", "repair", "cleanup-phantoms"),
            "set backups.dir in the config file",
        ),
        Moved(
            "--keep-backups",
            ("claim", "drop", "repair", "cleanup-phantoms"),
            "set backups.keep in the config file",
        ),
        Moved("--keep", ("cleanup-phantoms",), "list the target under allowed_targets in the config file"),
    )
    for command in moved.commands
}


def deprecated_option(
    option: str, command: str, *declarations: str, **attributes: Any
) -> Callable[[Any], Any]:
    """A hidden option that still works for one release and says, in one line on stderr, where it went."""
    moved = MOVED[f"{option}@{command}"]

    def announce(_context: click.Context, _parameter: click.Parameter, value: Any) -> Any:
        if value not in (None, False, ()):
            click.echo(moved.notice(command), err=True)
        return value

    return click.option(option, *declarations, hidden=True, callback=announce, **attributes)


def config_file_option(command: str) -> Callable[[Any], Any]:
    return deprecated_option(
        "--config", command, "config_file", type=click.Path(path_type=Path, dir_okay=False), expose_value=True
    )


#: The one --db of every command: a directory or a missing file is reported like every other unusable
#: database (UNKNOWN line or JSON), not as a usage error.
db_option = click.option(
    "--db",
    "db",
    type=click.Path(path_type=Path),
    help="engram.db (default: config `db`, else $ENGRAM_DATA_DIR/engram.db, else ~/.engram/engram.db).",
)


def resolve_db(db: Path | None, config: CanaryConfig | None = None) -> Path:
    """The database a command reads or writes: --db, else the config file's `db:`, else engram's own
    default. Without `config`, the config in effect (the program's --config, else the default file)."""
    if db is not None:
        return db.expanduser()
    if config is None:
        config = effective_config()[0]
    if config.db is not None:
        return config.db.expanduser()
    return default_db_path()


def chosen_config_file(local: Path | None = None) -> Path | None:
    """The config file named by a command's old --config, else by `engram-canary --config`, else none."""
    if local is not None:
        return local
    context = click.get_current_context(silent=True)
    if context is None:
        return None
    root = context.find_root()
    named = root.params.get("config_file")
    return named if isinstance(named, Path) else None


def effective_config(
    config_file: Path | None = None, typed: Mapping[str, Any] | None = None
) -> tuple[CanaryConfig, Path]:
    """The config file, then the environment (ENV_SETTINGS), then what the user typed (dotted keys, None
    for not given); one validation for all three, so a bad value reads the same from any of them."""
    config, config_path = load_config(chosen_config_file(config_file))
    layers = {
        key: Path(os.environ[name]) for key, name in ENV_SETTINGS.items() if os.environ.get(name, "").strip()
    }
    layers |= {key: value for key, value in (typed or {}).items() if value not in (None, ())}
    if not layers:
        return config, config_path
    document = config.model_dump()
    for dotted, value in layers.items():
        *parents, last = dotted.split(".")
        section = document
        for part in parents:
            section = section[part]
        section[last] = value
    try:
        return CanaryConfig.model_validate(document), config_path
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ConfigError(f"{where}: {problem['msg']}") from None


@dataclass(frozen=True)
class Setting:
    key: str
    value: Any
    source: str


def _flatten(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _flatten(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def settings_with_sources(config_file: Path | None = None) -> tuple[Path, bool, list[Setting]]:
    """Every effective setting with where it came from: the config file (file:line), the environment or
    the default."""
    config, config_path = effective_config(config_file)
    lines = _config_lines(config_path)
    settings = []
    for key, value in _flatten(config):
        env_name = ENV_SETTINGS.get(key)
        if env_name and os.environ.get(env_name, "").strip():
            source = f"environment {env_name}"
        elif key in lines:
            source = f"{config_path}:{lines[key]}"
        else:
            source = "default"
        settings.append(Setting(key, _shown_default(key, value, config_path), source))
    return config_path, config_path.exists(), settings


def _shown_default(key: str, value: Any, config_path: Path) -> Any:
    """A default that is computed elsewhere, shown as what it resolves to."""
    if value is not None:
        return value
    if key == "db":
        return f"{default_db_path()} ($ENGRAM_DATA_DIR/engram.db, else ~/.engram/engram.db)"
    if key == "baseline":
        return config_path.with_name("baseline.json")
    if key == "backups.dir":
        return "engram-canary-backups/ next to the database"
    if key == "inbox.aliases":
        return config_path.with_name("aliases.yaml")
    return value


def _config_lines(config_path: Path) -> dict[str, int]:
    """The line of every key the config file sets (dotted), for `engram-canary config`."""
    if not config_path.exists():
        return {}
    from engram_sync_kit.engram_contract.yaml_source import load_yaml  # PyYAML only with a config file

    source = load_yaml(config_path.read_text(encoding="utf-8"))
    found: dict[str, int] = {}

    def walk(data: Any, location: tuple[str, ...]) -> None:
        if not isinstance(data, dict):
            return
        for name, value in data.items():
            here = (*location, str(name))
            found[".".join(here)] = source.line(here, keys_only=True)
            walk(value, here)

    walk(source.data, ())
    return found


def render_settings(config_path: Path, exists: bool, settings: list[Setting]) -> str:
    state = "" if exists else " (not found: every setting is its default)"
    lines = [f"config file: {config_path}{state}"]
    width = max(len(setting.key) for setting in settings)
    for setting in settings:
        value = "(none)" if setting.value is None else setting.value
        lines.append(f"{setting.key:<{width}} = {value}  [{setting.source}]")
    return "\n".join(lines)


def default_config_hint() -> str:
    return f"YAML config (default: ${CONFIG_ENV}, else {default_config_path()})."
