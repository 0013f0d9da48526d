"""engram-harness explore without engram: generation is deterministic and always a valid scenario, the
nemesis is the fake cloud's own fault API, the invariants judge synthetic ground truth, ddmin shrinks."""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram_sync_kit.fake_cloud.faults import Fault as CloudFault
from engram_sync_kit.harness.cli import cli
from engram_sync_kit.harness.explore import explorer
from engram_sync_kit.harness.explore.cli import _summary
from engram_sync_kit.harness.explore.execute import (
    HistoryOutcome,
    StepOutcome,
    ended_worker_cycle,
    parsed_steps,
)
from engram_sync_kit.harness.explore.invariants import (
    Observation,
    Violation,
    check_i1,
    check_i2,
    check_i3,
    check_i4,
    check_i5,
)
from engram_sync_kit.harness.explore.operations import NEMESIS_KINDS, GeneratorSettings, generate_history
from engram_sync_kit.harness.explore.scenario_out import (
    expected_error,
    inner_step_path,
    scenario_document,
    scenario_yaml,
    with_expected_error,
)
from engram_sync_kit.harness.explore.shrink import ddmin, drop_groups
from engram_sync_kit.harness.lanes import LocalMutation, compute_lanes
from engram_sync_kit.harness.scenario.loader import load_scenario, parse_scenario
from engram_sync_kit.harness.scenario.schema import Fault

ALL_NEMESIS = tuple(NEMESIS_KINDS)


@pytest.mark.parametrize("autosync", [True, False])
def test_the_same_seed_gives_the_same_history_and_another_seed_another(autosync: bool) -> None:
    settings = GeneratorSettings(autosync=autosync, nemesis=ALL_NEMESIS, steps=15)
    first = [step.raw for step in generate_history(42, settings)]
    assert first == [step.raw for step in generate_history(42, settings)]
    assert first != [step.raw for step in generate_history(43, settings)]


def test_every_generated_history_is_a_scenario_the_loader_accepts() -> None:
    for autosync in (True, False):
        settings = GeneratorSettings(autosync=autosync, nemesis=ALL_NEMESIS, steps=20)
        for seed in range(60):
            history = generate_history(seed, settings)
            assert len(parsed_steps(history, autosync)) == len(history)


def test_histories_with_the_worker_end_by_settling_the_nemesis_and_two_cycles() -> None:
    history = generate_history(7, GeneratorSettings(autosync=True, nemesis=("storm503",), steps=5))
    assert history[-1].operation == "settle"
    assert history[-1].raw == {"sync": {"via": "autosync", "cycles": 2, "timeout": 100}}
    assert {"cloud": {"clear_faults": True}} in [step.raw for step in history[-3:]]
    manual = generate_history(7, GeneratorSettings(autosync=False, nemesis=("storm503",), steps=5))
    assert all(step.operation != "settle" and "autosync" not in str(step.raw) for step in manual)


def test_the_nemesis_is_the_fake_clouds_fault_api_and_the_scenario_format_accepts_it() -> None:
    for kind, make in NEMESIS_KINDS.items():
        for autosync in (True, False):
            for raw in make(GeneratorSettings(autosync=autosync, nemesis=(kind,))):
                CloudFault.from_dict(raw, where=kind)  # the fake's own validation
                Fault.model_validate(raw)


def test_ddmin_finds_the_one_minimal_sub_list_and_keeps_the_order() -> None:
    calls: list[list[int]] = []

    def needs_3_and_7(candidate: list[int]) -> bool:
        calls.append(candidate)
        return {3, 7} <= set(candidate)

    assert ddmin(list(range(12)), needs_3_and_7) == [3, 7]
    assert ddmin(list(range(12)), needs_3_and_7, jobs=3) == [3, 7]
    assert ddmin([5], needs_3_and_7) == [5]  # nothing smaller to try


def test_ddmin_stops_at_the_deadline_with_what_still_reproduces() -> None:
    def slow(candidate: list[int]) -> bool:
        time.sleep(0.01)
        return 0 in candidate

    found = ddmin(list(range(40)), slow, deadline=time.monotonic() - 1)
    assert found == list(range(40))


