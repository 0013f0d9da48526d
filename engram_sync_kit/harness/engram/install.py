"""Obtain real engram binaries: one per version, side by side, in a cache inside the repository.

`go install MODULE/cmd/engram@VERSION` is the documented way. Some module proxies refuse the
version *list* that `go install` reads to look for deprecation notices, while still serving the
module itself; then the same module is fetched with `go mod download` and built from its source.
Either way the binary is compiled from the tagged release, never imitated.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from engram_sync_kit.harness.errors import EngramInstallError
from engram_sync_kit.harness.process_env import environment_snapshot

MODULE_ROOT = "github.com/Gentleman-Programming/engram"
DEFAULT_VERSION = "v1.20.0"
_VERSION_PATTERN = re.compile(r"^v(\d+)\.\d+\.\d+(-[0-9A-Za-z.]+)?$")


@dataclass(frozen=True)
class EngramRelease:
    version: str

    @property
    def major(self) -> int:
        match = _VERSION_PATTERN.match(self.version)
        if match is None:
            raise EngramInstallError(
                f"engram version {self.version!r} is not a release tag; expected vMAJOR.MINOR.PATCH"
            )
        return int(match.group(1))

    @property
    def module(self) -> str:
        return MODULE_ROOT if self.major < 2 else f"{MODULE_ROOT}/v{self.major}"

    @property
    def package(self) -> str:
        return f"{self.module}/cmd/engram"


def parse_release(version: str) -> EngramRelease:
    normalized = f"v{version}" if version[:1].isdigit() else version
    release = EngramRelease(normalized)
    release.major  # noqa: B018 - validates the tag
    return release


def cache_root() -> Path:
    override = os.environ.get("ENGRAM_KIT_CACHE")
    if override:
        return Path(override).expanduser().resolve()
    repo = Path(__file__).resolve().parents[3]
    if (repo / "pyproject.toml").is_file():
        return repo / ".engram"
    return Path.home() / ".cache" / "engram-sync-kit" / "engram"


def cached_binary(version: str) -> Path:
    return cache_root() / parse_release(version).version / "engram"


def find_engram(version: str = DEFAULT_VERSION) -> Path | None:
    """ENGRAM_BIN wins; else the cached build of `version`; else None."""
    override = os.environ.get("ENGRAM_BIN")
    if override:
        return Path(override)
    candidate = cached_binary(version)
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def install_engram(version: str = DEFAULT_VERSION, *, force: bool = False) -> Path:
    """Install `version` into the cache (reused when present) and return the binary's path."""
    release = parse_release(version)
    target = cached_binary(release.version)
    if target.is_file() and not force:
        return target
    go = shutil.which("go")
    if go is None:
        raise EngramInstallError("no Go toolchain on PATH; engram is built with `go install` (Go 1.25+)")
    target.parent.mkdir(parents=True, exist_ok=True)
    ldflags = f"-X main.version={release.version.removeprefix('v')}"
    env = {**environment_snapshot(), "GOBIN": str(target.parent), "CGO_ENABLED": "0"}
    installed = subprocess.run(
        [go, "install", "-ldflags", ldflags, f"{release.package}@{release.version}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if installed.returncode != 0:
        try:
            _build_from_module_source(go, release, target, ldflags, env, first_error=installed.stderr)
        except EngramInstallError:
            with contextlib.suppress(OSError):
                target.parent.rmdir()  # leave no empty version folder that looks installed
            raise
    if not target.is_file():
        raise EngramInstallError(f"building engram {release.version} produced no binary at {target}")
    return target


def _build_from_module_source(
    go: str, release: EngramRelease, target: Path, ldflags: str, env: dict[str, str], first_error: str
) -> None:
    downloaded = subprocess.run(
        [go, "mod", "download", "-json", f"{release.module}@{release.version}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if downloaded.returncode != 0:
        detail = (
            _download_error(downloaded.stdout) or _last_line(downloaded.stderr) or _last_line(first_error)
        )
        raise EngramInstallError(f"cannot fetch engram {release.version}: {detail}")
    source_dir = json.loads(downloaded.stdout)["Dir"]
    built = subprocess.run(
        [go, "build", "-ldflags", ldflags, "-o", str(target), "./cmd/engram"],
        cwd=source_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise EngramInstallError(f"cannot build engram {release.version}: {_last_line(built.stderr)}")


def _download_error(stdout: str) -> str:
    # `go mod download -json` reports a failure in the JSON's Error field, not on stderr.
    try:
        error = json.loads(stdout).get("Error", "")
    except (ValueError, AttributeError):
        return ""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
