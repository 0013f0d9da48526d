"""The systemd units: content, quoting, --print, and systemd-analyze verify where it exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from canary_support import CANARY, run_canary
from real_parts import missing

from engram_sync_kit.canary.systemd import UnitOptions, command_line, render_units


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
    result = run_canary(["install-systemd", "--db", str(tmp_path / "engram.db"), "--print"], tmp_path / "xdg")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# engram-canary-watch.service\n[Unit]\n")
    assert "# engram-canary-check.timer\n" in result.stdout
    assert not (tmp_path / "xdg").exists()


def test_install_writes_user_units_by_default(tmp_path: Path) -> None:
    result = run_canary(["install-systemd", "--db", str(tmp_path / "engram.db")], tmp_path / "xdg")

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
        ["install-systemd", "--db", str(tmp_path / "data" / "engram.db"), "--unit-dir", str(unit_dir)],
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