def test_drop_groups_drops_every_operation_the_violation_does_not_need_in_few_rounds() -> None:
    steps = ["save:1", "nemesis:2", "enroll:3", "sync:4", "nemesis:5", "save:6", "sync:7", "pause:8"]
    rounds: list[list[str]] = []

    def needs_enroll_and_a_save(candidate: list[str]) -> bool:
        rounds.append(candidate)
        return "enroll:3" in candidate and any(step.startswith("save") for step in candidate)

    def operation(step: str) -> str:
        return step.split(":")[0]

    assert drop_groups(steps, operation, needs_enroll_and_a_save) == ["save:1", "enroll:3", "save:6"]
    # one round of one candidate per operation (5), then the droppable ones at once (1); save and enroll are
    # known to be needed, so no round is left (ddmin then drops one of the saves)
    assert len(rounds) == 5 + 1
    assert drop_groups(steps, operation, needs_enroll_and_a_save, jobs=3) == ["save:1", "enroll:3", "save:6"]


def test_drop_groups_takes_the_smallest_single_drop_when_the_drops_together_do_not_reproduce() -> None:
    def one_of_a_or_b(candidate: list[str]) -> bool:
        return ("a" in candidate) != ("b" in candidate) or {"a", "b"} <= set(candidate) and "c" in candidate

    # dropping a or b alone reproduces, dropping both does not: the smaller single drop is kept
    assert drop_groups(["a", "b", "b", "c"], str, one_of_a_or_b) == ["a", "c"]


def test_drop_groups_stops_at_the_deadline_with_what_it_had() -> None:
    assert drop_groups([1, 2, 3], str, lambda candidate: True, deadline=time.monotonic() - 1) == [1, 2, 3]


def test_a_failed_step_is_replayed_as_an_expected_failure_with_its_stable_head() -> None:
    error = "engram sync --cloud --project my-app exited 1: engram: cloud sync upgrade_blocked ... seq=6"
    assert expected_error(error) == "engram sync --cloud --project my-app exited 1"
    assert (
        expected_error("engram serve POST /sessions answered 500: boom")
        == "engram serve POST /sessions answered 500"
    )
    assert expected_error("something else") == ""
    assert with_expected_error({"enroll": "my-app"}, "engram cloud enroll my-app exited 1: x") == {
        "enroll": {"project": "my-app", "expect_error": "engram cloud enroll my-app exited 1"}
    }
    document = scenario_document(
        "t", [with_expected_error({"daemon": "restart"}, "boom")], autosync=False, expectations=()
    )
    parse_scenario(scenario_yaml(document), Path("t.scenario.yaml"))


def test_a_failed_step_inside_a_device_step_is_marked_where_it_failed_and_the_rest_is_cut() -> None:
    # a shrunk two-machine finding wrote `device: {expect_error: ...}`, which the loader refuses
    device = {
        "device": {
            "name": "laptop-b",
            "steps": [
                {"save": {"title": "a", "content": "c", "project": "my-app", "via": "cli"}},
                {"run": {"args": ["sync", "--cloud", "--project", "my-app"], "exit": None}},
                {"save": {"title": "b", "content": "c", "project": "my-app", "via": "cli"}},
            ],
        }
    }
    marked = with_expected_error(device, "engram sync --cloud --project my-app exited 1: x", inner=(2,))
    assert marked == {
        "device": {
            "name": "laptop-b",
            "steps": [
                {"save": {"title": "a", "content": "c", "project": "my-app", "via": "cli"}},
                {
                    "run": {
                        "args": ["sync", "--cloud", "--project", "my-app"],
                        "exit": None,
                        "expect_error": "engram sync --cloud --project my-app exited 1",
                    }
                },
            ],
        }
    }
    parse_scenario(scenario_yaml(scenario_document("t", [marked], autosync=False)), Path("t.scenario.yaml"))
    # a device step that failed before any of its steps (no such machine) has no step to mark: kept as is
    assert with_expected_error(device, "no device", inner=()) == device


@pytest.mark.parametrize(
    ("record_index", "inner"), [("6.1", ()), ("6.1.2", (2,)), ("12.1.1", (1,)), ("3.1.2.4", (2, 4))]
)
def test_a_step_record_index_names_the_nested_step_that_failed(
    record_index: str, inner: tuple[int, ...]
) -> None:
    assert inner_step_path(record_index) == inner


