"""The scenario format: typed, unknown keys rejected, every error as file:line + what + what is allowed."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import load_all, parse_scenario
from engram_sync_kit.harness.scenario.schema import STEP_MODELS, EnrollStep, SaveStep, json_schema

REPO = Path(__file__).resolve().parents[2]
VALID = """\
name: ok
tags: [smoke]
workspaces:
  app: {git: my-app}
steps:
  - enroll: my-app
  - save: {in: app, title: t, content: c, as: first}
  - repeat:
      times: 2
      steps:
        - session: {id: "s-{i}", project: my-app, in: app}
  - sync: autosync
expect:
  - tag: baseline
    engram: ">=1.20.0,<2.0.0"
    lanes: {rows: [{lane: cloud, project: my-app, delivered: 2}]}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, Path("s.scenario.yaml"))
    return str(caught.value).splitlines()


def test_a_valid_scenario_loads_into_typed_steps_with_their_lines() -> None:
    scenario = parse_scenario(VALID, Path("ok.scenario.yaml"))
    assert [step.name for step in scenario.steps] == ["enroll", "save", "repeat", "sync"]
    assert [step.line for step in scenario.steps] == [6, 7, 8, 12]
    assert scenario.steps[0].body == EnrollStep(project="my-app")
    save = scenario.steps[1].body
    assert isinstance(save, SaveStep) and save.in_ == "app" and save.as_ == "first" and save.via == "mcp"
    assert scenario.steps[2].children[0].line == 11
    assert scenario.line == 1 and scenario.id == "ok"
    assert scenario.expectations[0].line == 14


def test_unknown_top_level_key_names_the_line_and_the_allowed_keys() -> None:
    assert errors_of(VALID + "colour: red\n") == [
        "s.scenario.yaml:17: colour: unknown key 'colour'; allowed: name, description, tags, cloud, workspaces, "
        "timeout, steps, expect"
    ]


def test_unknown_step_lists_every_step_name() -> None:
    (line,) = errors_of("name: x\nsteps:\n  - savee: {title: t}\n")
    assert (
        line
        == f"s.scenario.yaml:3: steps.0.savee: unknown step 'savee' (did you mean 'save'?); allowed: {', '.join(STEP_MODELS)}"
    )


def test_unknown_key_inside_a_step_lists_that_steps_keys() -> None:
    (line,) = errors_of("name: x\nsteps:\n  - enroll: {project: p, colour: red}\n")
    assert line == (
        "s.scenario.yaml:3: steps.0.enroll.colour: unknown key 'colour'; allowed: expect_error, label, if_unsupported, project, as"
    )


def test_nested_errors_point_at_the_nested_line() -> None:
    text = "name: x\nsteps:\n  - repeat:\n      times: 2\n      steps:\n        - prompt: {session: s, contnt: x}\n"
    assert errors_of(text) == [
        "s.scenario.yaml:6: steps.0.repeat.steps.0.prompt.content: missing required key 'content'",
        "s.scenario.yaml:6: steps.0.repeat.steps.0.prompt.contnt: unknown key 'contnt' (did you mean 'content'?); allowed: expect_error, label, "
        "if_unsupported, session, content, project, in, via",
    ]


def test_a_wrong_value_says_what_is_allowed() -> None:
    (line,) = errors_of("name: x\nsteps:\n  - cloud:\n      faults: [{route: bogus}]\n")
    assert line == (
        "s.scenario.yaml:4: steps.0.cloud.faults.0.route: Input should be 'mutations_push', 'mutations_pull', "
        "'chunk_push', 'chunk_pull' or 'any' (got 'bogus')"
    )


