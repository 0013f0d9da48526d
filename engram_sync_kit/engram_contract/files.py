"""Where the kit's files live and how they are replaced: shared by every package that writes one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def xdg_config_home() -> Path:
    """$XDG_CONFIG_HOME when set to an absolute path, else ~/.config: the XDG base directory rule (a
    relative path is invalid and ignored)."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"


def atomic_write(path: Path, text: str) -> None:
    """Replace PATH with TEXT so a reader sees the old file or the new one, never a torn one, and the
    new bytes are on disk before the name points at them (fsync, then rename). OSError on failure,
    with no temporary file left behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
