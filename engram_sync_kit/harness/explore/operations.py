"""The operation pool and the nemesis: each operation is one scenario step, generated from a seed.

A history is a pure function of its seed (random.Random), never of what engram answered, so the same seed
gives the same history on any machine, and a shrunk history is simply a sub-list of steps.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_sync_kit.fake_cloud.faults import FaultAction
from engram_sync_kit.harness.world import DEVICE_CLOUD_HOST

RawStep = dict[str, Any]

#: the world every history plays in: two repos (enrollable), a plain dir and the home dir
WORKSPACES: dict[str, dict[str, Any]] = {
    "app": {"git": "my-app"},
    "other": {"git": "other-repo"},
    "scratch": {"dir": "scratch"},
    "home": {"home": True},
}
REPO_PROJECTS = {"app": "my-app", "other": "other-repo"}
PLACES = ("app", "other", "scratch", "home")
RENAMABLE = ("app", "other", "scratch")
#: the key `engram mcp` derives in each place at first (no remote: a repo's root name; else the dir's name)
PLACE_KEYS = {"app": "my-app", "other": "other-repo", "scratch": "scratch", "home": "home"}
#: seconds a worker cycle after `kill9` may take: the dead worker's 60 s lease, then the next 30 s tick
KILLED_CYCLE_TIMEOUT = 100
#: the judged relations the `relate` operation draws from (RelateStep's own kinds)
RELATIONS = ("related", "compatible", "conflicts_with", "supersedes")
#: the second engram home of a two-machine history: a `device:` step (its own data dir and HOME, the cloud)
MACHINE_B = "laptop-b"


@dataclass
class Model:
    """What the generator knows of the world it has built so far (from its own steps, not from engram)."""

    enrolled: set[str] = field(default_factory=set)
    sessions: list[str] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    renamed_keys: list[str] = field(default_factory=list)  # the keys renamed repos give later saves
    enrolled_b: set[str] = field(default_factory=set)  # machine B's own enrolled set
    saved: list[str] = field(default_factory=list)  # titles saved on machine A, then on B
    saved_b: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # the `as:` of every save on machine A, in order
    labels_b: list[str] = field(default_factory=list)  # machine B's (a device's labels are its own)
    titles: dict[str, str] = field(default_factory=dict)  # label -> the memory's title now (revise)
    deleted: set[str] = field(default_factory=set)  # labels of memories a delete step named
    projects: dict[str, str] = field(default_factory=dict)  # A's label -> the project engram gives it
    #: place -> the key `engram mcp` derives there (the directory's name: a rename changes it)
    place_keys: dict[str, str] = field(default_factory=lambda: dict(PLACE_KEYS))
    #: session -> the place and project it was last started from (move_session)
    session_places: dict[str, tuple[str, str]] = field(default_factory=dict)
    triaged: bool = False  # a triage step came (clock_jump is drawn only before the first)
    killed: bool = False  # engram serve was killed since the last worker cycle (kill9)
    counter: int = 0

    def next_id(self) -> int:
        self.counter += 1
        return self.counter


@dataclass(frozen=True)
class Operation:
    name: str
    weight: int
    make: Callable[[random.Random, Model, GeneratorSettings], RawStep | None]


@dataclass(frozen=True)
class GeneratorSettings:
    autosync: bool
    nemesis: tuple[str, ...]
    steps: int = 12
    machines: int = 1  # 2: a second engram home (MACHINE_B) syncs through the same cloud

    @property
    def push_route(self) -> str:
        return "mutations_push" if self.autosync else "chunk_push"

    @property
    def pull_route(self) -> str:
        return "mutations_pull" if self.autosync else "chunk_pull"


#: nemesis kinds, each one fault of the fake cloud's fault API (fake_cloud.faults is the one source), on the
#: history's push route unless named otherwise
NEMESIS_KINDS: dict[str, Callable[[GeneratorSettings], list[dict[str, Any]]]] = {
    "storm503": lambda s: [
        {"route": s.push_route, "times": 3, "action": FaultAction.STATUS.value, "status": 503}
    ],
    "latency": lambda s: [
        {"route": s.push_route, "times": 2, "action": FaultAction.LATENCY.value, "latency_ms": 1500}
    ],
    "auth401": lambda s: [
        {"route": s.push_route, "times": 2, "action": FaultAction.STATUS.value, "status": 401}
    ],
    "reset": lambda s: [{"route": s.push_route, "times": 1, "action": FaultAction.RESET_AFTER_READ.value}],
    "ack_without_store": lambda s: [
        {"route": s.push_route, "times": 1, "action": FaultAction.ACK_WITHOUT_STORE.value}
    ],
    # no answer past engram's 30 s client timeout (remote/transport.go's http.Client), then a drop
    "hang": lambda s: [{"route": s.push_route, "times": 1, "action": FaultAction.HANG.value, "seconds": 35}],
    # half the answer, then a close: a push stored whose answer never arrives whole (v1.20's chunk push
    # reads only a 200's status), and a pull cut short
    "truncated": lambda s: [
        {"route": route, "times": 1, "action": FaultAction.TRUNCATE_BODY.value}
        for route in (s.push_route, s.pull_route)
    ],
    "slow_body": lambda s: [
        {"route": s.push_route, "times": 2, "action": FaultAction.SLOW_BODY.value, "seconds": 3}
    ],
    # a 500 carrying the fault's JSON error body (not a bare status)
    "error500": lambda s: [
        {"route": s.push_route, "times": 2, "action": FaultAction.STATUS.value, "status": 500}
    ],
    # a pull answered with every row twice: the worker's page, or the manifest's chunks and a chunk's rows
    "dup_pull": lambda s: [{"route": s.pull_route, "times": 3, "action": FaultAction.DUPLICATE_ROWS.value}],
    # machine B alone cut off: its every request dropped unanswered until the faults are cleared
    "partition_b": lambda s: [
        {
            "route": "any",
            "times": 1000,
            "action": FaultAction.HANG.value,
            "seconds": 0,
            "host": DEVICE_CLOUD_HOST,
        }
    ],
}
#: fault actions whose push answers 200 yet stores nothing: lost rows after them are the nemesis's
LOSSY_ACTIONS = frozenset({FaultAction.ACK_WITHOUT_STORE.value})


def _title(model: Model) -> tuple[str, str]:
    number = model.next_id()
    return f"memory {number}", f"generated content {number}"


def _label(title: str) -> str:
    """A save's `as:` label, from its unique title (`memory 3` -> `m3`), so later steps can name it."""
    return "m" + title.removeprefix("memory ")


