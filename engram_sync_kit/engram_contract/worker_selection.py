"""Which journal rows engram v1.20's sync worker pushes, written once for the canary and the harness.

The worker (ListPendingSyncMutations) lists the legacy lane's unacked rows whose project is empty or
enrolled, in seq order. An unacked legacy-lane row with a non-empty project that is not enrolled is never
pushed: the canary's inbox. Without a sync_enrolled_projects table only the empty project is listed.
The SQL keeps the exact text the canary used before, so the planner picks the same indexes.
"""

from __future__ import annotations

from collections.abc import Collection

from engram_sync_kit.engram_contract.names import LEGACY_TARGET

ENROLLED_PROJECTS_SQL = "SELECT project FROM sync_enrolled_projects"


def legacy_unacked(prefix: str = "") -> str:
    """SQL: the row is on the legacy lane and not acked (`prefix` is a table alias with its dot)."""
    return f"{prefix}target_key = '{LEGACY_TARGET}' AND {prefix}acked_at IS NULL"


def worker_lists(prefix: str = "", *, enrollment_table: bool = True) -> str:
    """SQL: the row's project lets the worker push it: empty, or enrolled."""
    project = f"{prefix}project"
    if not enrollment_table:
        return f"{project} = ''"
    return f"({project} = '' OR {project} IN ({ENROLLED_PROJECTS_SQL}))"


def worker_skips(prefix: str = "", *, enrollment_table: bool = True) -> str:
    """SQL: the negation of worker_lists: a non-empty project that is not enrolled."""
    project = f"{prefix}project"
    if not enrollment_table:
        return f"{project} != ''"
    return f"{project} != '' AND {project} NOT IN ({ENROLLED_PROJECTS_SQL})"


def worker_pushes(prefix: str = "", *, enrollment_table: bool = True) -> str:
    """SQL: the rows the v1.20 worker pushes."""
    return f"{legacy_unacked(prefix)} AND {worker_lists(prefix, enrollment_table=enrollment_table)}"


def worker_pushes_row(target_key: str, acked_at: object, project: str, enrolled: Collection[str]) -> bool:
    """The same rule for one row already read (names compared as stored, like engram)."""
    return target_key == LEGACY_TARGET and acked_at is None and (project == "" or project in enrolled)
