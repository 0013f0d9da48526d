"""--workspace: the deployment's home dir on disk, with a real git repository per repo it worked in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from engram_sync_kit.harness.deployment.history import History
from engram_sync_kit.harness.deployment.spec import DeploymentError


def check_workspace(workspace: Path) -> None:
    if not workspace.is_dir():
        raise DeploymentError(f"{workspace}: no such directory for --workspace")
    enclosing = next(
        (p for p in (workspace.resolve(), *workspace.resolve().parents) if (p / ".git").exists()), None
    )
    if enclosing is not None:
        raise DeploymentError(
            f"{workspace}: inside the git repository {enclosing}; --workspace must be outside any repository"
        )


def materialize(history: History) -> None:
    """Create the deployment's home dir on disk: a real git repository per repo, plain dirs for the rest."""
    git = shutil.which("git")
    if git is None:
        raise DeploymentError("--workspace needs git on PATH to create the deployment's repositories")
    directories = {
        session.directory for session in history.sessions if session.directory.startswith(history.home_dir)
    }
    repositories = {f"{history.home_dir}/code/{name}" for name in history.repositories}
    for directory in sorted(directories | repositories):
        Path(directory).mkdir(parents=True, exist_ok=True)
    for repository in sorted(repositories):
        result = subprocess.run(
            [git, "init", "-q", repository], capture_output=True, text=True, check=False, timeout=60
        )
        if result.returncode != 0:
            raise DeploymentError(f"git init {repository} failed: {result.stderr.strip()}")
