"""The systemd units: content, quoting, --print, and systemd-analyze verify where it exists."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from canary_support import CANARY, run_canary
from real_parts import missing

from engram_sync_kit.canary.systemd import UnitOptions, command_line, render_units


def sqlite_file(path: Path) -> Path:
    """A SQLite database file (not engram's: install-systemd only checks that --db is one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE t (x)")
    return path


def options(tmp_path: Path, **overrides: object) -> UnitOptions:
    values: dict[str, object] = {"executable": CANARY, "db_path": tmp_path / "engram data" / "engram.db"}
    values.update(overrides)
    return UnitOptions(**values)  # type: ignore[arg-type]


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def test_watch_service_is_hardened_type_simple(tmp_path: Path) -> None:
    watch = unit_settings(render_units(options(tmp_path))["engram-canary-watch.service"])

    assert watch["Type"] == ["simple"]
    assert watch["ExecStart"] == [f'{CANARY} watch --db "{tmp_path}/engram data/engram.db"']
    assert watch["Restart"] == ["on-failure"]
    assert watch["ReadWritePaths"] == [f'"{tmp_path}/engram data"']
    for setting, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "RestrictNamespaces": "yes",
        "CapabilityBoundingSet": "",
        "UMask": "0077",
    }.items():
        assert watch[setting] == [value], setting
    assert watch["WantedBy"] == ["default.target"]


def test_timer_runs_the_check_service(tmp_path: Path) -> None:
    units = render_units(options(tmp_path, textfile_dir=tmp_path / "prom", on_calendar="hourly"))
    timer = unit_settings(units["engram-canary-check.timer"])
    check = unit_settings(units["engram-canary-check.service"])

    assert timer["OnCalendar"] == ["hourly"]
    assert timer["Unit"] == ["engram-canary-check.service"]
    assert timer["Persistent"] == ["true"]
    assert check["Type"] == ["oneshot"]
    assert check["ExecStart"] == [
        f'{CANARY} check --db "{tmp_path}/engram data/engram.db" --textfile-dir {tmp_path}/prom'
    ]
    assert check["ReadWritePaths"] == [f'"{tmp_path}/engram data" {tmp_path}/prom']


def test_system_units_run_as_a_user(tmp_path: Path) -> None:
    watch = unit_settings(
        render_units(options(tmp_path, system=True, user="alice"))["engram-canary-watch.service"]
    )

    assert watch["User"] == ["alice"]
    assert watch["WantedBy"] == ["multi-user.target"]


def test_specifiers_and_variables_are_escaped() -> None:
    assert command_line(["echo", "100%", "$HOME", 'say "hi"']) == 'echo 100%% $$HOME "say \\"hi\\""'


def test_print_writes_nothing(tmp_path: Path) -> None:
    db = sqlite_file(tmp_path / "engram.db")
    result = run_canary(["install-systemd", "--db", str(db), "--print"], tmp_path / "xdg")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# engram-canary-watch.service\n[Unit]\n")
    assert "# engram-canary-check.timer\n" in result.stdout
    assert not (tmp_path / "xdg").exists()


def test_install_writes_user_units_by_default(tmp_path: Path) -> None:
    result = run_canary(
        ["install-systemd", "--db", str(sqlite_file(tmp_path / "engram.db"))], tmp_path / "xdg"
    )

    unit_dir = tmp_path / "xdg" / "systemd" / "user"
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in unit_dir.iterdir()) == [
        "engram-canary-check.service",
        "engram-canary-check.timer",
        "engram-canary-watch.service",
    ]
    assert result.stdout.splitlines()[-1] == (
        "enable with: systemctl --user daemon-reload && systemctl --user enable --now "
        "engram-canary-watch.service engram-canary-check.timer"
    )


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is not installed (Debian's systemd package)")
    unit_dir = tmp_path / "units"
    result = run_canary(
        [
            "install-systemd",
            "--db",
            str(sqlite_file(tmp_path / "data" / "engram.db")),
            "--unit-dir",
            str(unit_dir),
        ],
        tmp_path / "xdg",
    )
    assert result.returncode == 0, result.stderr

    verify = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(path) for path in unit_dir.iterdir())],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert verify.returncode == 0, verify.stderr
    assert verify.stderr == "", verify.stderr


def test_the_services_may_write_the_canarys_state_dir(tmp_path: Path) -> None:
    # Before: ReadWritePaths left the state dir out (ProtectHome=read-only), so the unchanged-check cache
    # was silently lost and every timer run read the whole database again.
    state = tmp_path / "state dir"
    units = render_units(options(tmp_path, state_dir=state))
    for name in ("engram-canary-watch.service", "engram-canary-check.service"):
        service = unit_settings(units[name])
        assert service["ReadWritePaths"] == [f'"{tmp_path}/engram data" "{state}"'], name
        assert service["Environment"] == [f'"ENGRAM_CANARY_STATE_DIR={state}"'], name
    system = unit_settings(
        render_units(options(tmp_path, system=True, user="alice", state_dir=state))[
            "engram-canary-check.service"
        ]
    )
    assert system["StateDirectory"] == ["engram-canary"]
    assert system["Environment"] == ["ENGRAM_CANARY_STATE_DIR=/var/lib/engram-canary"]
    assert system["ReadWritePaths"] == [f'"{tmp_path}/engram data"']


def test_install_creates_the_state_dir_the_units_name(tmp_path: Path) -> None:
    result = run_canary(
        ["install-systemd", "--db", str(sqlite_file(tmp_path / "engram.db"))], tmp_path / "xdg"
    )
    assert result.returncode == 0, result.stderr
    state = tmp_path / "xdg" / "engram-canary-state"  # canary_env's ENGRAM_CANARY_STATE_DIR
    assert state.is_dir() and state.stat().st_mode & 0o777 == 0o700
    watch = (tmp_path / "xdg" / "systemd" / "user" / "engram-canary-watch.service").read_text()
    assert f"ReadWritePaths={tmp_path} {state}\n" in watch


@pytest.mark.parametrize("kind", ["directory", "missing", "not sqlite", "empty"])
def test_install_refuses_a_db_that_is_no_database_file(tmp_path: Path, kind: str) -> None:
    # Before: each of these wrote units and exited 0; the watcher then failed at every start.
    db = tmp_path / "engram.db"
    if kind == "directory":
        db.mkdir()
    elif kind == "not sqlite":
        db.write_text("notes, not a database\n")
    elif kind == "empty":
        db.write_bytes(b"")
    said = {"directory": "a directory, not a database file", "missing": "no such file"}.get(
        kind, "not a SQLite database"
    )
    result = run_canary(["install-systemd", "--db", str(db)], tmp_path / "xdg")
    assert (result.returncode, result.stdout) == (3, "")
    assert result.stderr == (
        f"engram-canary: error: --db {db}: {said}; give --db engram's engram.db (engram creates it when it first "
        "runs)\n"
    )
    assert not (tmp_path / "xdg").exists()
