"""A git worktree of another revision, for the benchmarks that measure it side by side (--against)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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
