"""The kit installs like a user's tool: the wheel, built without writing into the checkout, goes into a
clean venv outside the repository, with no Go on PATH, and its commands work on a home the real engram
v1.20.0 made. The base install carries the canary and the fake cloud only; the harness names its extra."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_readme import first_check_output

from engram_sync_kit.engram_contract.version import __version__

# One build and one venv for the module: the tests share a worker under xdist (make test runs --dist loadgroup).
pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("install")]

REPOSITORY = Path(__file__).resolve().parent.parent
HARNESS_ONLY = {"rich", "faker", "pytest", "docker", "testcontainers"}
PROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# The installed import names: "" while the packages install at the top level, "engram_sync_kit." once
# they live under the kit's own namespace (read from the entry point, so this test holds either way).
IMPORT_PREFIX = PROJECT["scripts"]["engram-canary"].split(":")[0].rpartition("canary.")[0]
TOP_LEVEL = (
    {IMPORT_PREFIX.rstrip(".")} if IMPORT_PREFIX else {"canary", "harness", "fake_cloud", "engram_contract"}
)


def _without_go(path: str) -> str:
    return os.pathsep.join(
        directory
        for directory in path.split(os.pathsep)
        if directory and shutil.which("go", path=directory) is None
    )


def _tree_entries() -> set[str]:
    """What a build could leave in the checkout: the root's entries and each package folder's."""
    entries = {entry.name for entry in REPOSITORY.iterdir()}
    for package in ("canary", "harness", "fake_cloud", "engram_contract"):
        folder = REPOSITORY / "engram_sync_kit" / package
        entries |= {f"{package}/{entry.name}" for entry in folder.iterdir()}
    return entries - {"__pycache__"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kit's wheel, built without writing into the checkout."""
    work = tmp_path_factory.mktemp("wheel")
    before = _tree_entries()
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(REPOSITORY)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert "Deprecat" not in built.stdout + built.stderr
    assert _tree_entries() - before == set(), "the build wrote into the source folder"
    (wheel,) = (work / "dist").glob("engram_sync_kit-*.whl")
    assert wheel.name == f"engram_sync_kit-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        modules = [name for name in archive.namelist() if name.endswith(".py")]
    assert {name.split("/")[0] for name in modules} == TOP_LEVEL
    return wheel


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel installed into a fresh venv; yields the venv's bin directory."""
    work = tmp_path_factory.mktemp("install")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=work,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    yield venv / "bin"


