"""Another revision's tree (a git worktree, or some packages extracted), for the benchmarks that measure it
side by side (--against)."""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def checkout(revision: str, workdir: Path) -> Iterator[Path]:
    tree = workdir / f"tree-{revision}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )


def extract(revision: str, into: Path, packages: tuple[str, ...] = ("fake_cloud", "engram_contract")) -> None:
    """REVISION's PACKAGES, unpacked under INTO (git archive; no worktree to clean up)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, *packages], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
