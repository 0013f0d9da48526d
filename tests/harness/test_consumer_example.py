"""examples/consumer as a gate from outside the repository: the kit's wheel in a clean virtual
environment, the example's own pytest config, a real engram (must pass) and none (must fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [str(arg) for arg in args], capture_output=True, text=True, timeout=600, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def gate_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kit's wheel, built from the working tree's files, installed with [harness] in a fresh venv."""
    root = tmp_path_factory.mktemp("gate")
    files = run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO).stdout.splitlines()
    source = root / "source"
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "wheels", source])
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (root / "wheels").glob("engram_sync_kit-*.whl")
    venv = root / "venv"
    assert run([sys.executable, "-m", "venv", venv]).returncode == 0
    installed = run([venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[harness]"])
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv


def consumer_env(root: Path, venv: Path) -> dict[str, str]:
    # Nothing of this repository or its venv: another HOME (so no cached engram), no Go on PATH.
    keep = {key: os.environ[key] for key in ("LANG", "TMPDIR") if key in os.environ}
    return {**keep, "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(root / "home"), "CI": "true"}


@pytest.mark.engram
def test_the_example_consumer_passes_with_an_engram_and_fails_without(
    gate_venv: Path, tmp_path: Path, engram_bin: Path
) -> None:
    consumer = tmp_path / "consumer"
    shutil.copytree(REPO / "examples" / "consumer", consumer)
    env = consumer_env(tmp_path, gate_venv)
    pytest_in_venv: list[str | Path] = [
        gate_venv / "bin" / "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
    ]

    gate = run([*pytest_in_venv, f"--scenario-engram={engram_bin}", "--scenario-junit", "reports/design.xml"],
               cwd=consumer, env=env)  # fmt: skip
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-2000:]
    assert f"rootdir: {consumer}" in gate.stdout and "configfile: pyproject.toml" in gate.stdout
    assert "2 passed" in gate.stdout
    assert (consumer / "reports" / "design.xml").is_file()

    no_engram = run(pytest_in_venv, cwd=consumer, env=env)
    assert no_engram.returncode == 4, no_engram.stdout[-3000:]
    assert [line for line in no_engram.stderr.splitlines() if line] == [
        "ERROR: no engram binary for 2 scenario(s): give --scenario-engram=PATH or set ENGRAM_BIN=PATH (the "
        "build under test); --scenario-engram-installed plays the release `engram-harness engram install` "
        "built; --scenario-skip-without-engram skips them instead"
    ]