def test_expectations_need_a_tag_a_range_for_baseline_and_exactly_one_check() -> None:
    text = (
        "name: x\nsteps: []\nexpect:\n"
        "  - tag: baseline\n    lanes: {rows: []}\n"
        "  - tag: design\n    lanes: {rows: []}\n    doctor: {}\n"
        "  - tag: baseline\n    engram: '~1.20'\n    doctor: {}\n"
    )
    assert errors_of(text) == [
        "s.scenario.yaml:4: expect.0: a baseline expectation needs engram: a version range, e.g. '>=1.20.0,<2.0.0'",
        "s.scenario.yaml:6: expect.1: an expectation needs exactly one check of lanes, lost, answer, sync_state_targets, canary, "
        "inbox, doctor, stderr, command, received, journal, sync_state, local, save_answer, enroll_hint, "
        "cloud_status, doctor_check, inbox_row, triage_copies (got ['lanes', 'doctor'])",
        "s.scenario.yaml:10: expect.2.engram: version range part '~1.20' is not OP VERSION (OP one of >=, <=, ==, "
        "!=, >, <) (got '~1.20')",
    ]


def test_workspaces_are_checked_and_referenced_by_name() -> None:
    text = "name: x\nworkspaces:\n  a: {git: r, dir: d}\nsteps: []\n"
    assert errors_of(text) == [
        "s.scenario.yaml:3: workspaces.a: a workspace needs exactly one of git, dir, home, named_like_home, root "
        "(got ['git', 'dir'])"
    ]
    text = "name: x\nworkspaces:\n  a: {git: r}\nsteps:\n  - save: {in: b, title: t, content: c}\n"
    assert errors_of(text) == ["s.scenario.yaml:5: save: unknown workspace 'b'; declared: a"]


def test_workspace_parents_must_not_loop() -> None:
    text = "name: x\nworkspaces:\n  a: {dir: a, parent: b}\n  b: {dir: b, parent: a}\n  c: {dir: c, parent: a}\nsteps: []\n"
    assert errors_of(text) == [
        "s.scenario.yaml:3: workspaces.a.parent: workspace 'a' is its own ancestor (a -> b -> a); "
        "parents must form a tree",
        "s.scenario.yaml:4: workspaces.b.parent: workspace 'b' is its own ancestor (b -> a -> b); "
        "parents must form a tree",
    ]
    assert errors_of("name: x\nworkspaces:\n  a: {dir: a, parent: a}\nsteps: []\n") == [
        "s.scenario.yaml:3: workspaces.a.parent: workspace 'a' is its own ancestor (a -> a); parents must form a tree"
    ]


def test_duplicate_keys_and_broken_yaml_are_reported_with_lines() -> None:
    assert errors_of("name: x\nname: y\nsteps: []\n") == [
        "s.scenario.yaml:2: name: duplicate key 'name'; each key may appear once"
    ]
    assert errors_of("name: x\nsteps: [\n") == [
        "s.scenario.yaml:3: not valid YAML: expected the node content, but found '<stream end>'"
    ]
    assert errors_of("- a\n") == [
        "s.scenario.yaml:1: a scenario is a mapping with keys name, description, tags, cloud, workspaces, timeout, "
        "steps, expect (got list)"
    ]


def test_sync_manual_needs_a_project() -> None:
    (line,) = errors_of("name: x\nsteps:\n  - sync: manual\n")
    assert line == (
        "s.scenario.yaml:3: steps.0.sync: sync via manual needs project (engram sync --cloud requires --project) "
        "(got 'manual')"
    )


def test_every_shipped_scenario_loads_and_matches_the_exported_json_schema() -> None:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        schema
    )  # once: jsonschema.validate checks the schema per call
    scenarios = load_all([REPO / "scenarios"])
    assert len(scenarios) >= 3
    for scenario in scenarios:
        validator.validate(yaml.safe_load(scenario.source))


