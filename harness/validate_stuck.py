"""What holds rows back, in the words of engram and of the cloud, and the commands that clear it.

validate does not derive its own advice: the canary's lane health (canary.lane_health) names the rows the
cloud refuses (every one, 400 and 500 alike, by the shared push contract), the rows they hold back per
project, engram's own `sync_state` record (lifecycle, last_error, failures) and the commands that clear
the block (`repair`, `inbox drop --unattributed`, `inbox drop --seq`). This module reads that on a copy
and turns it, with the per-lane counts of a run, into the `stuck` table: per lane and project, how many
rows and why.
"""

from __future__ import annotations

import shlex
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engram_sync_kit.canary.db import EngramDb, enrolled_projects
from engram_sync_kit.canary.lane_health import LaneHealth, clear_commands, read_lane_health
from engram_sync_kit.engram_contract import LEGACY_TARGET

NO_PROJECT = "(no project)"  # one name for rows without a project, in every table of every report
_SHOWN_SEQS = 10


def project_name(project: str) -> str:
    return project if project.strip() else NO_PROJECT


def read_lanes_health(db: Path) -> dict[str, Any]:
    """The canary's lane health of DB (one short read transaction) and the enrolled projects."""
    with EngramDb.open(db) as engram, engram.read_transaction() as connection:
        healths = read_lane_health(connection, engram.schema)
        enrolled = sorted(enrolled_projects(connection, engram.schema))
    return {"lanes": [_health_json(health) for health in healths], "enrolled": enrolled}


def _health_json(health: LaneHealth) -> dict[str, Any]:
    return {
        "target_key": health.target_key,
        "lifecycle": health.lifecycle,
        "last_error": health.last_error,
        "consecutive_failures": health.consecutive_failures,
        "pending": health.pending,
        "blocked": health.blocked,
        "blockers": [
            {
                "seq": blocker.row.seq,
                "project": blocker.row.project,
                "entity": blocker.row.entity,
                "status": blocker.refusal.status,
                "reason": blocker.reason,
                "repairable": blocker.repairable,
            }
            for blocker in health.blockers
        ],
        "held_back_by_project": dict(sorted(health.held_back.items())),
        # the canary's own clear commands, as plan lines (validate adds --db and --apply itself)
        "way_out": [_plan_line(command) for command in clear_commands(health)],
    }


def _plan_line(command: str) -> str:
    words = shlex.split(command)
    return shlex.join(word for word in words if word != "--apply")


def way_out(health: dict[str, Any]) -> list[str]:
    """The plan lines that clear every blocked lane, in the canary's order."""
    return [line for lane in health["lanes"] if lane["blocked"] for line in lane["way_out"]]


def blocked_lanes(health: dict[str, Any]) -> list[dict[str, Any]]:
    return [lane for lane in health["lanes"] if lane["blocked"]]


def stuck_rows(lanes: Sequence[dict[str, Any]], health: dict[str, Any]) -> list[dict[str, Any]]:
    """Per lane and project, the undelivered rows of a run and why, most specific reason first.

    `refused`: the row itself fails the cloud's push contract (status and reason); `held back`: a row the
    worker reads that waits behind a refused row (engram stops its cycle at the first refusal);
    `not enrolled`: a legacy-lane row of a project that is not enrolled (engram never sends it; the
    inbox); `per-project lane`: a `cloud:<project>` row v1.20's worker never reads; `waiting`: the worker
    reads it and nothing blocks it (the run ended first).
    """
    enrolled = set(health["enrolled"])
    legacy = next((lane for lane in health["lanes"] if lane["target_key"] == LEGACY_TARGET), None)
    engram_said = _first_line((legacy or {}).get("last_error") or "")
    not_enrolled = "the project is not enrolled: engram never sends it (the inbox)"
    if "not enrolled" in engram_said:
        not_enrolled += f"; engram: {engram_said}"
    accounted: Counter[tuple[str, str]] = Counter()
    found: list[dict[str, Any]] = []
    for lane in health["lanes"]:
        target = lane["target_key"]
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        for blocker in lane["blockers"]:
            groups[(blocker["project"], blocker["reason"])].append(int(blocker["seq"]))
        for (project, reason), seqs in groups.items():
            found.append(_entry(target, project, len(seqs), "refused", reason, seqs))
            accounted[(target, project)] += len(seqs)
        first = lane["blockers"][0] if lane["blockers"] else None
        behind = (
            f"behind seq {first['seq']} ({first['reason']}): engram's worker stops its cycle at the first row "
            "the cloud refuses"
            if first
            else f"the lane is {lane['lifecycle']}: {lane['last_error']}"
        )
        for project, rows in lane["held_back_by_project"].items():
            found.append(_entry(target, project, int(rows), "held back", behind, []))
            accounted[(target, project)] += int(rows)
    for row in lanes:
        lane, project = str(row["lane"]), str(row["project"])
        rest = int(row["stranded"]) + int(row["refused"]) - accounted[(lane, project)]
        if rest <= 0:
            continue
        if lane == LEGACY_TARGET and project.strip() and project not in enrolled:
            kind, reason = "not enrolled", not_enrolled
        elif lane.startswith(LEGACY_TARGET + ":"):
            kind, reason = "per-project lane", "engram v1.20's worker never reads a per-project lane"
        elif lane == LEGACY_TARGET:
            kind, reason = "waiting", "the worker reads it; the run ended before it was sent"
        else:
            kind, reason = "other lane", f"lane {lane} is not the cloud worker's"
        found.append(_entry(lane, project, rest, kind, reason, []))
    order = {"refused": 0, "held back": 1, "not enrolled": 2, "per-project lane": 3, "waiting": 4}
    return sorted(found, key=lambda e: (order.get(e["kind"], 5), e["lane"] != LEGACY_TARGET, -e["rows"]))


def _entry(lane: str, project: str, rows: int, kind: str, reason: str, seqs: list[int]) -> dict[str, Any]:
    return {
        "lane": lane,
        "project": project_name(project),
        "rows": rows,
        "kind": kind,
        "reason": reason,
        "seqs": seqs[:_SHOWN_SEQS],
    }


def runnable(args: Sequence[str], db: Path, aliases: Path | None) -> str:
    """A plan line as the tester runs it: the canary on the tester's own database, --apply."""
    words = ["engram-canary", *args, "--db", str(db)]
    if aliases is not None and args[:1] == ["inbox"]:
        words += ["--aliases", str(aliases)]
    return shlex.join([*words, "--apply"])


def _first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