def test_the_scenario_of_a_finding_marks_a_failed_device_step_inside_it() -> None:
    device = {
        "device": {"name": "laptop-b", "steps": [{"save": {"title": "a", "project": "p", "via": "cli"}}]}
    }
    outcome = HistoryOutcome(
        steps=[StepOutcome("on_b", device, "failed", "engram save exited 1: x", 0.0, 0.0, inner=(1,))],
        violation_step=0,
    )
    marked_save = {"title": "a", "project": "p", "via": "cli", "expect_error": "engram save exited 1"}
    assert explorer._scenario_steps(outcome, Violation("I1", "detail")) == [
        {"device": {"name": "laptop-b", "steps": [{"save": marked_save}]}}
    ]


def _row(seq: int, project: str, *, acked: bool = False, lane: str = "cloud") -> LocalMutation:
    return LocalMutation(seq, lane, project, "observation", f"obs-{seq}", "upsert", f"d{seq}", acked, {})


def _observation(local: list[LocalMutation], **fields: typing.Any) -> Observation:
    defaults: dict[str, typing.Any] = {
        "canary": {"findings": []},
        "sync_state": [{"target_key": "cloud"}],
        "enrolled": {"my-app"},
    }
    defaults.update(fields)
    defaults.setdefault("lanes", compute_lanes(local, [], triaged=defaults.get("triaged", frozenset())))
    return Observation(local=local, **defaults)


def _blocked() -> dict[str, typing.Any]:
    return {"findings": [{"check": "legacy_lane_blocked", "target_key": "cloud"}]}


def test_i2_holds_when_the_canary_agrees_with_the_cycle_and_fails_on_a_miss_or_a_false_alarm() -> None:
    waiting = [_row(1, ""), _row(2, "my-app")]
    refused = _observation(waiting, canary=_blocked(), cycle_push_statuses=[400])
    assert check_i2(refused) == []
    reset = _observation(waiting, canary=_blocked(), cycle_push_statuses=[0])
    assert check_i2(reset) == []  # a connection reset after the request was read (journalled as 0)
    missed = check_i2(_observation(waiting, cycle_push_statuses=[200, 400]))
    assert [v.invariant for v in missed] == ["I2"]
    assert "refused (400)" in missed[0].detail and "seq 1" in missed[0].detail
    assert missed[0].expectations[0]["canary"]["findings_include"] == [{"check": "legacy_lane_blocked"}]
    false_alarm = check_i2(_observation(waiting, canary=_blocked(), cycle_push_statuses=[200]))
    assert false_alarm[0].expectations[0]["canary"]["findings_exclude"] == [{"check": "legacy_lane_blocked"}]
    assert false_alarm[0].owner == "ours"
    nothing_listed = _observation([_row(1, "unenrolled")], cycle_push_statuses=[400])
    assert check_i2(nothing_listed) == []  # a refused push with nothing listed waiting is no blocked lane
    assert check_i2(_observation(waiting)) == []  # no worker cycle: no ground truth for I2


def test_i1_names_lost_rows_and_checks_reconcile_names_exactly_them() -> None:
    lost = [_row(1, "my-app", acked=True), _row(2, "my-app")]
    exact = check_i1(_observation(lost, lossy_nemesis=True, reconcile_lost=frozenset({1})))
    assert [(v.kind, v.owner) for v in exact] == [("I1/after-lossy-fault", "nemesis")]
    assert exact[0].expectations[0]["lanes"] == {"rows": [{"lane": "cloud", "project": "my-app", "lost": 0}]}
    wrong = check_i1(_observation(lost, reconcile_lost=frozenset()))
    assert [(v.invariant, v.owner) for v in wrong] == [("I1", "engram"), ("I1-reconcile", "ours")]
    assert check_i1(_observation([_row(1, "my-app")])) == []


