"""The canary's YAML config file: extra allowed targets and alert thresholds.

Default location: $XDG_CONFIG_HOME/engram-canary/config.yaml (else ~/.config/engram-canary/config.yaml).
A missing default file means defaults; a missing file named with --config is an error. Unknown keys are
errors, reported as one line with file:line so a typo never silently disables a check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.inbox.settings import InboxSettings
from engram_sync_kit.engram_contract.files import xdg_config_home

CONFIG_DIR_NAME = "engram-canary"
CONFIG_FILE_NAME = "config.yaml"


class ConfigError(CanaryError):
    """The config file cannot be read or does not validate."""


class Thresholds(BaseModel):
    """When a finding is a warning and when it is critical."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    critical_new_foreign_targets: int = Field(
        default=10, ge=1, description="this many NEW foreign targets at once make the status critical"
    )
    critical_unacked_rows: int = Field(
        default=100, ge=1, description="a foreign target holding this many unacked rows is critical"
    )
    stall_after_seconds: float = Field(
        default=3600.0,
        ge=1,
        le=30 * 86_400,
        description="sync_stalled: rows the worker sends waited longer than this with no ack in as long",
    )


class WatchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    debounce_ms: float = Field(default=2.0, ge=0, le=10_000)
    # At most a day: a timer wait past the platform's time_t (inf, 1e308) was a traceback.
    full_recheck_seconds: float = Field(default=300.0, gt=0, le=86_400)
    poll_interval_seconds: float = Field(default=1.0, gt=0, le=86_400, description="only with --poll")
    inbox_tripwires: bool = Field(
        default=False,
        description="also run the inbox tripwires in every full re-check (seconds of CPU on big databases)",
    )
    poll: bool = Field(default=False, description="use the polling observer (filesystems without inotify)")
    exec: str | None = Field(default=None, description="shell command run for each alert (as watch --exec)")
    ping_url: str | None = Field(default=None, description="Healthchecks-style URL (as watch --ping-url)")


class BackupSettings(BaseModel):
    """Where the writers (`inbox claim`, `inbox drop`, `repair`, `cleanup-phantoms`) keep their backups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dir: Path | None = Field(default=None, description="default: engram-canary-backups/ next to the database")
    keep: int = Field(default=10, ge=1, description="after --apply, keep only this many newest backups")


class CanaryConfig(BaseModel):
    """The canary's settings, built once from the config file (and a command's options) and passed down
    typed; frozen, so no part of the canary changes them under another."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    db: Path | None = Field(default=None, description="engram.db to watch when --db is not given")
    allowed_targets: list[str] = Field(
        default_factory=list, description="extra sync target keys that are not findings"
    )
    key_map: Path | None = Field(
        default=None,
        description="`inbox export-keys` output of the database's own machine, for a copied database",
    )
    baseline: Path | None = Field(
        default=None, description="baseline file; default: baseline.json next to the config"
    )
    textfile_dir: Path | None = Field(
        default=None,
        description="also write the database's engram_canary_<id>.prom here on each check (node_exporter)",
    )
    thresholds: Thresholds = Field(default_factory=Thresholds)
    inbox: InboxSettings = Field(default_factory=InboxSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    backups: BackupSettings = Field(default_factory=BackupSettings)

    @field_validator("allowed_targets")
    @classmethod
    def _non_empty_keys(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if not key.strip():
                raise ValueError("an allowed target key must not be empty")
        return keys


def default_config_dir() -> Path:
    return xdg_config_home() / CONFIG_DIR_NAME


def default_state_dir() -> Path:
    """The canary's own state (never engram's): $ENGRAM_CANARY_STATE_DIR, else $XDG_STATE_HOME/engram-canary,
    else ~/.local/state/engram-canary."""
    override = os.environ.get("ENGRAM_CANARY_STATE_DIR", "").strip()
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"  # XDG: relative is invalid
    return base / CONFIG_DIR_NAME


def state_file_for(db_path: Path, kind: str) -> Path:
    """One state file per database and kind, named by a digest of the database's resolved path."""
    digest = hashlib.sha256(str(db_path.expanduser().resolve()).encode()).hexdigest()[:16]
    return default_state_dir() / f"{kind}-{digest}.json"


def keep_state(path: Path, text: str) -> None:
    """Write a state-dir cache file best-effort: rename makes it whole or absent, and no fsync, because a
    lost or unwritable cache only costs the next check a full read, never a wrong answer."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def default_config_path() -> Path:
    return default_config_dir() / CONFIG_FILE_NAME


def load_config(path: Path | None) -> tuple[CanaryConfig, Path]:
    """The config at `path` (must exist), else the default file if present, else defaults."""
    explicit = path is not None
    config_path = path if path is not None else default_config_path()
    try:
        exists = config_path.exists()
    except OSError as error:
        raise ConfigError(f"{config_path}: cannot read config ({error.strerror})") from error
    if not exists:
        if explicit:
            raise ConfigError(f"{config_path}: config file not found")
        return CanaryConfig(), config_path
    try:
        text = config_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{config_path}: cannot read config ({error})") from error
    # Imported here: PyYAML costs a check without a config file ~12 ms of start-up.
    from engram_sync_kit.engram_contract.yaml_source import YamlSyntaxError, load_yaml

    try:
        source = load_yaml(text)
    except YamlSyntaxError as error:
        raise ConfigError(f"{config_path}:{error.line}: invalid YAML ({error.problem})") from error
    document = source.data
    if document is None:
        return CanaryConfig(), config_path
    if not isinstance(document, dict):
        raise ConfigError(f"{config_path}:1: expected a mapping of settings, got {type(document).__name__}")
    try:
        return CanaryConfig.model_validate(document), config_path
    except ValidationError as error:
        first = error.errors()[0]
        location = tuple(first["loc"])
        dotted = ".".join(str(part) for part in location) or "(top level)"
        line = source.line(location, keys_only=True)
        if first["type"] == "extra_forbidden":
            allowed = _allowed_keys(location[:-1])
            raise ConfigError(
                f"{config_path}:{line}: unknown key {dotted!r} (allowed: {', '.join(allowed)})"
            ) from error
        raise ConfigError(f"{config_path}:{line}: {dotted}: {first['msg']}") from error


def _allowed_keys(parent: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] = CanaryConfig
    for part in parent:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            break
    return sorted(model.model_fields)
