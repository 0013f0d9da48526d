"""The keys added for upstream regression suites (issue 19) load strictly, with file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_sync_kit.harness.errors import ScenarioError
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.schema import DeviceStep, HttpStep, LaneRow, SessionStep, SyncStateCheck


def load(text: str) -> object:
    return parse_scenario(text, Path("s.scenario.yaml"))


def errors_of(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, Path("s.scenario.yaml"))
    return str(caught.value).splitlines()


def with_expect(expect: str, steps: str = "  - observe: mid\n  - enroll: {project: a, label: go}\n") -> str:
    return "name: x\nsteps:\n" + steps + "expect:\n" + expect


def test_the_new_steps_load_with_their_keys() -> None:
    scenario = parse_scenario(
        "name: x\n"
        "workspaces: {app: {git: my-app}}\n"
        "steps:\n"
        "  - session: {id: s1, project: my-app, directory: omit}\n"
        "  - session: {id: s2, project: my-app, directory: '{workspace:app}/sub'}\n"
        "  - http: {method: POST, path: /sessions, body: {id: s3, project: ''}, status: 400, as: refused}\n"
        "  - observe: mid\n"
        "  - device:\n"
        "      name: laptop-b\n"
        "      steps:\n"
        "        - save: {in: app, title: t, content: c, via: cli, project: my-app}\n"
        "  - cloud: {seed: [{project: my-app, entity: observation, entity_key: k, payload: {title: t}}]}\n",
        Path("s.scenario.yaml"),
    )
    first, second, http, observe, device, _cloud = scenario.steps
    assert isinstance(first.body, SessionStep) and first.body.directory == "omit"
    assert isinstance(second.body, SessionStep) and second.body.directory == "{workspace:app}/sub"
    assert isinstance(http.body, HttpStep) and http.body.status == 400 and http.body.as_ == "refused"
    assert observe.name == "observe"
    assert isinstance(device.body, DeviceStep) and device.children[0].line == 11


def test_the_empty_project_is_spelled_empty_and_null_means_the_same() -> None:
    assert LaneRow.model_validate({"lane": "cloud", "project": None}).project == ""
    assert LaneRow.model_validate({"lane": "cloud", "project": ""}).project == ""


def test_legacy_rows_take_project_null_as_the_empty_project() -> None:
    scenario = parse_scenario(
        "name: x\nsteps:\n  - legacy_rows: {rows: [{entity_key: k, project: null}]}\n",
        Path("s.scenario.yaml"),
    )
    assert scenario.steps[0].body.rows[0].project == ""  # type: ignore[attr-defined]


def test_status_values_may_be_ints_or_strings() -> None:
    load(with_expect("  - {tag: design, journal: {count: 1, match: {status: 503, project: null}}}\n"))
    load(with_expect("  - {tag: design, journal: {count: 1, match: {status: '503'}}}\n"))


@pytest.mark.parametrize(
    ("expect", "error"),
    [
        (
            "  - {tag: design, journal: {count: 1, since: nowhere}}\n",
            "s.scenario.yaml:6: expect.0.journal.since: unknown step label 'nowhere'; labels: go, mid",
        ),
        (
            "  - {tag: design, stderr: {not_contains: [x], until: nowhere}}\n",
            "s.scenario.yaml:6: expect.0.stderr.until: unknown step label 'nowhere'; labels: go, mid",
        ),
        (
            "  - {tag: design, sync_state: {at: go, lifecycle: healthy}}\n",
            "s.scenario.yaml:6: expect.0.sync_state.at: no observe step named 'go'; observe points: mid",
        ),
        (
            "  - {tag: design, sync_state: {target: cloud}}\n",
            "s.scenario.yaml:6: expect.0.sync_state: sync_state needs absent: true or one of lifecycle, "
            "reason_code, last_error_contains, consecutive_failures, last_enqueued_seq, last_acked_seq, "
            "last_pulled_seq, last_error_empty",
        ),
        (
            "  - {tag: design, sync_state: {absent: true, lifecycle: idle}}\n",
            "s.scenario.yaml:6: expect.0.sync_state: absent: true cannot be combined with lifecycle",
        ),
        (
            "  - {tag: design, sync_state: {lifecycle: idle, colour: red}}\n",
            "s.scenario.yaml:6: expect.0.sync_state.colour: unknown key 'colour'; allowed: target, at, absent, "
            "lifecycle, reason_code, last_error_contains, last_error_empty, consecutive_failures, "
            "last_enqueued_seq, last_acked_seq, last_pulled_seq",
        ),
        (
            "  - {tag: design, sync_state: {consecutive_failures: {at_least: 1, more: 2}}}\n",
            "s.scenario.yaml:6: expect.0.sync_state.consecutive_failures.more: unknown key 'more'; "
            "allowed: exactly, at_least, at_most",
        ),
        (
            "  - {tag: design, sync_state: {last_pulled_seq: some}}\n",
            "s.scenario.yaml:6: expect.0.sync_state.last_pulled_seq: a count is an int or {at_least: N, at_most: N} "
            "(got 'some')",
        ),
        (
            "  - {tag: design, local: {entity: session, title: t}}\n",
            "s.scenario.yaml:6: expect.0.local: title is only for entity observation (got entity session)",
        ),
        (
            "  - {tag: design, local: {entity: memory, key: k}}\n",
            "s.scenario.yaml:6: expect.0.local.entity: Input should be 'observation', 'session', 'prompt' or "
            "'relation' (got 'memory')",
        ),
        (
            "  - {tag: design, local: {at: go, title: t}}\n",
            "s.scenario.yaml:6: expect.0.local.at: no observe step named 'go'; observe points: mid",
        ),
        (
            "  - {tag: design, local: {title: t, present: false, count: 2}}\n",
            "s.scenario.yaml:6: expect.0.local: present: false means count 0; give one of them",
        ),
        (
            "  - {tag: design, journal: {count: 1, match: {colour: red}}}\n",
            "s.scenario.yaml:6: expect.0.journal.match: unknown field 'colour' to match; allowed: transport, "
            "method, path, status, project, entity, entity_key, op, request_id",
        ),
        (
            "  - {tag: design, stderr: {contains: [x], process: daemon}}\n",
            "s.scenario.yaml:6: expect.0.stderr.process: Input should be 'serve', 'mcp' or 'cli' (got 'daemon')",
        ),
        (
            "  - {tag: design, command: {of: x, stdout_not_contain: [y]}}\n",
            "s.scenario.yaml:6: expect.0.command.stdout_not_contain: unknown key 'stdout_not_contain' (did you mean 'stdout_not_contains'?); allowed: "
            "of, exit, exit_not, stdout_contains, stdout_not_contains, stderr_contains, stderr_not_contains",
        ),
    ],
)
def test_bad_checks_say_file_line_what_and_what_is_allowed(expect: str, error: str) -> None:
    assert errors_of(with_expect(expect)) == [error]


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        (
            "  - http: {path: sessions}\n",
            "s.scenario.yaml:3: steps.0.http.path: String should match pattern '^/' (got 'sessions')",
        ),
        (
            "  - http: {path: /sessions, method: FETCH}\n",
            "s.scenario.yaml:3: steps.0.http.method: Input should be 'GET', 'POST', 'PUT', 'PATCH' or 'DELETE' "
            "(got 'FETCH')",
        ),
        (
            "  - http: {path: /sessions, status: '2xx'}\n",
            "s.scenario.yaml:3: steps.0.http.status: Input should be a valid integer, unable to parse string as "
            "an integer (got '2xx')",
        ),
        (
            "  - session: {id: s, project: p, directory: [a]}\n",
            "s.scenario.yaml:3: steps.0.session.directory: Input should be a valid string",
        ),
        (
            "  - device:\n      name: b\n      steps:\n        - save: {title: t, contnt: c}\n",
            "s.scenario.yaml:6: steps.0.device.steps.0.save.contnt: unknown key 'contnt' (did you mean 'content'?); allowed: expect_error, "
            "label, if_unsupported, title, content, in, project, session, type, topic_key, via, as",
        ),
        (
            "  - device: {name: 'two words', steps: [{enroll: a}]}\n",
            "s.scenario.yaml:3: steps.0.device.name: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]*$' "
            "(got 'two words')",
        ),
        (
            "  - cloud: {seed: [{project: a, entity: memory, entity_key: k}]}\n",
            "s.scenario.yaml:3: steps.0.cloud.seed.0.entity: Input should be 'session', 'observation', 'prompt' "
            "or 'relation' (got 'memory')",
        ),
        (
            "  - cloud: {seed: [{project: '', entity: session, entity_key: k}]}\n",
            "s.scenario.yaml:3: steps.0.cloud.seed.0.project: String should have at least 1 character (got '')",
        ),
        (
            "  - enroll: {project: a, label: one}\n  - enroll: {project: b, label: one}\n",
            "s.scenario.yaml:4: enroll: label 'one' is already used at line 3; labels (and observe names) must "
            "be unique",
        ),
        (
            "  - device:\n      name: b\n      steps:\n        - device: {name: c, steps: [{enroll: a}]}\n",
            "s.scenario.yaml:6: steps.0.device.steps.0.device: a device step cannot hold another device step; "
            "put devices side by side",
        ),
        (
            "  - observe: {as: two words}\n",
            "s.scenario.yaml:3: steps.0.observe.as: String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]*$' "
            "(got 'two words')",
        ),
    ],
)
def test_bad_steps_say_file_line_what_and_what_is_allowed(steps: str, error: str) -> None:
    assert errors_of("name: x\nsteps:\n" + steps)[-1] == error


def test_count_fields_take_an_int_or_a_range() -> None:
    check = SyncStateCheck.model_validate({"consecutive_failures": 2, "last_pulled_seq": {"at_least": 1}})
    assert check.consecutive_failures is not None and check.consecutive_failures.exactly == 2
    assert check.last_pulled_seq is not None and check.last_pulled_seq.at_least == 1
