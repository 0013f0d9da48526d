"""The invariants explore checks after every step, each against ground truth (the fake cloud's records and
engram's database read-only), never against the canary's own reading of it.

- I1: every row engram acked is in the cloud (lost rows are engram's or, after `ack_without_store`, the
  nemesis's); when rows are lost, `engram-canary reconcile` must name exactly those rows (I1-reconcile).
- I2: right after a worker cycle, the canary's `legacy_lane_blocked` holds exactly when that cycle's last
  push was refused while listed rows still wait at the head of the legacy lane.
- I3: the canary's foreign-target findings match sync_state (and the lanes) and the enrolled set.
- I4: right after a triage --apply (the canary's own claim, drop or repair), no pending row is refused
  that was not refused before (a copy it appended is acceptable to the cloud), no row is lost that was not
  lost before, every (lane, project) delivers at least what it delivered, and every row it acked without
  discarding it has its copy in the database. Rows its log says it acked on purpose are never lost (I1).
- I5: once the nemesis is quiet (faults cleared, pauses resumed) and two worker cycles ran, every enrolled
  project's rows on the legacy lane are delivered. A refusal caused by engram's own rows (a save without a
  project, a session without a directory) is then engram's liveness bug. Its kind is the first waiting row
  the cloud refuses and the field at fault (`refused-session-directory`), or `nothing-refused`.
- I6 (two machines): once the history quiesced (the nemesis quiet, every project enrolled on both machines
  pushed by each and then pulled by each with `engram sync --cloud --import`), every machine holds the same
  live memories (sync_id, title, content) of every project enrolled on both, read from each machine's
  engram.db. A missing memory's class is read from ground truth: undelivered (its own machine's journal
  row still waits: engram's), lost-in-cloud (acked, not stored: the nemesis's after `ack_without_store`)
  or not-pulled (the cloud stores it, the pull did not bring it: engram's); project-differs when the
  machine holds the same sync_id under another project (engram's: e.g. its own row has no project and
  the chunk it pushed carried the session's).

- I8 (no resurrection): after quiescence no machine holds live a memory (sync_id) that a machine of the
  history deleted (soft: deleted_at set) in a project enrolled on all. engram's: the delete never reached
  that machine, or a pull brought the memory back to the one that deleted it.
- I7 (no duplicate delivery): the cloud never stores one memory (a project and explore's unique title) under
  two sync_ids, checked after every step; after quiescence no machine holds one memory twice (two live
  rows with one title and two sync_ids, or two rows with one sync_id) in a project enrolled on all.
  engram's: a client that minted a second id for a memory, or a pull that inserted a row twice.

- I9 (two machines, the worker's pull): after `settle` (the nemesis quiet, two worker cycles), machine A
  holds every memory the cloud's mutation pull serves of a project A enrolled (unless deleted). engram's:
  its cycle ends before the pull while rows of a project it did not enroll wait (#1273's class,
  `blocked-by-unenrolled-rows`) or its push is refused (`blocked-by-refused-push`), or it pulled and did
  not bring it (`not-pulled-by-worker`).

A violation of I2, I3 or I4 (or I1-reconcile) is a bug of ours; I1, I5, I6, I7, I8 and I9 can be engram's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_sync_kit.canary.targets import allowed_targets, normalize_project
from engram_sync_kit.engram_contract import LEGACY_TARGET
from engram_sync_kit.engram_contract.upstream_bugs import (
    SILENT_LOSS_ISSUE,
    WORKER_PULL_BLOCKED_ISSUE,
    issue_for_refusal,
)
from engram_sync_kit.engram_contract.worker_liveness import NON_ENROLLED_PENDING_REASON
from engram_sync_kit.harness.lanes import LaneTable, LocalMutation
from engram_sync_kit.harness.scenario.localdata import MachineMemories
from engram_sync_kit.harness.triage_copies import copy_problems, push_refusal, refusal_of

LANE_BLOCKED = "legacy_lane_blocked"
FOREIGN_CHECKS = ("foreign_sync_target", "foreign_mutation_target")
PUSH_PATH = "/sync/mutations/push"

#: who a violation points at: engram, the kit's own canary/triage, or the nemesis that was told to lose rows
OWNERS = {
    "I1": "engram",
    "I1-reconcile": "ours",
    "I2": "ours",
    "I3": "ours",
    "I4": "ours",
    "I5": "engram",
    "I6": "engram",
    "I7": "engram",
    "I8": "engram",
    "I9": "engram",
}


def whose(owner: str) -> str:
    """How a report names a violation's owner: "engram's", "the nemesis's", "ours"."""
    return owner if owner == "ours" else f"{owner}'s"


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str
    #: extra steps the scenario needs after the violating step (e.g. a canary run), as raw steps
    extra_steps: tuple[dict[str, Any], ...] = ()
    #: expectations (raw mappings, tag design / section invariant) that fail while the violation holds
    expectations: tuple[dict[str, Any], ...] = ()
    nemesis_caused: bool = False
    #: what kind of violation of the invariant it is (e.g. I5's head of the lane): one is shrunk per kind
    signature: str = ""
    #: the filed engram issue whose class this is (engram_contract.upstream_bugs), None when none fits
    upstream: int | None = None

    @property
    def kind(self) -> str:
        return f"{self.invariant}/{self.signature}" if self.signature else self.invariant

    @property
    def owner(self) -> str:
        if self.nemesis_caused:
            return "nemesis"
        return OWNERS.get(self.invariant, "engram")