def _saved_on_a(model: Model, title: str, project: str) -> str:
    label = _label(title)
    model.saved.append(title)
    model.labels.append(label)
    model.titles[label] = title
    model.projects[label] = project
    return label


def _live(model: Model, labels: list[str]) -> list[str]:
    return [label for label in labels if label not in model.deleted]


def _save_mcp(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    title, content = _title(model)
    place = rng.choice(PLACES)
    label = _saved_on_a(model, title, model.place_keys[place])
    return {"save": {"in": place, "title": title, "content": content, "as": label}}


def _save_cli(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    title, content = _title(model)
    place = rng.choice(PLACES)
    project = rng.choice([None, "my-app", "other-repo"])  # None: engram save without --project (project "")
    label = _saved_on_a(model, title, project or "")
    body: dict[str, Any] = {"in": place, "title": title, "content": content, "via": "cli", "as": label}
    if project is not None:
        body["project"] = project
    return {"save": body}


def _save_http(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    if not model.sessions:
        return None
    title, content = _title(model)
    session = rng.choice(model.sessions)
    label = _saved_on_a(model, title, "")  # v1.20 stores an HTTP save without a project
    return {"save": {"via": "http", "session": session, "title": title, "content": content, "as": label}}


def _session(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    session = f"s{model.next_id()}"
    model.sessions.append(session)
    place = rng.choice(sorted(REPO_PROJECTS))
    model.session_places[session] = (place, REPO_PROJECTS[place])
    body: dict[str, Any] = {"id": session, "project": REPO_PROJECTS[place], "in": place}
    if rng.random() < 0.2:
        body["directory"] = "omit"  # a client that sends no directory (engram #1224's class)
    return {"session": body}


def _enroll(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    candidates = sorted(set(REPO_PROJECTS.values()) - model.enrolled)
    if not candidates:
        return None
    project = rng.choice(candidates)
    model.enrolled.add(project)
    return {"enroll": project}


def _unenroll(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    if not model.enrolled:
        return None
    project = rng.choice(sorted(model.enrolled))
    return {"unenroll": {"project": project, "if_unsupported": "skip"}}


def _sync_manual(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    if not model.enrolled:
        return None
    project = rng.choice(sorted(model.enrolled))
    place = next(name for name, key in REPO_PROJECTS.items() if key == project)
    return {"sync": {"via": "manual", "project": project, "in": place}}


def _sync_autosync(_rng: random.Random, model: Model, settings: GeneratorSettings) -> RawStep | None:
    if not settings.autosync:
        return None
    if model.killed:  # the dead worker's lease holds the new one off for up to 60 s, then a 30 s tick
        model.killed = False
        return {"sync": {"via": "autosync", "timeout": KILLED_CYCLE_TIMEOUT}}
    return {"sync": {"via": "autosync"}}


def _restart(_rng: random.Random, _model: Model, _settings: GeneratorSettings) -> RawStep:
    return {"daemon": "restart"}


def _pause(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    project = rng.choice(sorted(REPO_PROJECTS.values()))
    if project in model.paused:
        model.paused.discard(project)
        return {"cloud": {"resume": project}}
    model.paused.add(project)
    return {"cloud": {"pause": project}}


def _triage(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    """One of the commands the canary suggests (its legacy_lane_blocked clear_commands, its inbox
    claim_command), applied. Drawn from the seed, not read from the canary's answer, so the history stays
    a function of the seed; a command with nothing to do exits non-zero and changes nothing."""
    model.triaged = True
    choices: list[list[str]] = [["repair"], ["inbox", "drop", "--unattributed"]]
    if model.enrolled:
        owner = rng.choice(sorted(model.enrolled))
        # a plain dir's memories wait under `unsorted` with their cwd: the canary's cwd_claim_commands
        choices.append(
            ["inbox", "claim", "--project", "unsorted", "--cwd", "{workspace:scratch}", "--as", owner]
        )
        # a renamed repo's later memories wait under its new key: the canary's claim_command
        choices.extend(["inbox", "claim", "--project", key, "--as", owner] for key in model.renamed_keys)
    return {"triage": {"args": [*rng.choice(choices), "--apply"], "exit": None}}


def _rename(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    """A repo or plain dir renamed between saves: engram derives a new key for the saves after it."""
    place = rng.choice(RENAMABLE)
    spec = WORKSPACES[place]
    name = f"{spec.get('git') or spec['dir']}-{model.next_id()}"
    model.place_keys[place] = name
    if "git" in spec:
        model.renamed_keys.append(name)
    return {"rename": {"workspace": place, "to": name}}


def _nemesis(rng: random.Random, _model: Model, settings: GeneratorSettings) -> RawStep | None:
    if not settings.nemesis:
        return None
    kind = rng.choice(settings.nemesis)
    return {"cloud": {"faults": NEMESIS_KINDS[kind](settings)}}


def _clear_faults(_rng: random.Random, _model: Model, settings: GeneratorSettings) -> RawStep | None:
    return {"cloud": {"clear_faults": True}} if settings.nemesis else None


def _revision(rng: random.Random, model: Model, labels: list[str], saved: list[str]) -> RawStep | None:
    """The body of a `revise:` of one of LABELS: a new content, a new title or both. A new title is as
    unique as a save's (I7 and I6 match memories by title), and SAVED follows it, so a later delete
    finds the memory by the title it has then. Only memories no delete step named: engram answers 404
    to the edit of a deleted one and journals nothing."""
    labels = _live(model, labels)
    if not labels:
        return None
    label = rng.choice(labels)
    what = rng.choice(("content", "title", "both"))
    number = model.next_id()
    body: dict[str, Any] = {"of": label}
    if what in ("content", "both"):
        body["content"] = f"revised content {number}"
    if what in ("title", "both"):
        old, new = model.titles[label], f"memory {label.removeprefix('m')} (revision {number})"
        saved[saved.index(old)] = new
        model.titles[label] = new
        body["title"] = new
    return {"revise": body}


def _revise(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """An edit of a memory saved earlier on this machine: PATCH /observations/{id} through engram serve,
    which journals the observation's upsert again (revision_count + 1)."""
    return _revision(rng, model, model.labels, model.saved)


def _relate(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """A judged relation between two live memories of one project saved earlier on A (POST
    /conflicts/compare; v1.20 answers 400 `source and target observations are in different projects`
    otherwise); v1.20 journals the relation only when the source memory's project is enrolled."""
    by_project: dict[str, list[str]] = {}
    for label in _live(model, model.labels):
        by_project.setdefault(model.projects[label], []).append(label)
    pairs = sorted(project for project, labels in by_project.items() if len(labels) > 1)
    if not pairs:
        return None
    a, b = rng.sample(by_project[rng.choice(pairs)], 2)
    return {"relate": {"a": a, "b": b, "relation": rng.choice(RELATIONS)}}


def _reenqueue(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """A memory enqueued again unchanged: PATCH with its identical title and content (how: update, through
    engram; never how: copy_row, which simulates legacy data). The design's item 7: the mutation engram
    enqueues again is neither lost nor a second memory (I1, I7)."""
    labels = _live(model, model.labels)
    if not labels:
        return None
    return {"reenqueue": {"of": rng.choice(labels), "how": "update"}}


def _move_session(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """A session that moves: a session started earlier is started again, by id, from another directory
    (into another repo: that repo's project; into the plain dir: its own project). v1.20 accepts the id
    again: the stored row keeps its project and directory unless they were empty, while the upsert it
    journals carries the new ones (store.go createSessionTx and CreateSession @ba9e46c)."""
    if not model.sessions:
        return None
    session = rng.choice(model.sessions)
    was, project = model.session_places[session]
    place = rng.choice([name for name in RENAMABLE if name != was])
    project = REPO_PROJECTS.get(place, project)
    model.session_places[session] = (place, project)
    return {"session": {"id": session, "project": project, "in": place}}


def _clock_jump(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """SIMULATES LEGACY DATA, as the `time_travel` step it is: every stored timestamp (journal,
    sessions, memories, prompts) shifted 1 to 40 days back, since engram has no clock to set; the
    canary's age tripwires (the inbox's 7 days) then see old rows. Only before the history's first
    triage: the triage log's times stay where they are, and `reconcile` knows a row the triage acked by
    its acked_at within 5 minutes of its log entry (canary/reconcile.py TRIAGE_ACK_SLACK), so a jump
    after one would have reconcile name that row lost where I1 does not (an I1-reconcile of the step's
    own making)."""
    return None if model.triaged else {"time_travel": {"days": rng.randint(1, 40)}}


def _kill9(_rng: random.Random, model: Model, settings: GeneratorSettings) -> RawStep | None:
    """`kill -9` of `engram serve` wherever its worker is (between cycles, or in a push a `hang`,
    `latency` or `slow_body` fault holds open), started again at once: no shutdown, its lease kept. v1.20
    releases the sync lease only when its worker stops cleanly, and the new worker, another lease owner,
    skips its ticks until the dead one's runs out (60 s after the cycle that took it: manager.go
    DefaultConfig, store.go AcquireSyncLease @ba9e46c), so the next worker cycle gets a longer wait."""
    if not settings.autosync:
        return None
    model.killed = True
    return {"daemon": "kill"}


OPERATIONS: tuple[Operation, ...] = (
    Operation("save_mcp", 6, _save_mcp),
    Operation("save_cli", 5, _save_cli),
    Operation("save_http", 3, _save_http),
    Operation("session", 3, _session),
    Operation("enroll", 4, _enroll),
    Operation("unenroll", 1, _unenroll),
    Operation("sync_manual", 5, _sync_manual),
    Operation("sync_autosync", 2, _sync_autosync),
    Operation("restart", 1, _restart),
    Operation("pause", 1, _pause),
    Operation("triage", 2, _triage),
    Operation("rename", 1, _rename),
    Operation("nemesis", 3, _nemesis),
    Operation("clear_faults", 1, _clear_faults),
    Operation("revise", 2, _revise),
    Operation("relate", 1, _relate),
    Operation("reenqueue", 1, _reenqueue),
    Operation("move_session", 1, _move_session),
    Operation("clock_jump", 1, _clock_jump),
    Operation("kill9", 1, _kill9),
)


def _on_b(*steps: RawStep) -> RawStep:
    return {"device": {"name": MACHINE_B, "steps": list(steps)}}


def _push(project: str) -> RawStep:
    """`engram sync --cloud --project P`: v1.20 exports (pushes) P's pending rows and imports nothing."""
    return {"run": {"args": ["sync", "--cloud", "--project", project], "exit": None}}


def _pull(project: str) -> RawStep:
    """`engram sync --cloud --import --project P`: v1.20's manual pull, every chunk of P not yet imported."""
    return {"run": {"args": ["sync", "--cloud", "--import", "--project", project], "exit": None}}


def _enroll_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    candidates = sorted(set(REPO_PROJECTS.values()) - model.enrolled_b)
    if not candidates:
        return None
    project = rng.choice(candidates)
    model.enrolled_b.add(project)
    return _on_b({"enroll": project})


def _save_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep:
    title, content = _title(model)
    label = _label(title)
    model.saved_b.append(title)
    model.labels_b.append(label)
    model.titles[label] = title
    project = rng.choice(sorted(REPO_PROJECTS.values()))
    body = {"in": "app", "title": title, "content": content, "via": "cli", "project": project, "as": label}
    return _on_b({"save": body})


def _revise_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """An edit on machine B of a memory B saved (its own labels), inside `device:`."""
    revision = _revision(rng, model, model.labels_b, model.saved_b)
    return None if revision is None else _on_b(revision)


def _sync_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    return _on_b(_push(rng.choice(sorted(model.enrolled_b)))) if model.enrolled_b else None


def _pull_a(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    return _pull(rng.choice(sorted(model.enrolled))) if model.enrolled else None


def _pull_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    return _on_b(_pull(rng.choice(sorted(model.enrolled_b)))) if model.enrolled_b else None


def _deleted(model: Model, title: str) -> str:
    """TITLE's memory is deleted from here on: edits and relations leave it be."""
    model.deleted.update(label for label, now in model.titles.items() if now == title)
    return title


def _delete_a(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """`engram delete <id>` of a memory this machine saved (I8 judges it after quiescence)."""
    return {"delete": _deleted(model, rng.choice(model.saved))} if model.saved else None


def _delete_b(rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    return _on_b({"delete": _deleted(model, rng.choice(model.saved_b))}) if model.saved_b else None


#: drawn only in two-machine histories, so a one-machine seed draws exactly what it drew before
MACHINE_OPERATIONS: tuple[Operation, ...] = (
    Operation("enroll_b", 3, _enroll_b),
    Operation("save_b", 5, _save_b),
    Operation("sync_b", 3, _sync_b),
    Operation("pull", 3, _pull_a),
    Operation("pull_b", 3, _pull_b),
    Operation("delete", 2, _delete_a),
    Operation("delete_b", 2, _delete_b),
    Operation("revise_b", 1, _revise_b),
)


def _worker_b(_rng: random.Random, model: Model, _: GeneratorSettings) -> RawStep | None:
    """A cycle of machine B's own worker: it pushes B's enrolled rows through /sync/mutations/push, the
    route machine A's worker pulls from (I9); the first one starts B's engram serve with the worker."""
    if not model.enrolled_b:
        return None
    return _on_b({"daemon": {"action": "start", "autosync": True}}, {"sync": {"via": "autosync"}})


#: drawn only in two-machine histories with the worker, so the histories without it draw what they did
WORKER_B_OPERATIONS: tuple[Operation, ...] = (Operation("worker_b", 3, _worker_b),)
ENROLL_BOOST = 4
OPERATION_NAMES = tuple(
    operation.name for operation in (*OPERATIONS, *MACHINE_OPERATIONS, *WORKER_B_OPERATIONS)
)


def settle_steps(settings: GeneratorSettings, model: Model) -> list[tuple[str, RawStep]]:
    """The end of every history with the worker: the nemesis stops, then two worker cycles (liveness, I5).
    A two-machine history then quiesces (I6): the nemesis stops, every project enrolled on both machines
    is pushed by each, then pulled by each, the pull on machine A last (`converge`)."""
    shared = sorted(model.enrolled & model.enrolled_b) if settings.machines > 1 else []
    steps: list[tuple[str, RawStep]] = []
    # In a two-machine history the nemesis's end is part of the quiescence the shrinker keeps whole.
    clear, resume = ("quiesce", "quiesce") if shared else ("clear_faults", "pause")
    if settings.nemesis and (settings.autosync or shared):
        steps.append((clear, {"cloud": {"clear_faults": True}}))
    if settings.autosync or shared:
        for project in sorted(model.paused):
            steps.append((resume, {"cloud": {"resume": project}}))
    if settings.autosync:
        steps.append(("settle", {"sync": {"via": "autosync", "cycles": 2, "timeout": 100}}))
    for project in shared:
        steps.append(("quiesce", _push(project)))
        steps.append(("quiesce", _on_b(_push(project), _pull(project))))
    steps.extend(("quiesce", _pull(project)) for project in shared)
    if shared:
        steps[-1] = ("converge", steps[-1][1])
    return steps


#: the operations of a two-machine history's quiescence: I6 is judged only after all of them ran
QUIESCENCE = frozenset({"quiesce", "converge"})


@dataclass(frozen=True)
class GeneratedStep:
    operation: str
    raw: RawStep


def generate_history(seed: int, settings: GeneratorSettings) -> list[GeneratedStep]:
    """The history of SEED: `settings.steps` operations drawn by weight, then the settle steps."""
    rng = random.Random(seed)
    model = Model()
    history: list[GeneratedStep] = []
    operations: Sequence[Operation] = OPERATIONS
    if settings.machines > 1:
        operations = (*OPERATIONS, *MACHINE_OPERATIONS)
        if settings.autosync:
            operations = (*operations, *WORKER_B_OPERATIONS)
    attempts = 0
    while len(history) < settings.steps and attempts < settings.steps * 20:
        attempts += 1
        # Nothing syncs before something is enrolled: enrolling is likelier while nothing is.
        weights = [
            operation.weight * (ENROLL_BOOST if operation.name == "enroll" and not model.enrolled else 1)
            for operation in operations
        ]
        operation = rng.choices(operations, weights)[0]
        raw = operation.make(rng, model, settings)
        if raw is not None:
            history.append(GeneratedStep(operation.name, raw))
    history.extend(GeneratedStep(name, raw) for name, raw in settle_steps(settings, model))
    return history
