"""What holds rows back, in the words of engram and of the cloud, and the commands that clear it.

validate does not derive its own advice: the canary's lane health (canary.lane_health) names the rows the
cloud refuses (every one, 400 and 500 alike, by the shared push contract), the rows they hold back per
project, engram's own `sync_state` record (lifecycle, last_error, failures) and the commands that clear
the block (`repair`, `inbox drop --unattributed`, `inbox drop --seq`). This module reads that on a copy
and turns it, with the per-lane counts of a run, into the `stuck` table: per lane and project, how many
rows and why.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from engram_sync_kit.canary.config import load_config
from engram_sync_kit.canary.db import EngramDb
from engram_sync_kit.canary.errors import CanaryError
from engram_sync_kit.canary.inbox.aliases import default_aliases_path
from engram_sync_kit.canary.lane_health import LaneHealth as CanaryLaneHealth
from engram_sync_kit.canary.lane_health import clear_commands, read_lane_health
from engram_sync_kit.canary.settings import CONFIG_ENV
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.harness.validate.model import Blocker, LaneHealth, LaneRow, LanesHealth, StuckRow

NO_PROJECT = "(no project)"  # one name for rows without a project, in every table of every report
_SHOWN_SEQS = 10


def project_name(project: str) -> str:
    return project if project.strip() else NO_PROJECT


def read_lanes_health(db: Path) -> LanesHealth:
    """The canary's lane health of DB (one short read transaction) and the enrolled projects."""
    with EngramDb.open(db) as engram, engram.read_transaction():
        healths = read_lane_health(engram)
        enrolled = sorted(engram.enrolled_projects())
    return LanesHealth(lanes=[_lane_health(health) for health in healths], enrolled=enrolled)


def _lane_health(health: CanaryLaneHealth) -> LaneHealth:
    return LaneHealth(
        target_key=health.target_key,
        lifecycle=health.lifecycle,
        last_error=health.last_error,
        consecutive_failures=health.consecutive_failures,
        pending=health.pending,
        blocked=health.blocked,
        blockers=[
            Blocker(
                seq=blocker.row.seq,
                project=blocker.row.project,
                entity=blocker.row.entity,
                status=blocker.refusal.status,
                reason=blocker.reason,
                repairable=blocker.repairable,
            )
            for blocker in health.blockers
        ],
        held_back_by_project=dict(sorted(health.held_back.items())),
        # the canary's own clear commands, as plan lines (validate adds --db and --apply itself)
        way_out=[_plan_line(command) for command in clear_commands(health)],
    )


def _plan_line(command: str) -> str:
    words = shlex.split(command)
    return shlex.join(word for word in words if word != "--apply")


def way_out(health: LanesHealth) -> list[str]:
    """The plan lines that clear every blocked lane, in the canary's order."""
    return [line for lane in blocked_lanes(health) for line in lane.way_out]


def blocked_lanes(health: LanesHealth) -> list[LaneHealth]:
    return [lane for lane in health.lanes if lane.blocked]


def stuck_rows(lanes: Sequence[LaneRow], health: LanesHealth) -> list[StuckRow]:
    """Per lane and project, the undelivered rows of a run and why, most specific reason first.

    `refused`: the row itself fails the cloud's push contract (status and reason); `held back`: a row the
    worker reads that waits behind a refused row (engram stops its cycle at the first refusal);
    `not enrolled`: a legacy-lane row of a project that is not enrolled (engram never sends it; the
    inbox); `per-project lane`: a `cloud:<project>` row v1.20's worker never reads; `waiting`: the worker
    reads it and nothing blocks it (the run ended first).
    """
    enrolled = set(health.enrolled)
    legacy = next((lane for lane in health.lanes if lane.target_key == LEGACY_TARGET), None)
    engram_said = _first_line((legacy.last_error if legacy else None) or "")
    not_enrolled = "the project is not enrolled: engram never sends it (the inbox)"
    if "not enrolled" in engram_said:
        not_enrolled += f"; engram: {engram_said}"
    accounted: Counter[tuple[str, str]] = Counter()
    found: list[StuckRow] = []
    for lane in health.lanes:
        target = lane.target_key
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        for blocker in lane.blockers:
            groups[(blocker.project, blocker.reason)].append(blocker.seq)
        for (project, reason), seqs in groups.items():
            found.append(_entry(target, project, len(seqs), "refused", reason, seqs))
            accounted[(target, project)] += len(seqs)
        first = lane.blockers[0] if lane.blockers else None
        behind = (
            f"behind seq {first.seq} ({first.reason}): engram's worker stops its cycle at the first row "
            "the cloud refuses"
            if first
            else f"the lane is {lane.lifecycle}: {lane.last_error}"
        )
        for project, rows in lane.held_back_by_project.items():
            found.append(_entry(target, project, rows, "held back", behind, []))
            accounted[(target, project)] += rows
    for row in lanes:
        rest = row.stranded + row.refused - accounted[(row.lane, row.project)]
        if rest <= 0:
            continue
        if row.lane == LEGACY_TARGET and row.project.strip() and row.project not in enrolled:
            kind, reason = "not enrolled", not_enrolled
        elif row.lane.startswith(LEGACY_TARGET + ":"):
            kind, reason = "per-project lane", "engram v1.20's worker never reads a per-project lane"
        elif row.lane == LEGACY_TARGET:
            kind, reason = "waiting", "the worker reads it; the run ended before it was sent"
        else:
            kind, reason = "other lane", f"lane {row.lane} is not the cloud worker's"
        found.append(_entry(row.lane, row.project, rest, kind, reason, []))
    order = {"refused": 0, "held back": 1, "not enrolled": 2, "per-project lane": 3, "waiting": 4}
    return sorted(found, key=lambda e: (order.get(e.kind, 5), e.lane != LEGACY_TARGET, -e.rows))


def _entry(lane: str, project: str, rows: int, kind: str, reason: str, seqs: list[int]) -> StuckRow:
    return StuckRow(
        lane=lane, project=project_name(project), rows=rows, kind=kind, reason=reason, seqs=seqs[:_SHOWN_SEQS]
    )


def runnable(args: Sequence[str], db: Path) -> str:
    """A plan line as the tester runs it: the canary on the tester's own database, --apply."""
    return shlex.join(["engram-canary", *args, "--db", str(db), "--apply"])


def runnable_commands(chosen: Sequence[Sequence[str]], db: Path, aliases: Path | None) -> list[str]:
    """The plan's lines as the tester runs them. The canary reads the alias map from its config key
    inbox.aliases (`--aliases` is deprecated), so a map the canary would not read by itself is named in a
    leading shell comment that says where to set it."""
    commands = [runnable(args, db) for args in chosen]
    if aliases is None or not any(tuple(args[:1]) == ("inbox",) for args in chosen):
        return commands
    read = canary_alias_map()
    if read is not None and _same_file(read, aliases):
        return commands
    # Not the config's own path: it names the tester's home, which --anonymize hides.
    note = (
        f"# first set inbox: aliases: {aliases} in the canary's config file (engram-canary config names it)"
    )
    return [note, *commands]


def canary_alias_map() -> Path | None:
    """The alias map the canary reads when run with no option: config inbox.aliases, else the documented
    default; None when its config cannot be read."""
    named = os.environ.get(CONFIG_ENV, "").strip()
    try:
        config, _ = load_config(Path(named) if named else None)
    except CanaryError:
        return None
    return config.inbox.aliases or default_aliases_path()


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.expanduser().resolve() == other.expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def _first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
