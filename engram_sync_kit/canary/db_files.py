"""engram's database files as the file system sees them, without opening SQLite.

The watcher needs three answers that no SQLite connection can give it without harm: did someone write
the files since the last look (a stat fingerprint; the canary's own reads change none of it), is an
engram process still inside the file (SQLite's POSIX lock bytes, read with F_GETLK), and does a `-wal`
hold frames while the file it was written for may be gone.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

# SQLite's unix VFS locks these bytes of the database file (os_unix.c: PENDING_BYTE 0x40000000, then the
# RESERVED byte and the 510-byte SHARED range). A WAL-mode connection keeps its SHARED lock while open.
SQLITE_LOCK_FIRST = 0x40000000
SQLITE_LOCK_BYTES = 512
WAL_HEADER_BYTES = 32
WAL_INDEX_HEADER_BYTES = 48
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on 64-bit Linux: type, whence, start, len, pid


def wal_path(db: Path) -> Path:
    return db.with_name(f"{db.name}-wal")


@dataclass(frozen=True)
class FileFingerprint:
    """What a writer changes and a reader does not: the database file's identity, size and mtime, the
    `-wal`'s size and mtime once it holds more than its header (a reader may create an empty one), and
    the wal-index header in `-shm`, whose change counter and last frame move with every commit (file
    mtimes are as coarse as the kernel tick, and a reset `-wal` is rewritten without growing)."""

    identity: tuple[int, int]
    size: int
    mtime_ns: int
    wal: tuple[int, int] | None
    wal_index: bytes

    @classmethod
    def read(cls, db: Path) -> FileFingerprint | None:
        """None when nothing is at `db`."""
        try:
            found = os.stat(db)
        except OSError:
            return None
        return cls(
            (found.st_dev, found.st_ino),
            found.st_size,
            found.st_mtime_ns,
            _wal_state(db),
            _wal_index_header(db),
        )


def _wal_state(db: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(wal_path(db))
    except OSError:
        return None
    return (found.st_size, found.st_mtime_ns) if found.st_size > WAL_HEADER_BYTES else None


def _wal_index_header(db: Path) -> bytes:
    """The first copy of the wal-index header (SQLite's WAL format: iVersion, iChange, mxFrame, nPage,
    checksums, salts), read as plain bytes; a torn read only costs one more look."""
    try:
        with open(db.with_name(f"{db.name}-shm"), "rb") as index:
            return index.read(WAL_INDEX_HEADER_BYTES)
    except OSError:
        return b""


def wal_frame_bytes(db: Path) -> int:
    """Bytes of frames in `db`'s -wal (0 when it is absent or holds only a header)."""
    state = _wal_state(db)
    return state[0] - WAL_HEADER_BYTES if state is not None else 0


def process_age_seconds(pid: int) -> float | None:
    """How long process `pid` has been running (Linux: /proc/PID/stat's start time against /proc/uptime),
    or None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
        # The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
        started_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def lock_holder(db: Path) -> int | None:
    """The pid of another process holding one of SQLite's locks on `db` (a connection inside it), or None.

    Only the caller's own process is invisible to F_GETLK; the caller must hold no connection to `db`,
    since closing this probe's descriptor would drop its process's locks on the file."""
    try:
        descriptor = os.open(db, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        probe = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, SQLITE_LOCK_FIRST, SQLITE_LOCK_BYTES, 0)
        kind, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(descriptor, fcntl.F_GETLK, probe))
    except (OSError, struct.error):
        return None
    finally:
        os.close(descriptor)
    return None if kind == fcntl.F_UNLCK else int(pid)