def test_i3_compares_foreign_targets_with_sync_state_and_the_enrolled_set() -> None:
    state = [{"target_key": "cloud"}, {"target_key": "cloud:my-app"}, {"target_key": "cloud:scratch"}]
    right = {"findings": [{"check": "foreign_sync_target", "target_key": "cloud:scratch"}]}
    assert check_i3(_observation([], sync_state=state, canary=right)) == []
    (missed,) = check_i3(_observation([], sync_state=state))
    assert "misses ['cloud:scratch']" in missed.detail
    wrong = {"findings": [{"check": "foreign_sync_target", "target_key": "cloud:my-app"}, *right["findings"]]}
    (false_alarm,) = check_i3(_observation([], sync_state=state, canary=wrong))
    assert false_alarm.expectations[0]["canary"]["findings_exclude"] == [
        {"check": "foreign_sync_target", "target_key": "cloud:my-app"}
    ]


def test_i5_fires_only_once_settled_and_names_the_first_row_the_cloud_refuses() -> None:
    stuck = [_entry(1, ""), _entry(2, "my-app"), _entry(3, "other-repo")]
    assert check_i5(_observation(stuck)) == []
    (violation,) = check_i5(_observation(stuck, settled=True))
    assert violation.owner == "engram" and violation.kind == "I5/refused-observation-project"
    assert "my-app: 1" in violation.detail and "head of the lane: seq 1" in violation.detail
    assert "the cloud refuses seq 1 (observation, project '')" in violation.detail
    assert violation.expectations[0]["lanes"]["rows"] == [
        {"lane": "cloud", "project": "my-app", "stranded": 0}
    ]


def _session(seq: int, project: str, **payload: str) -> LocalMutation:
    body = {"id": f"s{seq}", "project": project, **payload}
    return LocalMutation(seq, "cloud", project, "session", f"s{seq}", "upsert", f"d{seq}", False, body)


def test_i5_and_i1_name_the_upstream_bug_whose_class_they_rediscover() -> None:
    """#742: a waiting row without a project; #1224: a session without directory, wherever it stands in
    the lane (the worker's batch fails whole); #264: rows lost after a push the cloud acked without
    storing. The payloads are those engram v1.20 journals."""
    no_project = _session(1, "", directory="/h")
    accepted = _session(1, "my-app", directory="/a")
    no_directory = _session(2, "my-app")
    for lane, kind, issue in [
        ([no_project, _entry(2, "my-app")], "I5/refused-session-project", 742),
        ([accepted, no_directory, _entry(3, "my-app")], "I5/refused-session-directory", 1224),
        ([accepted, _entry(2, "my-app")], "I5/nothing-refused", None),
    ]:
        (violation,) = check_i5(_observation(lane, settled=True))
        assert (violation.kind, violation.upstream) == (kind, issue), lane
    (lost,) = check_i1(_observation([_row(1, "my-app", acked=True)], lossy_nemesis=True))
    assert lost.upstream == 264
    (new_loss,) = check_i1(_observation([_row(1, "my-app", acked=True)]))
    assert new_loss.upstream is None  # a loss with no lossy fault is not a filed bug's class


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nemesis", "earthquake"], "'earthquake' is not a nemesis kind"),
        (["--seed", "abc"], "is not a valid integer"),
        (["--budget", "0"], "--budget"),
        (["--engram", "/nonexistent/engram"], "not an executable file"),
        (["--engram", "/bin/sh", "--engram-version", "v1.20.0"], "exclusive"),
        (["--engram", "/bin/sh", "--out", "/etc/hostname"], "--out"),
        (["--engram", "/bin/sh", "--out", "/proc/explore-out"], "--out /proc/explore-out"),
        (["--nemesis", "stürm503"], "'stürm503' is not a nemesis kind"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_input_exits_3_with_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["explore", *args])
    assert result.exit_code == 3, result.output
    assert message in result.output
    assert "Traceback" not in result.output


class _NoCloud:
    def close(self) -> None:
        pass


