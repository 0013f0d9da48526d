"""Two engram homes through one cloud, without engram: the generator's machine B, its pulls and the
quiescence every two-machine history ends with, I6 (convergence) on synthetic ground truth, and the
shrinker keeping the quiescence whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.cloud.launch import CloudHandle
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.explore import explorer
from engram_sync_kit.harness.explore.execute import HistoryOutcome, parsed_steps
from engram_sync_kit.harness.explore.invariants import MACHINE_A, Observation, Violation, check_i6, check_i9
from engram_sync_kit.harness.explore.operations import (
    MACHINE_B,
    MACHINE_OPERATIONS,
    NEMESIS_KINDS,
    OPERATIONS,
    GeneratedStep,
    GeneratorSettings,
    generate_history,
)
from engram_sync_kit.harness.lanes import LaneTable
from engram_sync_kit.harness.scenario.localdata import MachineMemories
from engram_sync_kit.harness.scenario.steps import sent_by
from engram_sync_kit.harness.world import World

TWO = GeneratorSettings(autosync=False, nemesis=tuple(NEMESIS_KINDS), steps=20, machines=2)
PULL_A = {"run": {"args": ["sync", "--cloud", "--import", "--project", "my-app"], "exit": None}}


def _machines_observation(
    a: MachineMemories, b: MachineMemories, *, lossy: bool = False, cloud: frozenset[str] = frozenset()
) -> Observation:
    return Observation(
        local=[],
        lanes=LaneTable(),
        canary={},
        sync_state=[],
        lossy_nemesis=lossy,
        machines={MACHINE_A: a, MACHINE_B: b},
        cloud_observations=cloud,
    )


ONE = ("obs-1", "memory 1", "content 1")
TWO_MEMORY = ("obs-2", "memory 2", "content 2")


def test_one_machine_histories_draw_exactly_what_they_drew_before() -> None:
    """machines=1 never draws from the machine pool: every existing seed (planted ones too) still holds."""
    one = GeneratorSettings(autosync=False, nemesis=("ack_without_store",), steps=12)
    for seed in range(40):
        history = generate_history(seed, one)
        assert {step.operation for step in history} <= {operation.name for operation in OPERATIONS}
        assert all("device" not in step.raw for step in history)


def test_two_machine_histories_are_scenarios_with_machine_b_and_pulls_on_both() -> None:
    operations: set[str] = set()
    for autosync in (False, True):
        settings = GeneratorSettings(autosync=autosync, nemesis=TWO.nemesis, steps=20, machines=2)
        for seed in range(60):
            history = generate_history(seed, settings)
            assert len(parsed_steps(history, autosync)) == len(history)
            operations |= {step.operation for step in history}
    assert {"enroll_b", "save_b", "sync_b", "pull", "pull_b", "quiesce", "converge"} <= operations


def test_a_two_machine_history_ends_quiescing_every_project_enrolled_on_both() -> None:
    for seed in range(60):
        history = generate_history(seed, TWO)
        on_a = {step.raw["enroll"] for step in history if "enroll" in step.raw}
        on_b = {
            child["enroll"]
            for step in history
            if "device" in step.raw
            for child in step.raw["device"]["steps"]
            if "enroll" in child
        }
        shared = sorted(on_a & on_b)
        tail = [step for step in history if step.operation in ("quiesce", "converge")]
        if not shared:
            assert not tail, seed
            continue
        assert history[-1].operation == "converge" and history[-len(tail) :] == tail
        raws = [step.raw for step in tail]
        assert raws[0] == {"cloud": {"clear_faults": True}}  # the nemesis stops first
        for project in shared:
            push = {"run": {"args": ["sync", "--cloud", "--project", project], "exit": None}}
            pull = {"run": {"args": ["sync", "--cloud", "--import", "--project", project], "exit": None}}
            b_both = {"device": {"name": MACHINE_B, "steps": [push, pull]}}
            assert (
                raws.index(push) < raws.index(b_both) < raws.index(pull)
            )  # A pushes, B pushes and pulls, A pulls


def test_i6_holds_when_both_machines_hold_the_same_memories_of_every_shared_project() -> None:
    a = MachineMemories(frozenset({"my-app", "other-repo"}), {"my-app": frozenset({ONE, TWO_MEMORY})})
    b = MachineMemories(
        frozenset({"my-app"}), {"my-app": frozenset({ONE, TWO_MEMORY}), "other-repo": frozenset()}
    )
    assert check_i6(_machines_observation(a, b)) == []
    # other-repo is enrolled on A only: what A holds of it is not B's to have
    a_only = MachineMemories(a.enrolled, {**a.memories, "other-repo": frozenset({("obs-9", "t", "c")})})
    assert check_i6(_machines_observation(a_only, b)) == []
    assert check_i6(Observation(local=[], lanes=LaneTable(), canary={}, sync_state=[])) == []


def test_i6_names_the_machine_that_lacks_a_memory_and_whose_bug_it_is() -> None:
    a = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset({ONE, TWO_MEMORY})})
    b = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset({ONE})})
    (violation,) = check_i6(_machines_observation(a, b))
    assert violation.kind == f"I6/lost-in-cloud-missing-on-{MACHINE_B}" and violation.owner == "engram"
    assert violation.upstream is None
    assert violation.detail == (
        "after quiescence the machines differ on 1 memory(ies), acked yet not in the cloud with no lossy "
        f"fault: {MACHINE_B} lacks 'memory 2' (my-app)"
    )
    observe = {"device": {"name": MACHINE_B, "steps": [{"observe": "converged-laptop-b"}]}}
    assert violation.extra_steps == (observe,)
    (expectation,) = violation.expectations
    # by title: a replay's engram draws new sync_ids
    assert expectation["local"] == {
        "entity": "observation",
        "title": "memory 2",
        "project": "my-app",
        "at": "converged-laptop-b",
    }
    (lossy,) = check_i6(_machines_observation(a, b, lossy=True))
    assert lossy.owner == "nemesis" and lossy.upstream == 264
    (both,) = check_i6(
        _machines_observation(b, MachineMemories(b.enrolled, {"my-app": frozenset({TWO_MEMORY})}))
    )
    assert both.kind == f"I6/lost-in-cloud-missing-on-{MACHINE_A}-and-{MACHINE_B}"
    assert [expectation["local"] for expectation in both.expectations] == [
        {"entity": "observation", "title": "memory 2", "project": "my-app"},  # machine A: after the last step
        {"entity": "observation", "title": "memory 1", "project": "my-app", "at": "converged-laptop-b"},
    ]


def test_i6_tells_a_memory_never_delivered_lost_in_the_cloud_or_not_pulled_apart() -> None:
    """From ground truth: the origin's journal row still waits (undelivered, engram's even after a lossy
    fault); acked and not stored (the nemesis's after ack_without_store); stored and not pulled (engram's)."""
    three = ("obs-3", "memory 3", "content 3")
    a = MachineMemories(
        frozenset({"my-app"}), {"my-app": frozenset({ONE, TWO_MEMORY, three})}, frozenset({"obs-2"})
    )
    b = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset()})
    lost, not_pulled, undelivered = check_i6(
        _machines_observation(a, b, lossy=True, cloud=frozenset({"obs-3"}))
    )
    assert lost.kind == f"I6/lost-in-cloud-missing-on-{MACHINE_B}" and lost.owner == "nemesis"
    assert "'memory 1'" in lost.detail and "'memory 2'" not in lost.detail
    assert not_pulled.kind == f"I6/not-pulled-missing-on-{MACHINE_B}" and not_pulled.owner == "engram"
    assert "the cloud stores it and the pull did not bring it: laptop-b lacks 'memory 3'" in not_pulled.detail
    assert undelivered.kind == f"I6/undelivered-missing-on-{MACHINE_B}" and undelivered.owner == "engram"
    assert "its own machine never delivered it" in undelivered.detail and "'memory 2'" in undelivered.detail


def test_the_shrinker_keeps_a_two_machine_historys_quiescence_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    history = [
        GeneratedStep("enroll", {"enroll": "my-app"}),
        GeneratedStep("save_mcp", {"save": {"in": "app", "title": "memory 1", "content": "c"}}),
        GeneratedStep("quiesce", {"cloud": {"clear_faults": True}}),
        GeneratedStep("quiesce", {"run": {"args": ["sync", "--cloud", "--project", "my-app"], "exit": None}}),
        GeneratedStep("converge", PULL_A),
    ]
    played: list[list[str]] = []

    def fake_play(binary: Path, candidate: list[GeneratedStep], **_: object) -> HistoryOutcome:
        played.append([step.operation for step in candidate])
        shows = candidate[-1].operation == "converge"
        return HistoryOutcome(
            violations=[Violation("I6", "x", signature="missing-on-a")] if shows else [],
            violation_step=len(candidate) - 1 if shows else None,
        )

    monkeypatch.setattr(explorer, "play", fake_play)
    settings = explorer.ExploreSettings(binary=Path("/bin/true"), seed=1, budget=1, out=tmp_path, jobs=1)
    minimal, _ = explorer._minimize(settings, history, "I6/missing-on-a", deadline=float("inf"))
    assert [step.operation for step in minimal] == ["quiesce", "quiesce", "converge"]
    assert all(candidate[-3:] == ["quiesce", "quiesce", "converge"] for candidate in played)


def test_machines_is_one_or_two_and_bad_input_exits_3() -> None:
    for bad in ("0", "3", "two"):
        result = CliRunner().invoke(cli, ["explore", "--machines", bad])
        assert result.exit_code == 3, result.output
        assert "--machines" in result.output and "Traceback" not in result.output


def test_docs_explore_names_every_machine_operation_the_invariant_and_the_option() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "explore.md").read_text(encoding="utf-8")
    for name in [operation.name for operation in MACHINE_OPERATIONS] + ["quiesce", "converge"]:
        assert f"`{name}`" in docs, name
    assert "| I6 |" in docs and "`--machines 1|2`" in docs
    for kind in ("undelivered", "lost-in-cloud", "not-pulled", "project-differs"):
        assert f"`I6/{kind}-" in docs, kind


def test_the_reports_coverage_counts_the_machine_operations_and_the_quiescence() -> None:
    report = explorer.ExploreReport(seed=1, engram="1.20.0", budget=1)
    operations = report.as_json()["coverage"]["operations"]
    names = [operation.name for operation in MACHINE_OPERATIONS]
    assert {*names, "quiesce", "converge", "settle"} <= set(operations)


def test_i6_tells_a_memory_held_under_another_project_from_a_missing_one() -> None:
    """Seed 5005 of the first 2-minute run: machine A's own observation has no project (saved over HTTP in
    a session of my-app), the chunk it pushed carried my-app, so B holds it under my-app and A under ''."""
    a = MachineMemories(frozenset({"my-app"}), {"": frozenset({ONE})})
    b = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset({ONE})})
    (violation,) = check_i6(_machines_observation(a, b, cloud=frozenset({"obs-1"})))
    assert violation.kind == f"I6/project-differs-missing-on-{MACHINE_A}" and violation.owner == "engram"
    assert violation.detail.endswith(
        "the machine holds the same memory (sync_id) under another project: "
        "a lacks 'memory 1' (my-app; holds it under '')"
    )


FROM_B = ("my-app", "obs-9", "upsert", "written on laptop b")


def _settled_observation(
    a: MachineMemories,
    cloud: tuple[tuple[str, str, str, str], ...] = (FROM_B,),
    *,
    reason: str | None = None,
    pushes: list[int] | None = None,
    settled: bool = True,
) -> Observation:
    return Observation(
        local=[],
        lanes=LaneTable(),
        canary={},
        sync_state=[
            {"target_key": "cloud", "lifecycle": "degraded" if reason else "healthy", "reason_code": reason}
        ],
        cycle_push_statuses=pushes,
        settled=settled,
        worker_memories=a,
        cloud_mutations=cloud,
    )


def test_i9_names_a_worker_pull_blocked_by_unrelated_rows_and_whose_class_it_is() -> None:
    """#1273's class from ground truth: the cloud serves a memory of a project A enrolled, and after two
    worker cycles A lacks it, because its cycle ended before the pull (rows of an unenrolled project wait,
    or its push was refused), or with no such cause."""
    a = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset({ONE})})
    (blocked,) = check_i9(_settled_observation(a, reason="non_enrolled_pending_mutations", pushes=[]))
    assert (blocked.kind, blocked.owner, blocked.upstream) == (
        "I9/blocked-by-unenrolled-rows",
        "engram",
        1273,
    )
    assert blocked.detail == (
        "after two worker cycles machine a lacks 1 memory(ies) the cloud serves of projects it enrolled: "
        "'written on laptop b' (my-app); its worker's cycle ends before the pull: rows of a project it "
        "did not enroll wait (sync_state reason_code non_enrolled_pending_mutations)"
    )
    assert blocked.expectations == (
        {
            "tag": "design",
            "design_section": "invariant",
            "why": "explore I9: a worker's pull is never blocked by unrelated local rows",
            "local": {"entity": "observation", "title": "written on laptop b", "project": "my-app"},
        },
    )
    (refused,) = check_i9(_settled_observation(a, pushes=[200, 400]))
    assert (refused.kind, refused.upstream) == ("I9/blocked-by-refused-push", None)
    assert refused.detail.endswith("its worker's cycle ends before the pull: its last push was answered 400")
    (neither,) = check_i9(_settled_observation(a, pushes=[200]))
    assert (neither.kind, neither.upstream) == ("I9/not-pulled-by-worker", None)
    assert neither.detail.endswith("its worker pulled and did not bring it (sync_state lifecycle healthy)")


def test_i9_holds_when_the_memory_arrived_was_deleted_or_is_not_of_a_project_machine_a_enrolled() -> None:
    blocked = "non_enrolled_pending_mutations"
    held = MachineMemories(
        frozenset({"my-app"}), {"other": frozenset({("obs-9", "written on laptop b", "")})}
    )
    assert (
        check_i9(_settled_observation(held, reason=blocked)) == []
    )  # held, under any project (I6's to judge)
    lacking = MachineMemories(frozenset({"my-app"}), {"my-app": frozenset()})
    not_enrolled = MachineMemories(frozenset({"other"}), {"my-app": frozenset()})
    assert check_i9(_settled_observation(not_enrolled, reason=blocked)) == []
    deleted = (FROM_B, ("my-app", "obs-9", "delete", ""))
    assert check_i9(_settled_observation(lacking, deleted, reason=blocked)) == []
    deleted_on_a = MachineMemories(
        frozenset({"my-app"}), {"my-app": frozenset()}, deleted=frozenset({"obs-9"})
    )
    assert check_i9(_settled_observation(deleted_on_a, reason=blocked)) == []
    assert check_i9(_settled_observation(lacking, settled=False, reason=blocked)) == []
    unjudged = Observation(local=[], lanes=LaneTable(), canary={}, sync_state=[], settled=True)
    assert check_i9(unjudged) == []
    assert len(check_i9(_settled_observation(lacking, reason=blocked))) == 1


@pytest.mark.parametrize(
    ("server", "host", "sent"),
    [
        ("https://127.0.0.1:4443", "127.0.0.1", True),
        ("https://127.0.0.1:4443", "localhost", False),  # machine B's request, not A's
        ("https://localhost:4443", "localhost", True),
        ("https://localhost:4443", "127.0.0.1", False),
        ("https://127.0.0.1:4443", None, True),  # a journal without hosts: every request may be ours
        ("", "localhost", True),
    ],
)
def test_a_machines_own_requests_are_told_apart_by_the_host_it_addresses(
    tmp_path: Path, server: str, host: str | None, sent: bool
) -> None:
    """A blocked worker cycle sends nothing; machine B's worker, in the same cloud, still journals its own
    cycles, so machine A's cycles are read from A's requests alone (issue 38, B's worker)."""
    env = EngramEnvironment(binary=tmp_path / "engram", root=tmp_path / "world")
    cloud = CloudHandle("inprocess", "t", ["*"], tmp_path / "cloud.log")
    world = World(
        env=env,
        cloud=cloud,
        engram_env={"ENGRAM_CLOUD_SERVER": server},
        version="1.20.0",
        workspace_root=tmp_path / "ws",
    )
    try:
        assert sent_by(world, host) is sent
    finally:
        world.close()