@dataclass
class Observation:
    """What one step left behind, read after it."""

    local: Sequence[LocalMutation]
    lanes: LaneTable
    canary: dict[str, Any]
    sync_state: list[dict[str, Any]]
    cycle_push_statuses: list[int] | None = None  # the statuses of a worker cycle's pushes, in order
    settled: bool = False  # the nemesis is quiet and two worker cycles ran
    lossy_nemesis: bool = False  # an ack_without_store fault was scheduled in this history
    reconcile_lost: frozenset[int] | None = None
    enrolled: set[str] = field(default_factory=set)  # sync_enrolled_projects, read from the database
    triaged: frozenset[int] = frozenset()  # rows the triage log says an --apply acked on purpose
    #: after a triage step: what the step before it left, and the triage log entries this step wrote
    before: Observation | None = None
    triage_entries: list[dict[str, Any]] = field(default_factory=list)
    #: after a two-machine history's `converge` step: each machine's memories, by machine name, and the
    #: sync_ids of the observations the cloud stores
    machines: dict[str, MachineMemories] | None = None
    cloud_observations: frozenset[str] = frozenset()
    #: (project, title) -> the sync_ids the cloud stores observation upserts of that memory under
    cloud_memories: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    #: after `settle` in a two-machine history: machine A's memories when its worker's cycles ended, and the
    #: observation mutations the cloud's pull serves, as (project, sync_id, op, title)
    worker_memories: MachineMemories | None = None
    cloud_mutations: tuple[tuple[str, str, str, str], ...] = ()


def _expectation(why: str, check: dict[str, Any]) -> dict[str, Any]:
    return {"tag": "design", "design_section": "invariant", "why": why, **check}


