"""Where the kit's files live and how they are replaced: shared by every package that writes one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
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


#: SQLite's files beside a database: the write-ahead log, its shared-memory index and the rollback journal.
SIDE_FILES = {"-wal": "write-ahead log", "-shm": "shared-memory index", "-journal": "rollback journal"}
SIDE_FILE_SUFFIXES = tuple(SIDE_FILES)


def database_files(db: Path) -> list[Path]:
    """The database and the side files SQLite keeps (or may make) beside it."""
    return [db, *(db.with_name(db.name + suffix) for suffix in SIDE_FILE_SUFFIXES)]


def same_file(first: Path, second: Path) -> bool:
    """One file under two spellings: the same resolved path (relative, `..`, symlinks), or, where both
    exist, the same inode on the same device (a hard link, a bind mount)."""
    try:
        if first.resolve() == second.resolve():
            return True
        one, other = first.stat(), second.stat()
    except (OSError, RuntimeError):
        return False
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def database_file_written_by(output: Path, db: Path) -> Path | None:
    """The file of DB (itself or a side file) that writing OUTPUT would replace, else None."""
    return next((path for path in database_files(db) if same_file(output, path)), None)


def overwrite_problem(
    output: Path, databases: Sequence[Path], inputs: Sequence[tuple[str, Path]]
) -> str | None:
    """Why writing OUTPUT would destroy what the command reads (a database or one of its side files, under
    any spelling; another named input), or would plant a side file beside an existing file that SQLite
    would then read as that file's journal; else None."""
    for db in databases:
        overwritten = database_file_written_by(output, db)
        if overwritten == db:
            return f"would overwrite the database {db}"
        if overwritten is not None:
            what = SIDE_FILES[overwritten.name.removeprefix(db.name)]
            return f"would overwrite {overwritten}, the {what} of the database {db}"
    for label, path in inputs:
        if same_file(output, path):
            return f"would overwrite {label}"
    for suffix in SIDE_FILE_SUFFIXES:
        owner = output.with_name(output.name.removesuffix(suffix))
        if output.name.endswith(suffix) and owner.is_file():
            return f"is where SQLite keeps the {suffix[1:]} of {owner}"
    return None
