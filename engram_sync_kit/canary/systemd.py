"""systemd units for the canary: a hardened real-time watcher and a timer running `check` as a backstop."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from engram_sync_kit.canary.config import default_state_dir
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.engram_contract.files import atomic_write, xdg_config_home

WATCH_UNIT = "engram-canary-watch.service"
CHECK_UNIT = "engram-canary-check.service"
TIMER_UNIT = "engram-canary-check.timer"

# The sandbox of both services: read-only everywhere except the database directory, where SQLite may
# need to create the -wal/-shm files of a read-only connection (the data itself is opened mode=ro), and
# the canary's own state directory (its unchanged-check cache and cursors: lost, every timer run would
# read the whole database again).
HARDENING = """\
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=strict
ProtectHome=read-only
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
CapabilityBoundingSet=
UMask=0077
"""


class SystemdError(CanaryError):
    """Units cannot be generated or written."""


@dataclass(frozen=True)
class UnitOptions:
    executable: Path
    db_path: Path
    config_path: Path | None = None
    textfile_dir: Path | None = None
    on_calendar: str = "*:0/15"
    system: bool = False
    user: str | None = None
    exec_command: str | None = None
    ping_url: str | None = None
    #: the canary's state directory for user units (system units get systemd's StateDirectory=)
    state_dir: Path | None = None


#: system units: systemd creates /var/lib/engram-canary for the service's user and keeps it writable
SYSTEM_STATE_DIRECTORY = "engram-canary"


def default_executable() -> Path:
    found = shutil.which("engram-canary")
    if found:
        return Path(found).resolve()
    return (Path(sys.executable).parent / "engram-canary").resolve()


def default_unit_dir(system: bool) -> Path:
    if system:
        return Path("/etc/systemd/system")
    return xdg_config_home() / "systemd" / "user"


def quote_argument(argument: str) -> str:
    """systemd command-line quoting: specifiers (%) and variables ($) escaped, quoted when needed."""
    escaped = argument.replace("%", "%%").replace("$", "$$")
    if escaped and not any(char in escaped for char in " \t\"'\\;"):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def command_line(arguments: list[str]) -> str:
    return " ".join(quote_argument(argument) for argument in arguments)


def _command(options: UnitOptions, command: str) -> list[str]:
    """`engram-canary [--config FILE] COMMAND --db DB`: the config file is the program's option."""
    config = ["--config", str(options.config_path)] if options.config_path is not None else []
    return [str(options.executable), *config, command, "--db", str(options.db_path)]


def _writable_paths(options: UnitOptions) -> str:
    paths = [options.db_path.parent]
    if options.textfile_dir is not None:
        paths.append(options.textfile_dir)
    if not options.system and options.state_dir is not None:
        paths.append(options.state_dir)
    return " ".join(quote_argument(str(path)) for path in paths)


def _state_settings(options: UnitOptions) -> str:
    """Where the service keeps its state, named to the canary so it never depends on the unit's HOME."""
    if options.system:
        variable = quote_argument(f"ENGRAM_CANARY_STATE_DIR=/var/lib/{SYSTEM_STATE_DIRECTORY}")
        return f"StateDirectory={SYSTEM_STATE_DIRECTORY}\nEnvironment={variable}\n"
    if options.state_dir is None:
        return ""
    return f"Environment={quote_argument(f'ENGRAM_CANARY_STATE_DIR={options.state_dir}')}\n"


SQLITE_HEADER = b"SQLite format 3\x00"


def check_database_file(path: Path) -> None:
    """The units watch one database file for good: refuse a path that is none, before writing them."""
    hint = "give --db engram's engram.db (engram creates it when it first runs)"
    if path.is_dir():
        raise SystemdError(f"--db {path}: a directory, not a database file; {hint}")
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        raise SystemdError(f"--db {path}: no such file; {hint}") from None
    except OSError as error:
        raise SystemdError(f"--db {path}: cannot be read ({error.strerror}); {hint}") from None
    if header != SQLITE_HEADER:
        raise SystemdError(f"--db {path}: not a SQLite database; {hint}")