def _lossy_play(
    binary: Path,
    history: typing.Sequence[typing.Any],
    *,
    autosync: bool,
    on_step: typing.Callable[[StepOutcome], None] | None = None,
    cloud: object = None,
) -> HistoryOutcome:
    """engram stood in for: rows are lost once a sync runs after an enroll and a lossy fault."""
    outcome = HistoryOutcome()
    for index, step in enumerate(history):
        played = StepOutcome(step.operation, step.raw, "ok", "", 0.0, 0.0, {"rows_waiting"})
        outcome.steps.append(played)
        if on_step is not None:
            on_step(played)
        before = {earlier.operation for earlier in history[:index]}
        if step.operation == "sync_manual" and {"enroll", "nemesis"} <= before:
            lost = {
                "tag": "design",
                "design_section": "invariant",
                "lanes": {"rows": [{"lane": "cloud", "project": "my-app", "lost": 0}]},
            }
            outcome.violations = [
                Violation(
                    "I1",
                    "2 lost",
                    expectations=(lost,),
                    nemesis_caused=True,
                    signature="after-lossy-fault",
                    upstream=264,
                )
            ]
            outcome.violation_step = index
            break
    return outcome


def _chunk_path_settings(out: Path, *, seed: int, parallel: int = 1) -> explorer.ExploreSettings:
    """One second of histories without the worker, the lossy nemesis only (engram stood in for)."""
    return explorer.ExploreSettings(
        binary=Path("/bin/true"),
        seed=seed,
        budget=1,
        out=out,
        nemesis=("ack_without_store",),
        autosync=False,
        steps=8,
        jobs=1,
        parallel=parallel,
    )


def test_the_loop_finds_shrinks_writes_and_replays_one_violation_per_kind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    replayed: list[Path] = []
    monkeypatch.setattr(explorer, "play", _lossy_play)
    monkeypatch.setattr(explorer, "new_cloud", lambda logs: _NoCloud())

    def replay(binary: Path, path: Path) -> tuple[bool, str]:
        replayed.append(path)
        return True, "lost 2"

    monkeypatch.setattr(explorer, "replay_scenario", replay)
    monkeypatch.setattr(explorer, "engram_version", lambda binary: "1.20.0")
    report = explorer.explore(_chunk_path_settings(tmp_path, seed=1))
    assert report.histories > 1 and report.steps > 0
    first, *others = report.violations
    assert first.kind == "I1/after-lossy-fault" and first.replayed is True
    assert all(other.scenario is None for other in others)  # one shrink per kind
    assert first.minimized_steps == 3 < first.steps or first.steps == 3
    scenario = load_scenario(Path(str(first.scenario)))
    header = Path(str(first.scenario)).read_text(encoding="utf-8").splitlines()[0]
    assert header.endswith("invariant I1 violated (nemesis's; the class of engram#264).")
    names = [step.name for step in scenario.steps]
    assert sorted(names) == ["cloud", "enroll", "sync"] and names[-1] == "sync"
    assert replayed == [Path(str(first.scenario))]
    data = report.as_json()
    assert {"histories", "steps", "violations", "coverage"} <= set(data)
    assert data["coverage"]["states"]["rows_waiting"] == report.steps