def findings(canary: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [finding for finding in canary.get("findings", []) if finding.get("check") == check]


def listed_pending(local: Iterable[LocalMutation], enrolled: set[str]) -> list[LocalMutation]:
    """The legacy lane's waiting rows that v1.20's worker lists: project enrolled or empty, in seq order."""
    normalized = {normalize_project(project) for project in enrolled}
    return [
        row
        for row in local
        if row.lane == LEGACY_TARGET
        and not row.acked
        and (row.project == "" or normalize_project(row.project) in normalized)
    ]


def lost_rows(observation: Observation) -> list[LocalMutation]:
    """Acked rows the cloud lacks; the lanes counted the rows the kit's triage acked on purpose (its log
    names them) as triaged, by the one ledger rule (engram_contract.ledger)."""
    return observation.lanes.lost_rows


def check_i1(observation: Observation) -> list[Violation]:
    lost = lost_rows(observation)
    if not lost:
        return []
    seqs = frozenset(row.seq for row in lost)
    shown = ", ".join(f"seq {row.seq} ({row.entity} {row.project or '-'})" for row in lost[:5])
    by_lane = sorted({(row.lane, row.project) for row in lost})
    expectation = _expectation(
        "explore I1: every row engram acked is in the cloud",
        {"lanes": {"rows": [{"lane": lane, "project": project, "lost": 0} for lane, project in by_lane]}},
    )
    cause = "after an ack_without_store fault" if observation.lossy_nemesis else "with no lossy fault"
    violations = [
        Violation(
            "I1",
            f"{len(lost)} acked row(s) not in the cloud {cause}: {shown}",
            expectations=(expectation,),
            nemesis_caused=observation.lossy_nemesis,
            signature="after-lossy-fault" if observation.lossy_nemesis else "no-lossy-fault",
            upstream=SILENT_LOSS_ISSUE if observation.lossy_nemesis else None,
        )
    ]
    if observation.reconcile_lost is not None and observation.reconcile_lost != seqs:
        violations.append(
            Violation(
                "I1-reconcile",
                f"engram-canary reconcile names seqs {sorted(observation.reconcile_lost)} as lost; "
                f"the cloud lacks exactly {sorted(seqs)}",
                expectations=(expectation,),
            )
        )
    return violations


def check_i2(observation: Observation) -> list[Violation]:
    statuses = observation.cycle_push_statuses
    if statuses is None:
        return []  # only a worker cycle shows whether the cloud refuses the head of the lane
    waiting = listed_pending(observation.local, observation.enrolled)
    # The fake journals a connection it reset after reading the request (the `reset` nemesis) as status 0.
    refused = bool(statuses) and (statuses[-1] == 0 or statuses[-1] >= 400)
    truth = refused and bool(waiting)
    reported = bool(findings(observation.canary, LANE_BLOCKED))
    if truth == reported:
        return []
    head = (
        f"seq {waiting[0].seq} ({waiting[0].entity}, project {waiting[0].project!r})" if waiting else "none"
    )
    if truth:
        detail = (
            f"the cycle's last push was refused ({statuses[-1]}) with head {head}, and the canary is silent"
        )
        check: dict[str, Any] = {"findings_include": [{"check": LANE_BLOCKED}]}
    else:
        answered = f"its pushes answered {statuses}" if statuses else "it pushed nothing"
        detail = f"the canary reports {LANE_BLOCKED} while {answered} (head of the lane: {head})"
        check = {"findings_exclude": [{"check": LANE_BLOCKED}]}
    return [
        Violation(
            "I2",
            detail,
            extra_steps=({"canary": {"as": "explore-canary"}},),
            expectations=(
                _expectation(
                    "explore I2: legacy_lane_blocked exactly when the cloud refuses the head of the lane",
                    {"canary": {"of": "explore-canary", **check}},
                ),
            ),
            signature="miss" if truth else "false-alarm",
        )
    ]


def check_i3(observation: Observation) -> list[Violation]:
    allowed = allowed_targets(observation.enrolled)
    truth = {
        "foreign_sync_target": {str(row["target_key"]) for row in observation.sync_state} - allowed,
        "foreign_mutation_target": {row.lane for row in observation.local} - allowed,
    }
    violations = []
    for check, expected in truth.items():
        reported = {str(finding.get("target_key")) for finding in findings(observation.canary, check)}
        if reported == expected:
            continue
        missed, extra = sorted(expected - reported), sorted(reported - expected)
        include = [{"check": check, "target_key": target} for target in missed]
        exclude = [{"check": check, "target_key": target} for target in extra]
        violations.append(
            Violation(
                "I3",
                f"{check}: the canary misses {missed} and wrongly reports {extra} "
                f"(enrolled: {sorted(observation.enrolled)})",
                extra_steps=({"canary": {"as": "explore-canary"}},),
                expectations=(
                    _expectation(
                        "explore I3: foreign-target findings match sync_state and the enrolled set",
                        {
                            "canary": {
                                "of": "explore-canary",
                                **({"findings_include": include} if include else {}),
                                **({"findings_exclude": exclude} if exclude else {}),
                            }
                        },
                    ),
                ),
                signature=f"{check}-{'miss' if missed else ''}{'-' if missed and extra else ''}{'false-alarm' if extra else ''}",
            )
        )
    return violations


def refused_pending(local: Iterable[LocalMutation]) -> dict[int, str]:
    """seq -> the reason the cloud refuses it, for every row still waiting (the contract's push rules, which
    the fake cloud enforces)."""
    refused: dict[int, str] = {}
    for row in local:
        reason = None if row.acked else refusal_of(row)
        if reason is not None:
            refused[row.seq] = reason
    return refused


def _delivered(lanes: LaneTable) -> dict[tuple[str, str], int]:
    return {(row.lane, row.project): row.delivered for row in lanes.rows}


def check_i4(observation: Observation) -> list[Violation]:
    """Each kind of violation carries the check that fails when its scenario is replayed: `triage_copies`
    (the copies the triage log names, judged on the database: none refused, none missing, none without its
    session) for new-refusal, no-copy and copy-without-session, which also syncs the project by hand (the
    chunk path refuses the copy); the lane's delivered count for delivers-less; the lanes' own "nothing
    lost" invariant for lost."""
    before = observation.before
    if before is None:
        return []  # only a triage step carries what the step before it left
    copies = copy_problems(observation.local, observation.triage_entries, observation.triaged)
    judged = _expectation(
        "explore I4: every copy a triage --apply appended is there, acceptable and has its session",
        {"triage_copies": {}},
    )
    found: list[tuple[str, str, list[str], list[dict[str, Any]]]] = []
    was_refused = refused_pending(before.local)
    added = {
        seq: reason for seq, reason in refused_pending(observation.local).items() if seq not in was_refused
    }
    if added:
        shown = ", ".join(f"seq {seq} ({reason})" for seq, reason in sorted(added.items())[:5])
        found.append(
            ("new-refusal", f"the triage left {len(added)} new refused row(s): {shown}", [], [judged])
        )
    lost_before = {row.seq for row in lost_rows(before)}
    newly_lost = [row.seq for row in lost_rows(observation) if row.seq not in lost_before]
    if newly_lost:
        found.append(("lost", f"rows lost after the triage: seqs {newly_lost[:10]}", [], []))
    then = _delivered(observation.lanes)
    fewer = [
        (lane, project, count)
        for (lane, project), count in _delivered(before.lanes).items()
        if then.get((lane, project), 0) < count
    ]
    if fewer:
        shown = "; ".join(
            f"{lane}/{project or '-'}: {count} -> {then.get((lane, project), 0)}"
            for lane, project, count in fewer
        )
        rows = [{"lane": lane, "project": project, "delivered": count} for lane, project, count in fewer]
        delivered = _expectation(
            "explore I4: a triage never makes a lane deliver less", {"lanes": {"rows": rows}}
        )
        found.append(("delivers-less", f"lanes deliver less after the triage: {shown}", [], [delivered]))
    if copies.without_session:
        shown = ", ".join(
            f"seq {seq} (session {session!r}, project {project!r})"
            for seq, session, project in copies.without_session[:5]
        )
        found.append(
            (
                "copy-without-session",
                f"the triage copied {shown} into a project that holds no row of that session: the cloud refuses "
                'it on the chunk path ("references missing session_id")',
                sorted({project for _, _, project in copies.without_session}),
                [judged],
            )
        )
    if copies.missing:
        shown = ", ".join(f"seq {row.seq} ({row.entity} {row.entity_key})" for row, _ in copies.missing[:10])
        found.append(
            (
                "no-copy",
                f"the triage acked {len(copies.missing)} row(s) as replaced without their copy: {shown}",
                [],
                [judged],
            )
        )
    return [
        Violation(
            "I4",
            detail,
            extra_steps=(*_sync_each(synced), _CANARY_STEP),
            expectations=(
                _expectation(
                    "explore I4: a triage --apply never adds a refusal and never loses a row",
                    {"canary": {"of": "explore-canary", "findings_exclude": [{"check": LANE_BLOCKED}]}},
                ),
                *_synced_each(synced),
                *checks,
            ),
            signature=signature,
        )
        for signature, detail, synced, checks in found
    ]


_CANARY_STEP: dict[str, Any] = {"canary": {"as": "explore-canary"}}


def _sync_each(projects: Sequence[str]) -> list[dict[str, Any]]:
    """A manual sync of each project that received an orphaned copy, kept for the check below."""
    return [
        {"run": {"args": ["sync", "--cloud", "--project", project], "exit": None, "as": f"sync-{project}"}}
        for project in projects
    ]


def _synced_each(projects: Sequence[str]) -> list[dict[str, Any]]:
    """Each of those syncs must succeed: the cloud's refusal of the orphaned copy fails it."""
    return [
        _expectation(
            "explore I4: a triage copy is delivered by the next sync",
            {"command": {"of": f"sync-{project}", "exit": 0}},
        )
        for project in projects
    ]


def check_i5(observation: Observation) -> list[Violation]:
    if not observation.settled:
        return []
    enrolled = {normalize_project(project) for project in observation.enrolled}
    stuck = [
        row
        for row in observation.lanes.rows
        if row.lane == LEGACY_TARGET and row.project in enrolled and row.stranded
    ]
    if not stuck:
        return []
    waiting = listed_pending(observation.local, enrolled)
    blocker = next(((row, refusal) for row in waiting if (refusal := push_refusal(row)) is not None), None)
    # The worker pushes the listed rows in seq order, a batch at a time, and a refused row fails its whole
    # batch every cycle: the first refused row is the cause, wherever it stands in the lane.
    signature = f"refused-{blocker[0].entity}-{blocker[1].field or 'row'}" if blocker else "nothing-refused"
    head = (
        f"; head of the lane: seq {waiting[0].seq} ({waiting[0].entity}, project {waiting[0].project!r})"
        if waiting
        else ""
    )
    if blocker is not None:
        row, refusal = blocker
        head += f"; the cloud refuses seq {row.seq} ({row.entity}, project {row.project!r}): {refusal.reason}"
    shown = ", ".join(f"{row.project}: {row.stranded}" for row in stuck)
    return [
        Violation(
            "I5",
            f"with the nemesis quiet for two worker cycles, enrolled rows are still undelivered ({shown}){head}",
            expectations=(
                _expectation(
                    "explore I5: once faults stop, every enrolled project's rows are delivered",
                    {
                        "lanes": {
                            "rows": [
                                {"lane": LEGACY_TARGET, "project": row.project, "stranded": 0}
                                for row in stuck
                            ]
                        }
                    },
                ),
            ),
            signature=signature,
            upstream=issue_for_refusal(blocker[1]) if blocker else None,
        )
    ]


def check_i6(observation: Observation) -> list[Violation]:
    """One violation per class of gap, read from ground truth: `undelivered` (its own machine's journal
    row still waits: the push was refused, engram's), `lost-in-cloud` (acked, yet the cloud does not store
    it: the nemesis's after ack_without_store, else engram's) or `not-pulled` (the cloud stores it and the
    machine that pulled still lacks it: engram's pull)."""
    machines = observation.machines
    if machines is None or len(machines) < 2:
        return []
    names = sorted(machines)
    shared = sorted(set.intersection(*(set(machines[name].enrolled) for name in names)))
    projects_of = {  # machine -> sync_id -> the project it holds that memory under
        name: {memory[0]: project for project, held in machines[name].memories.items() for memory in held}
        for name in names
    }
    gaps: dict[str, list[tuple[str, str, tuple[str, str, str]]]] = {}  # class -> (lacking, project, memory)
    for project in shared:
        held = {name: machines[name].memories.get(project, frozenset()) for name in names}
        union: frozenset[tuple[str, str, str]] = frozenset().union(*held.values())
        deleted = frozenset().union(*(machines[name].deleted for name in names))
        for name in names:
            for memory in sorted(union - held[name]):
                if memory[0] in deleted:
                    continue  # a deleted memory is I8's to judge
                origins = [other for other in names if memory in held[other]]
                if memory[0] in projects_of[name]:
                    kind = "project-differs"  # the same memory, held under another project
                elif memory[0] in observation.cloud_observations:
                    kind = "not-pulled"
                elif all(memory[0] in machines[origin].undelivered for origin in origins):
                    kind = "undelivered"
                else:
                    kind = "lost-in-cloud"
                gaps.setdefault(kind, []).append((name, project, memory))
    return [
        _convergence_violation(kind, found, observation.lossy_nemesis, projects_of)
        for kind, found in sorted(gaps.items())
    ]


def _convergence_violation(
    kind: str,
    gaps: list[tuple[str, str, tuple[str, str, str]]],
    lossy: bool,
    projects_of: dict[str, dict[str, str]],
) -> Violation:
    shown = ", ".join(
        f"{name} lacks {title!r} ({project}"
        + (f"; holds it under {projects_of[name][sync_id]!r})" if kind == "project-differs" else ")")
        for name, project, (sync_id, title, _) in gaps[:5]
    )
    lacking = sorted({name for name, _, _ in gaps})
    lost = kind == "lost-in-cloud"
    causes = {
        "undelivered": "its own machine never delivered it (its journal row still waits unacked)",
        "not-pulled": "the cloud stores it and the pull did not bring it",
        "project-differs": "the machine holds the same memory (sync_id) under another project",
        "lost-in-cloud": "acked yet not in the cloud "
        + ("after an ack_without_store fault" if lossy else "with no lossy fault"),
    }
    cause = causes[kind]
    return Violation(
        "I6",
        f"after quiescence the machines differ on {len(gaps)} memory(ies), {cause}: {shown}",
        extra_steps=tuple(_observe_on(name) for name in lacking if name != MACHINE_A),
        # by title and project: a replay's engram draws new sync_ids, explore's titles are unique
        expectations=tuple(
            _expectation(
                "explore I6: after quiescence every machine holds every memory of a project enrolled on all",
                {
                    "local": {
                        "entity": "observation",
                        "title": title,
                        "project": project,
                        **({} if name == MACHINE_A else {"at": _converged(name)}),
                    }
                },
            )
            for name, project, (_, title, _) in gaps[:10]
        ),
        nemesis_caused=lossy and lost,
        signature=f"{kind}-missing-on-{'-and-'.join(lacking)}",
        upstream=SILENT_LOSS_ISSUE if lossy and lost else None,
    )


#: the name explore gives the history's own engram home, next to its `device:` machines
MACHINE_A = "a"


def _converged(machine: str) -> str:
    return f"converged-{machine}"


def _observe_on(machine: str) -> dict[str, Any]:
    """An observe point on MACHINE after the history, so a `local` check can read that machine's database."""
    return {"device": {"name": machine, "steps": [{"observe": _converged(machine)}]}}


def check_i7(observation: Observation) -> list[Violation]:
    """One memory delivered twice: stored by the cloud under two sync_ids, or held twice by a machine."""
    violations = []
    twice = sorted((key, ids) for key, ids in observation.cloud_memories.items() if len(ids) > 1)
    if twice:
        shown = ", ".join(
            f"{title!r} ({project}: {len(ids)} sync_ids)" for (project, title), ids in twice[:5]
        )
        violations.append(
            Violation(
                "I7",
                f"the cloud stores {len(twice)} memory(ies) under more than one sync_id: {shown}",
                signature="cloud-stores-twice",
            )
        )
    machines = observation.machines
    if not machines:
        return violations
    shared = set.intersection(*(set(memories.enrolled) for memories in machines.values()))
    held_twice: list[tuple[str, str, str]] = []  # (machine, project, title)
    for name, memories in sorted(machines.items()):
        for project in sorted(shared):
            ids_by_title: dict[str, set[str]] = {}
            for sync_id, title, _ in memories.memories.get(project, frozenset()):
                ids_by_title.setdefault(title, set()).add(sync_id)
            held_twice.extend(
                (name, project, title)
                for title, ids in sorted(ids_by_title.items())
                if len(ids) > 1 or ids & memories.repeated
            )
    if held_twice:
        lacking = sorted({name for name, _, _ in held_twice})
        shown = ", ".join(
            f"{name} holds {title!r} ({project}) twice" for name, project, title in held_twice[:5]
        )
        violations.append(
            Violation(
                "I7",
                f"after quiescence {len(held_twice)} memory(ies) are held twice: {shown}",
                expectations=tuple(
                    _expectation(
                        "explore I7: no machine holds one memory twice",
                        {
                            "local": {
                                "entity": "observation",
                                "title": title,
                                "project": project,
                                "count": 1,
                                **({} if name == MACHINE_A else {"at": _converged(name)}),
                            }
                        },
                    )
                    for name, project, title in held_twice[:10]
                ),
                extra_steps=tuple(_observe_on(name) for name in lacking if name != MACHINE_A),
                signature=f"held-twice-on-{'-and-'.join(lacking)}",
            )
        )
    return violations


def check_i8(observation: Observation) -> list[Violation]:
    machines = observation.machines
    if not machines or len(machines) < 2:
        return []
    shared = set.intersection(*(set(memories.enrolled) for memories in machines.values()))
    found: list[tuple[str, str, str, list[str]]] = []  # (machine holding it live, project, title, deleters)
    found_ids: list[tuple[str, str]] = []
    for name, memories in sorted(machines.items()):
        for project in sorted(shared):
            for sync_id, title, _ in sorted(memories.memories.get(project, frozenset())):
                deleters = [other for other in sorted(machines) if sync_id in machines[other].deleted]
                if deleters:
                    found.append((name, project, title, deleters))
                    found_ids.append((name, sync_id))
    if not found:
        return []
    holders = sorted({name for name, _, _, _ in found})
    # resurrected: live again on a machine that deleted it itself (a pull brought it back)
    resurrected = any(sync_id in machines[name].deleted_here for name, sync_id in found_ids)
    shown = ", ".join(
        f"{name} holds {title!r} ({project}) live, deleted on {' and '.join(deleters)}"
        for name, project, title, deleters in found[:5]
    )
    return [
        Violation(
            "I8",
            f"after quiescence {len(found)} deleted memory(ies) are live: {shown}",
            expectations=tuple(
                _expectation(
                    "explore I8: a deleted memory stays deleted on every machine",
                    {
                        "local": {
                            "entity": "observation",
                            "title": title,
                            "project": project,
                            "present": False,
                            **({} if name == MACHINE_A else {"at": _converged(name)}),
                        }
                    },
                )
                for name, project, title, _ in found[:10]
            ),
            extra_steps=tuple(_observe_on(name) for name in holders if name != MACHINE_A),
            signature=f"{'resurrected' if resurrected else 'delete-not-pulled'}-live-on-{'-and-'.join(holders)}",
        )
    ]


def cloud_memories(received: Iterable[Any]) -> dict[tuple[str, str], frozenset[str]]:
    """(project, title) -> sync_ids of the observation upserts the cloud stores (ReceivedMutation rows)."""
    found: dict[tuple[str, str], set[str]] = {}
    for item in received:
        if item.entity != "observation" or item.op != "upsert" or not isinstance(item.payload, dict):
            continue
        title = item.payload.get("title")
        if isinstance(title, str) and title:
            found.setdefault((item.project, title), set()).add(item.entity_key)
    return {key: frozenset(ids) for key, ids in found.items()}


def check_i9(observation: Observation) -> list[Violation]:
    """A worker's pull never blocked by unrelated local rows: after two quiet worker cycles, machine A holds
    every memory of its enrolled projects that the cloud's mutation pull serves."""
    memories = observation.worker_memories
    if memories is None or not observation.settled:
        return []
    enrolled = {normalize_project(project) for project in memories.enrolled}
    held = {memory[0] for kept in memories.memories.values() for memory in kept} | memories.deleted
    deleted = {key for _, key, op, _ in observation.cloud_mutations if op == "delete"}
    missing = sorted(
        {
            (project, title or key)
            for project, key, op, title in observation.cloud_mutations
            if op == "upsert" and normalize_project(project) in enrolled and key not in held | deleted
        }
    )
    if not missing:
        return []
    lane = next((row for row in observation.sync_state if row.get("target_key") == LEGACY_TARGET), {})
    pushes = observation.cycle_push_statuses or []
    if lane.get("reason_code") == NON_ENROLLED_PENDING_REASON:
        signature, upstream = "blocked-by-unenrolled-rows", WORKER_PULL_BLOCKED_ISSUE
        cause = (
            "its worker's cycle ends before the pull: rows of a project it did not enroll wait "
            f"(sync_state reason_code {NON_ENROLLED_PENDING_REASON})"
        )
    elif pushes and pushes[-1] >= 400:
        signature, upstream = "blocked-by-refused-push", None
        cause = f"its worker's cycle ends before the pull: its last push was answered {pushes[-1]}"
    else:
        signature, upstream = "not-pulled-by-worker", None
        cause = f"its worker pulled and did not bring it (sync_state lifecycle {lane.get('lifecycle')})"
    shown = ", ".join(f"{title!r} ({project})" for project, title in missing[:5])
    return [
        Violation(
            "I9",
            f"after two worker cycles machine {MACHINE_A} lacks {len(missing)} memory(ies) the cloud serves of "
            f"projects it enrolled: {shown}; {cause}",
            expectations=tuple(
                _expectation(
                    "explore I9: a worker's pull is never blocked by unrelated local rows",
                    {"local": {"entity": "observation", "title": title, "project": project}},
                )
                for project, title in missing[:10]
            ),
            signature=signature,
            upstream=upstream,
        )
    ]


CHECKERS = (check_i1, check_i2, check_i3, check_i4, check_i5, check_i6, check_i7, check_i8, check_i9)
INVARIANTS = ("I1", "I1-reconcile", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9")


def check_all(observation: Observation) -> list[Violation]:
    return [violation for checker in CHECKERS for violation in checker(observation)]


def reached_states(observation: Observation) -> set[str]:
    """The states a step reached, for coverage."""
    states: set[str] = set()
    if findings(observation.canary, LANE_BLOCKED):
        states.add("lane_blocked")
    if any(row.get("lifecycle") == "degraded" for row in observation.sync_state):
        states.add("degraded")
    if observation.canary.get("summary", {}).get("inbox_keys"):
        states.add("inbox_non_empty")
    if any(findings(observation.canary, check) for check in FOREIGN_CHECKS):
        states.add("foreign_target")
    if findings(observation.canary, "unattributed_mutations"):
        states.add("unattributed_rows")
    if lost_rows(observation):
        states.add("rows_lost")
    if observation.triaged:
        states.add("rows_triaged")
    if any(row.stranded for row in observation.lanes.rows):
        states.add("rows_waiting")
    if any(row.delivered for row in observation.lanes.rows):
        states.add("rows_delivered")
    return states