def user_state_dir() -> Path:
    """The state directory a user unit's canary keeps, as the installing user's canary would find it."""
    return default_state_dir().expanduser().resolve()


def prepare_state_dir(options: UnitOptions) -> None:
    """ReadWritePaths= needs the directory to exist (systemd refuses to start the unit otherwise)."""
    if options.system or options.state_dir is None:
        return
    try:
        options.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise SystemdError(
            f"{options.state_dir}: cannot create the state directory ({error.strerror})"
        ) from None


def _service_user(options: UnitOptions) -> str:
    return f"User={options.user}\n" if options.system and options.user else ""


def watch_service(options: UnitOptions) -> str:
    arguments = _command(options, "watch")
    if options.exec_command:
        arguments += ["--exec", options.exec_command]
    if options.ping_url:
        arguments += ["--ping-url", options.ping_url]
    wanted_by = "multi-user.target" if options.system else "default.target"
    return (
        "[Unit]\n"
        "Description=engram-canary: real-time watch of engram's closed sync target space\n"
        "Documentation=man:systemd.service(5)\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"{_service_user(options)}"
        f"ExecStart={command_line(arguments)}\n"
        "Restart=on-failure\n"
        "RestartSec=10s\n"
        "KillSignal=SIGTERM\n"
        "TimeoutStopSec=15s\n"
        f"{_state_settings(options)}"
        f"ReadWritePaths={_writable_paths(options)}\n"
        f"{HARDENING}"
        "\n"
        "[Install]\n"
        f"WantedBy={wanted_by}\n"
    )


def check_service(options: UnitOptions) -> str:
    arguments = _command(options, "check")
    if options.textfile_dir is not None:
        arguments += ["--textfile-dir", str(options.textfile_dir)]
    return (
        "[Unit]\n"
        "Description=engram-canary: one-shot check of engram's sync target space (backstop)\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"{_service_user(options)}"
        f"ExecStart={command_line(arguments)}\n"
        f"{_state_settings(options)}"
        f"ReadWritePaths={_writable_paths(options)}\n"
        f"{HARDENING}"
    )


def check_timer(options: UnitOptions) -> str:
    return (
        "[Unit]\n"
        "Description=engram-canary: run the backstop check periodically\n"
        "\n"
        "[Timer]\n"
        f"OnCalendar={options.on_calendar}\n"
        "Persistent=true\n"
        "RandomizedDelaySec=30s\n"
        f"Unit={CHECK_UNIT}\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
    )


def render_units(options: UnitOptions) -> dict[str, str]:
    _refuse_line_breaks(options)
    return {
        WATCH_UNIT: watch_service(options),
        CHECK_UNIT: check_service(options),
        TIMER_UNIT: check_timer(options),
    }


def _refuse_line_breaks(options: UnitOptions) -> None:
    """A unit is one setting per line: a value with a line break would end its line and start a directive
    of its own (`ExecStartPre=...`), and systemd has no quoting for that."""
    for name, value in vars(options).items():
        text = str(value) if value is not None else ""
        if any(not char.isprintable() and char not in " \t" for char in text):
            shown = name.replace("_", "-").replace("-command", "").replace("-path", "")
            raise SystemdError(
                f"--{shown} {text!r}: a line break or control character cannot go into a systemd unit"
            )


def write_units(units: dict[str, str], directory: Path) -> list[Path]:
    written: list[Path] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            path = directory / name
            atomic_write(path, text)
            written.append(path)
    except OSError as error:
        raise SystemdError(f"{directory}: cannot write units ({error.strerror or error})") from error
    return written


def enable_hint(system: bool) -> str:
    systemctl = "systemctl" if system else "systemctl --user"
    return f"{systemctl} daemon-reload && {systemctl} enable --now {WATCH_UNIT} {TIMER_UNIT}"