def test_the_json_schema_rejects_unknown_keys_too() -> None:
    document = yaml.safe_load(VALID)
    document["steps"].append({"enroll": {"project": "p", "colour": "red"}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json_schema())


def test_every_fault_the_fake_cloud_knows_is_writable_in_a_scenario() -> None:
    # One source: a fault kind, route or field the fake gains and the scenario format refuses fails here.
    # Before, ack_without_store (engram #264/#298's silent loss) was refused by the loader.
    import dataclasses

    from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, Route

    defaults = {field.name: field.default for field in dataclasses.fields(Fault)}
    for action in FaultAction:
        for route in Route:
            fault = {**defaults, "action": action.value, "route": route.value, "project": "my-app"}
            text = f"name: f\nsteps:\n  - cloud: {{faults: [{yaml.safe_dump(fault, default_flow_style=True).strip()}]}}\n"
            (step,) = parse_scenario(text, Path("s.scenario.yaml")).steps
            from engram_sync_kit.harness.scenario.steps import _fault

            assert Fault.from_dict(_fault(step.body.faults[0])) == Fault.from_dict(fault)  # type: ignore[attr-defined]
    schema_fault = json_schema()["$defs"]["Fault"]
    assert set(schema_fault["properties"]) == set(defaults)


def test_a_misspelt_name_gets_a_did_you_mean() -> None:
    assert errors_of("name: x\nsteps:\n  - cloud: {faults: [{action: ack_without_stor}]}\n") == [
        "s.scenario.yaml:3: steps.0.cloud.faults.0.action: Input should be 'status', 'latency', "
        "'reset_after_read', 'short_accepted', 'hang', 'truncate_body', 'slow_body', 'duplicate_rows' or 'ack_without_store' (got 'ack_without_stor') "
        "(did you mean 'ack_without_store'?)"
    ]
    assert errors_of("name: x\nstepz: []\nsteps: []\n")[0] == (
        "s.scenario.yaml:2: stepz: unknown key 'stepz' (did you mean 'steps'?); allowed: name, description, "
        "tags, cloud, workspaces, timeout, steps, expect"
    )
    assert errors_of(
        "name: x\nsteps: []\nexpect:\n  - {tag: design, sync_stat: {target: cloud, lifecycle: healthy}}\n"
    )[0].startswith(
        "s.scenario.yaml:4: expect.0.sync_stat: unknown key 'sync_stat' (did you mean 'sync_state'?);"
    )


BASE = "name: r\nworkspaces:\n  app: {git: my-app}\nsteps:\n  - enroll: my-app\n"
#: one scenario per rule a validator of the loader enforces beyond field types; each must be refused by
#: the loader and by the exported JSON Schema alike (before: the schema let most of them through)
RULE_BREAKERS = {
    "baseline without engram range": BASE + "expect:\n  - {tag: baseline, lanes: {rows: []}}\n",
    "engram range malformed": BASE + "expect:\n  - {tag: baseline, engram: '~1.20', lanes: {rows: []}}\n",
    "design_section on a baseline": BASE
    + "expect:\n  - {tag: baseline, engram: '>=1.0.0', design_section: '§1', lanes: {rows: []}}\n",
    "predicted on a design": BASE + "expect:\n  - {tag: design, predicted: x, lanes: {rows: []}}\n",
    "lost on a design": BASE
    + "expect:\n  - {tag: design, lost: {reason: r, rows: [{lane: c, project: p, count: 1}]}}\n",
    "workspace with two kinds": "name: r\nworkspaces:\n  a: {git: x, dir: y}\nsteps: []\n",
    "workspace with no kind": "name: r\nworkspaces:\n  a: {subdir: x}\nsteps: []\n",
    "remote without git": "name: r\nworkspaces:\n  a: {dir: x, remote: 'git@h:t/r.git'}\nsteps: []\n",
    "alias with key and cwd": BASE + "  - alias: {key: k, cwd: app, project: p}\n",
    "alias with neither": BASE + "  - alias: {project: p}\n",
    "empty cloud step": BASE + "  - cloud: {clear_faults: false}\n",
    "manual sync without project": BASE + "  - sync: {via: manual}\n",
    "sync_state absent with a field": BASE
    + "expect:\n  - {tag: design, sync_state: {absent: true, lifecycle: x}}\n",
    "sync_state with nothing": BASE + "expect:\n  - {tag: design, sync_state: {target: cloud}}\n",
    "local title on a session": BASE + "expect:\n  - {tag: design, local: {entity: session, title: t}}\n",
    "local content on a session": BASE
    + "expect:\n  - {tag: design, local: {entity: session, content_contains: t}}\n",
    "local absent with a count": BASE + "expect:\n  - {tag: design, local: {present: false, count: 2}}\n",
    "engram_inbox claim without project": BASE + "  - engram_inbox: {action: claim}\n",
    "claim_as on a drop": BASE + "  - engram_inbox: {action: drop, project: p, claim_as: x}\n",
    "noise on a claim": BASE + "  - engram_inbox: {action: claim, project: p, noise: true}\n",
    "absent doctor check with a result": BASE
    + "expect:\n  - {tag: design, doctor_check: {check: c, present: false, result: ok}}\n",
    "no steps": "name: r\n",
    "rename to a path": BASE + "  - rename: {workspace: app, to: ../elsewhere}\n",
    "rename without a new name": BASE + "  - rename: {workspace: app}\n",
    "triage that is no triage command": BASE + "  - triage: {args: [check, --apply]}\n",
    "triage of a half command": BASE + "  - triage: {args: [inbox]}\n",
    "triage naming its own database": BASE + "  - triage: {args: [repair, --db, /tmp/x.db, --apply]}\n",
    "triage naming its own database with =": BASE + "  - triage: {args: [repair, --db=/tmp/x.db]}\n",
}


def test_every_loader_rule_is_in_the_json_schema_too() -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    let_through = []
    for rule, text in RULE_BREAKERS.items():
        assert errors_of(text), rule
        if validator.is_valid(yaml.safe_load(text)):
            let_through.append(rule)
    assert let_through == []


def test_the_json_schema_names_its_dialect() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_a_triage_step_runs_one_of_the_canarys_triage_commands_on_the_scenarios_database() -> None:
    text = (
        BASE
        + "  - triage: {args: [inbox, drop, --unattributed, --apply]}\n"
        + "  - triage: {args: [repair], exit: null, as: dry}\n"
        + "  - triage: {args: [inbox, claim, --project, scratch, --as, my-app, --apply], exit: 1}\n"
    )
    steps = parse_scenario(text, Path("s.scenario.yaml")).steps[1:]
    assert [(step.name, step.body.args[:2], step.body.exit, step.body.as_) for step in steps] == [  # type: ignore[attr-defined]
        ("triage", ["inbox", "drop"], 0, "triage"),
        ("triage", ["repair"], None, "dry"),
        ("triage", ["inbox", "claim"], 1, "triage"),
    ]
    assert errors_of(BASE + "  - triage: {args: [repair, --db, x.db]}\n") == [
        "s.scenario.yaml:6: steps.1.triage.args: args must not name --db: the step passes "
        "the scenario's database"
    ]


def test_a_rename_step_names_a_declared_workspace_and_a_plain_new_name() -> None:
    (_, rename) = parse_scenario(
        BASE + "  - rename: {workspace: app, to: my-app-2}\n", Path("s.scenario.yaml")
    ).steps
    assert (rename.name, rename.body.workspace, rename.body.to) == ("rename", "app", "my-app-2")  # type: ignore[attr-defined]
    assert errors_of(BASE + "  - rename: {workspace: nope, to: x}\n") == [
        "s.scenario.yaml:6: rename: unknown workspace 'nope'; declared: app"
    ]


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        (
            "{status: 204}",
            "fault.status: 204 cannot carry the fault's error body; use 200 or 205-599 except 304",
        ),
        ("{status: 199}", "fault.status: expected an integer from 200 to 599, got 199"),
        ("{action: short_accepted, keep: 5000}", "fault.keep: expected an integer from 0 to 100, got 5000"),
        ("{action: hang, seconds: 601}", "fault.seconds: expected a number from 0 to 600, got 601.0"),
        ("{latency_ms: 600001}", "fault.latency_ms: expected an integer from 0 to 600000, got 600001"),
    ],
)
def test_the_loader_refuses_a_fault_the_fake_would_refuse_in_its_words(fault: str, why: str) -> None:
    # Before: the loader accepted these and the fake refused them mid-run, at the cloud step.
    assert errors_of(f"name: x\nsteps:\n  - cloud:\n      faults: [{fault}]\n") == [
        f"s.scenario.yaml:4: steps.0.cloud.faults.0: {why}"
    ]