def test_histories_play_side_by_side_each_player_on_its_own_cloud(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clouds: list[Path] = []

    def new_cloud(logs: Path) -> _NoCloud:
        clouds.append(logs)
        return _NoCloud()

    monkeypatch.setattr(explorer, "new_cloud", new_cloud)
    monkeypatch.setattr(explorer, "replay_scenario", lambda binary, path: (True, "lost 2"))
    monkeypatch.setattr(explorer, "engram_version", lambda binary: "1.20.0")

    def slow_lossy_play(
        binary: Path, history: typing.Sequence[typing.Any], **kwargs: typing.Any
    ) -> HistoryOutcome:
        time.sleep(0.02)
        return _lossy_play(binary, history, **kwargs)

    monkeypatch.setattr(explorer, "play", slow_lossy_play)
    started: list[int] = []

    def progress(report: explorer.ExploreReport, what: str) -> None:
        if what.startswith("history seed "):
            started.append(int(what.removeprefix("history seed ")))

    report = explorer.explore(_chunk_path_settings(tmp_path, seed=100, parallel=3), progress)
    assert len(set(clouds)) == 3  # one fake cloud per player, for all its histories
    assert sorted(started) == list(range(100, 100 + report.histories)) and report.histories > 3
    seeds = [found.seed for found in report.violations]
    assert seeds == sorted(seeds) and len(set(seeds)) == len(seeds) > 1
    assert sum(1 for found in report.violations if found.scenario) == 1  # one shrink per kind
    assert all(found.upstream == "engram#264" for found in report.violations)


GOOD = {"sync_id": "o", "session_id": "s", "type": "manual", "title": "t", "content": "c", "scope": "project"}


def _entry(
    seq: int, project: str, *, acked: bool = False, payload: dict[str, typing.Any] | None = None
) -> LocalMutation:
    body = {**GOOD, "sync_id": f"obs-{seq}"} if payload is None else payload
    return LocalMutation(seq, "cloud", project, "observation", f"obs-{seq}", "upsert", f"d{seq}", acked, body)


def _after_triage(
    before: list[LocalMutation],
    after: list[LocalMutation],
    entries: list[dict[str, typing.Any]],
    **fields: typing.Any,
) -> list[Violation]:
    triaged = frozenset(seq for entry in entries for seq in entry.get("acked_seqs", []))
    observation = _observation(
        after, before=_observation(before), triage_entries=entries, triaged=triaged, **fields
    )
    return check_i4(observation)


def test_i1_leaves_out_the_rows_the_triage_log_says_were_acked_on_purpose() -> None:
    dropped = [_row(1, "", acked=True), _row(2, "my-app", acked=True)]
    (violation,) = check_i1(_observation(dropped, triaged=frozenset({1})))
    assert "seq 2" in violation.detail and "seq 1" not in violation.detail
    assert check_i1(_observation(dropped, triaged=frozenset({1, 2}))) == []


def test_i1_gives_the_one_copy_to_the_twin_of_a_row_the_triage_acked_on_purpose() -> None:
    # seq 1 was acked by a triage --apply and never sent; seq 2, byte-identical, was pushed once: the copy
    # is seq 2's, so nothing is lost (the one ledger rule, engram_contract.ledger)
    twins = [
        LocalMutation(seq, "cloud", "my-app", "session", "s", "upsert", "d-s", True, {"id": "s"})
        for seq in (1, 2)
    ]
    lanes = compute_lanes(twins, [_Got("session", "s", "upsert", "d-s")], triaged=frozenset({1}))
    assert check_i1(_observation(twins, lanes=lanes, triaged=frozenset({1}))) == []
    assert [(row.triaged, row.delivered, row.lost) for row in lanes.rows] == [(1, 1, 0)]


def test_i4_holds_for_a_drop_and_a_repair_that_append_acceptable_copies() -> None:
    blocked = [_entry(1, ""), _entry(2, "my-app")]
    dropped = [_entry(1, "", acked=True), _entry(2, "my-app")]
    assert _after_triage(blocked, dropped, [{"acked_seqs": [1], "discarded": True, "copies": []}]) == []
    session = LocalMutation(4, "cloud", "my-app", "session", "s", "upsert", "d4", False, {"id": "s"})
    repaired = [_entry(1, "", acked=True), _entry(2, "my-app"), _entry(3, "my-app"), session]
    entry = {"acked_seqs": [1], "discarded": False, "copies": [[1, 3]]}
    assert _after_triage([*blocked, session], repaired, [entry]) == []
    (orphan,) = _after_triage(blocked, repaired[:3], [entry])  # the copy's session 's' is not in my-app
    assert orphan.kind == "I4/copy-without-session"
    sync = {"args": ["sync", "--cloud", "--project", "my-app"], "exit": None, "as": "sync-my-app"}
    assert orphan.extra_steps[0] == {"run": sync}
    assert orphan.expectations[1]["command"] == {"of": "sync-my-app", "exit": 0}
    assert check_i4(_observation(repaired)) == []  # not after a triage step: nothing to compare


def test_i4_fails_on_a_new_refusal_a_lost_row_less_delivered_or_a_missing_copy() -> None:
    before = [_entry(1, ""), _entry(2, "my-app")]
    refused_copy = [_entry(1, "", acked=True), _entry(2, "my-app"), _entry(3, "my-app", payload={})]
    entry = {"acked_seqs": [1], "discarded": False, "copies": [[1, 3]]}
    (refusal,) = _after_triage(before, refused_copy, [entry])
    assert (refusal.kind, refusal.owner) == ("I4/new-refusal", "ours")
    assert "seq 3 (500 observation payload sync_id is required)" in refusal.detail
    assert refusal.extra_steps == ({"canary": {"as": "explore-canary"}},)
    assert refusal.expectations[-1]["triage_copies"] == {}  # on replay: no copy refused, missing, orphaned
    no_copy = [_entry(1, "", acked=True), _entry(2, "my-app")]
    refused_copy = [
        *refused_copy,
        LocalMutation(4, "cloud", "my-app", "session", "s", "upsert", "d4", False, {}),
    ]
    (missing,) = _after_triage(before, no_copy, [entry])
    assert missing.kind == "I4/no-copy" and "seq 1 (observation obs-1)" in missing.detail
    assert missing.expectations[-1]["triage_copies"] == {}
    unlogged = [_entry(1, ""), _entry(2, "my-app", acked=True)]
    assert [v.kind for v in _after_triage(before, unlogged, [])] == ["I4/lost"]


def test_i4_fails_when_a_lane_delivers_less_than_before() -> None:
    rows = [_entry(1, "my-app", acked=True)]
    received = [_Got("observation", "obs-1", "upsert", "d1")]
    before = _observation(rows, lanes=compute_lanes(rows, received))
    after = _observation(rows, before=before, triage_entries=[], triaged=frozenset({1}))
    (violation,) = check_i4(after)
    assert violation.kind == "I4/delivers-less" and "cloud/my-app: 1 -> 0" in violation.detail
    assert violation.expectations[-1]["lanes"] == {
        "rows": [{"lane": "cloud", "project": "my-app", "delivered": 1}]
    }


@dataclass(frozen=True)
class _Got:
    entity: str
    entity_key: str
    op: str
    payload_digest: str
    payload: typing.Any = None
    transport: typing.Any = None


def test_the_triage_operation_applies_a_command_the_canary_suggests() -> None:
    settings = GeneratorSettings(autosync=True, nemesis=(), steps=40)
    commands = {
        " ".join(step.raw["triage"]["args"][:2])
        for seed in range(20)
        for step in generate_history(seed, settings)
        if step.operation == "triage"
    }
    assert commands == {"repair --apply", "inbox drop", "inbox claim"}
    for seed in range(20):
        for step in generate_history(seed, settings):
            if step.operation == "triage":
                assert step.raw["triage"]["args"][-1] == "--apply" and step.raw["triage"]["exit"] is None


def test_the_summary_shows_each_kind_once_with_its_scenario_and_counts_the_other_seeds() -> None:
    report = explorer.ExploreReport(seed=1, engram="1.20.0", budget=60, histories=30, steps=300)
    lossy = [
        explorer.FoundViolation("I1", "nemesis", "2 lost", seed, 6, "I1/after-lossy-fault", "engram#264")
        for seed in range(3, 14)
    ]
    lossy[1].scenario, lossy[1].minimized_steps, lossy[1].replayed = "out/i1.scenario.yaml", 4, True
    blocked = explorer.FoundViolation("I5", "engram", "stuck", 20, 14, "I5/nothing-refused")
    report.violations = [*lossy, blocked]
    lines = _summary(report, None).splitlines()
    assert lines == [
        "explore: seed 1, engram 1.20.0: 30 histories, 300 steps in 0s, 12 violation(s) of 2 kind(s)",
        "  I1 (nemesis's, the class of engram#264) seed 4: 2 lost; scenario out/i1.scenario.yaml "
        "(minimized to 4 steps, replays)",
        "    10 more histories showed I1/after-lossy-fault: seeds 3, 5, 6, 7, 8, 9, 10, 11 and 2 more",
        "  I5 (engram's) seed 20: stuck",
    ]


@pytest.mark.parametrize(
    ("raw", "status", "judged"),
    [
        ({"sync": {"via": "autosync"}}, "ok", True),
        ({"sync": {"via": "autosync", "cycles": 2, "timeout": 100}}, "ok", True),
        # seed 12004: a hang past the step's wait; the cycle had not ended, its last push was still open
        ({"sync": {"via": "autosync"}}, "failed", False),
        ({"sync": {"via": "manual", "project": "my-app", "in": "app"}}, "ok", False),
        ({"daemon": "restart"}, "ok", False),
    ],
)
def test_only_a_worker_cycle_that_ended_is_judged_by_its_last_push(
    raw: dict[str, typing.Any], status: str, judged: bool
) -> None:
    assert ended_worker_cycle(raw, status) is judged