def _user_env(bin_dir: Path, home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ENGRAM_", "PYTHON", "XDG_", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), _without_go(os.environ.get("PATH", ""))])
    env["HOME"] = str(home)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_a_new_user_installs_the_wheel_and_checks_a_real_engram_home(
    installed: Path, engram_bin: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    project = home / "notes"
    project.mkdir(parents=True)
    env = _user_env(installed, home)
    assert shutil.which("go", path=env["PATH"]) is None

    # The real engram writes its default home, ~/.engram/engram.db, for a project nobody enrolled.
    saved = _run(
        [str(engram_bin), "save", "first note", "what I learned", "--project", "notes"], env, project
    )
    assert saved.returncode == 0, saved.stderr
    assert (home / ".engram" / "engram.db").is_file()

    for tool in ("engram-canary", "engram-fake-cloud", "engram-harness"):
        version = _run([tool, "--version"], env, tmp_path)
        assert (version.returncode, version.stdout) == (0, f"{tool}, version {__version__}\n"), version.stderr

    check = _run(["engram-canary", "check"], env, tmp_path)
    assert check.returncode == 1, check.stdout + check.stderr
    assert check.stdout.startswith("ENGRAM-CANARY WARNING - 1 foreign sync target (1 new)"), check.stdout
    assert check.stderr == ""
    # The README pastes this very output (only engram's updated_at differs).
    moment = re.compile(r'updated_at="[^"]*"')
    assert moment.sub("updated_at=T", check.stdout) == moment.sub("updated_at=T", first_check_output())

    where = _run(
        [
            str(installed / "python"),
            "-c",
            f"import {IMPORT_PREFIX}canary as c, {IMPORT_PREFIX}harness.library as l;"
            " print(c.__file__); print(l.scenario_library())",
        ],
        env,
        tmp_path,
    )
    canary_file, library = where.stdout.split()
    assert Path(canary_file).is_relative_to(installed.parent), "the canary ran from the checkout"
    assert Path(library).is_relative_to(installed.parent)
    assert len(list(Path(library).rglob("*.scenario.yaml"))) >= 20


def test_the_fake_cloud_of_the_same_install_answers(installed: Path, tmp_path: Path) -> None:
    env = _user_env(installed, tmp_path)
    server = subprocess.Popen(
        ["engram-fake-cloud", "serve", "--port", "0", "--token", "T"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base_url), base_url
        answer = httpx.get(f"{base_url}/health", timeout=10)
        assert answer.status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=15)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


def test_the_base_install_leaves_the_harness_to_its_extra(installed: Path, tmp_path: Path) -> None:
    env = _user_env(installed, tmp_path)
    listed = _run([str(installed / "python"), "-m", "pip", "list", "--format=freeze"], env, tmp_path)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert names & HARNESS_ONLY == set()

    run = _run(["engram-harness", "run"], env, tmp_path)
    assert run.returncode == 3
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1
    assert "[harness] extra" in run.stderr
    # Before: "pipx install 'engram-sync-kit[harness]'", which says "already installed" after a wheel
    # install, and goes to a package index that has no such package with --force.
    assert run.stderr.endswith("\n")
    command = shlex.split(run.stderr.split("install it with: ", 1)[1])
    assert command[:4] == [str(installed / "python"), "-m", "pip", "install"]
    assert same_requirements(command[4:])


HARNESS_EXTRA = [Requirement(text) for text in PROJECT["optional-dependencies"]["harness"]]


def same_requirements(tokens: list[str]) -> bool:
    """The tokens name the [harness] extra's requirements exactly (specifier order aside)."""

    def named(requirement: Requirement) -> tuple[str, str]:
        return canonicalize_name(requirement.name), str(requirement.specifier)

    return sorted(named(Requirement(token)) for token in tokens) == sorted(map(named, HARNESS_EXTRA))


def _follow_the_hint(env: dict[str, str], cwd: Path) -> str:
    """Run engram-harness without its extra, run the command its one line names, exactly as printed;
    return that command."""
    refused = _run(["engram-harness", "run", "--help"], env, cwd)
    assert refused.returncode == 3 and refused.stdout == "", refused.stderr
    hint = refused.stderr.rstrip("\n").rpartition("install it with: ")[2]
    followed = subprocess.run(
        shlex.split(hint), env=env, cwd=cwd, capture_output=True, text=True, timeout=900, check=False
    )
    assert followed.returncode == 0, f"{hint}\n{followed.stdout[-2000:]}{followed.stderr[-2000:]}"
    working = _run(["engram-harness", "run", "--help"], env, cwd)
    assert working.returncode == 0, working.stderr
    assert "--engram-version-as VERSION" in working.stdout
    return hint


def test_the_harness_hint_of_a_venv_install_adds_the_extra_when_followed(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = _user_env(venv / "bin", tmp_path)
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], env, tmp_path)
    assert pip.returncode == 0, pip.stderr[-2000:]
    assert _follow_the_hint(env, tmp_path).startswith(f"{venv / 'bin' / 'python'} -m pip install ")


def test_the_harness_hint_of_a_pipx_install_adds_the_extra_when_followed(wheel: Path, tmp_path: Path) -> None:
    pipx = Path(sys.executable).parent / "pipx"  # the dev extra's pipx, the only one on this PATH
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "pipx").symlink_to(pipx)
    env = _user_env(tmp_path / "bin", tmp_path)
    env["PATH"] = os.pathsep.join([str(tmp_path / "bin"), str(tools), "/usr/bin", "/bin"])
    env |= {"PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    env |= {"PIPX_MAN_DIR": str(tmp_path / "man"), "PIPX_DEFAULT_PYTHON": sys.executable}
    installed = _run(["pipx", "install", str(wheel)], env, tmp_path)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    command = shlex.split(_follow_the_hint(env, tmp_path))
    assert command[:3] == ["pipx", "inject", "engram-sync-kit"] and same_requirements(command[3:])


def test_the_base_dependencies_are_what_the_canary_and_the_fake_cloud_import() -> None:
    """Every third-party import of canary, fake_cloud and engram_contract (lazy ones too) is a base
    dependency, and no base dependency belongs to the harness only."""
    import ast

    project = PROJECT
    distribution_of = {"yaml": "pyyaml", "prometheus_client": "prometheus-client"}
    base = {re.split(r"[=<>\[ ]", requirement)[0].lower() for requirement in project["dependencies"]}
    ours = {"canary", "fake_cloud", "engram_contract", "harness", "engram_sync_kit"}
    imported: set[str] = set()
    for package in ("canary", "fake_cloud", "engram_contract"):
        for source in (REPOSITORY / package).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    imported |= {
                        alias.name.removeprefix("engram_sync_kit.").split(".")[0] for alias in node.names
                    }
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.removeprefix("engram_sync_kit.").split(".")[0])
    third_party = {name for name in imported - ours if name not in sys.stdlib_module_names}
    assert {distribution_of.get(name, name).lower() for name in third_party} <= base
    assert base & HARNESS_ONLY == set()
    assert isinstance(project["license"], str), "project.license must be an SPDX expression"
    assert project["license"] == "MIT"
    extra = {
        Requirement(requirement).name.lower() for requirement in project["optional-dependencies"]["harness"]
    }
    assert extra >= HARNESS_ONLY
