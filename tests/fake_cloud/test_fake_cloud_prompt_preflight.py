"""A prompt that carries source_inbox_id, sent the way the newer v2/v3 autosync worker sends it, against
the fake under each --server-version.

Predicted from source, never observed (no v2/v3 binary builds here): the worker's rules are
engram_contract.prompt_preflight (manager.go, module /v2, index file id 71019478362, and the /v3
manager_test.go, file id 70829266962); `run_cycle` below plays one cycle of that worker's push with
them (the rows are what its store would list). The fake must let a v2/v3 worker deliver such a prompt,
strand it as engram's own older server would (v1.20: the routes are not there), and never be asked
anything when the worker blocks the prompt locally (`prompt_provenance_blocked`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from engram_sync_kit.engram_contract.prompt_preflight import (
    PROMPT_PAIR_CLAIMS_PATH,
    PROMPT_PROVENANCE_BLOCKED,
    SERVER_UNSUPPORTED,
    SESSION_AUTHORITIES_PATH,
    KeyedPrompt,
    LocalOrigin,
    confirmed,
    keyed_prompt,
    local_denial,
    provenance_error_code,
    remote_failure_reason,
)
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "prompt-preflight-token"
PUSH = "/sync/mutations/push"
PULL = "/sync/mutations/pull"
SESSION, INBOX_ID, PROMPT, OWNER, PROJECT = "sess-1", "inbox-7", "prompt-1", "alpha", "beta"


@dataclass(frozen=True)
class Row:
    seq: int
    entity: str
    entity_key: str
    project: str
    payload: str


@dataclass
class CycleOutcome:
    acked: list[int] = field(default_factory=list)
    failures: list[tuple[str, int, str]] = field(default_factory=list)  # path, status, client error code
    blocked: list[str] = field(default_factory=list)
    reason_code: str | None = None
    pulled: bool = False


def rows() -> list[Row]:
    observation = {
        "sync_id": "obs-1",
        "session_id": SESSION,
        "type": "decision",
        "title": "t",
        "content": "c",
        "project": PROJECT,
        "scope": "project",
    }
    prompt = {
        "sync_id": PROMPT,
        "session_id": SESSION,
        "content": "claimed from the inbox",
        "project": PROJECT,
        "source_inbox_id": INBOX_ID,
    }
    return [
        Row(1, "observation", "obs-1", PROJECT, json.dumps(observation)),
        Row(2, "prompt", PROMPT, PROJECT, json.dumps(prompt)),
    ]


def eligible_origin() -> LocalOrigin:
    return LocalOrigin(KeyedPrompt(PROMPT, SESSION, INBOX_ID, PROJECT), session_owner=OWNER)


def run_cycle(http: httpx.Client, pending: list[Row], origin: LocalOrigin) -> CycleOutcome:
    """One predicted cycle: push the page per project (a keyed prompt after its preflight), then the
    pull unless a call failed."""
    outcome = CycleOutcome()
    projects: dict[str, list[Row]] = {}
    for row in pending:
        projects.setdefault(row.project, []).append(row)
    for project, batch in projects.items():
        entries: list[dict[str, Any]] = []
        seqs: list[int] = []
        for row in batch:
            prompt = keyed_prompt(row.entity, row.payload)
            if prompt is not None:
                denial = local_denial(prompt, row.entity_key, row.project, origin)
                if denial is not None:
                    outcome.blocked.append(denial)
                    continue
                if not preflight(http, prompt, origin.session_owner, outcome):
                    continue
            entry = {"project": project, "entity": row.entity, "entity_key": row.entity_key, "op": "upsert"}
            entries.append({**entry, "payload": json.loads(row.payload)})
            seqs.append(row.seq)
        if entries:
            pushed = http.post(PUSH, json={"entries": entries})
            if pushed.status_code == 200 and len(pushed.json().get("accepted_seqs") or []) == len(entries):
                outcome.acked += seqs
            else:
                outcome.failures.append((PUSH, pushed.status_code, ""))
    if outcome.failures:
        outcome.reason_code = remote_failure_reason(outcome.failures[0][1])
        return outcome
    if outcome.blocked:
        outcome.reason_code = PROMPT_PROVENANCE_BLOCKED
    outcome.pulled = http.get(PULL, params={"since_seq": 0, "limit": 100}).status_code == 200
    return outcome


def preflight(http: httpx.Client, prompt: KeyedPrompt, owner: str, outcome: CycleOutcome) -> bool:
    calls = (
        (SESSION_AUTHORITIES_PATH, {"session_id": prompt.session_id, "project": owner}),
        (
            PROMPT_PAIR_CLAIMS_PATH,
            {
                "session_id": prompt.session_id,
                "source_inbox_id": prompt.source_inbox_id,
                "sync_id": prompt.sync_id,
                "owner_project": owner,
                "project": prompt.project,
            },
        ),
    )
    for path, body in calls:
        answer = http.post(path, json=body)
        if not confirmed(answer.status_code, answer.content):
            code = provenance_error_code(path, answer.status_code, answer.content)
            outcome.failures.append((path, answer.status_code, code))
            return False
    return True


@pytest.fixture(scope="module", params=["v1.20", "v2", "v3"])
def cloud(request: pytest.FixtureRequest) -> Iterator[RunningFakeCloud]:
    config = FakeCloudConfig(token=TOKEN, allowed_projects=(OWNER, PROJECT), server_version=request.param)
    with start_fake_cloud(config) as running:
        yield running


@pytest.fixture
def http(cloud: RunningFakeCloud) -> Iterator[httpx.Client]:
    cloud.client.reset()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=cloud.base_url, headers=headers, trust_env=False, timeout=10) as client:
        yield client
    cloud.client.check()


def requests(cloud: RunningFakeCloud) -> list[tuple[str, int]]:
    """Each request once (the journal has one entry per pushed item)."""
    seen: dict[str, tuple[str, int]] = {}
    for entry in cloud.client.journal().entries:
        seen.setdefault(entry.request_id, (entry.path, entry.status))
    return list(seen.values())


def pulled_keys(http: httpx.Client) -> list[str]:
    answer = http.get(PULL, params={"since_seq": 0})
    return [m["entity_key"] for m in answer.json()["mutations"]]


def test_the_preflight_then_the_push_delivers_a_keyed_prompt(
    cloud: RunningFakeCloud, http: httpx.Client
) -> None:
    outcome = run_cycle(http, rows(), eligible_origin())
    if cloud.config.server_version == "v1.20":
        # engram's older server has no such routes: the registration's 404 is "server_unsupported", an
        # uncertain preflight, so the prompt stays pending, the pull is skipped and the state is a
        # transport failure with backoff (never prompt_provenance_blocked); the observation still goes.
        assert outcome.failures == [(SESSION_AUTHORITIES_PATH, 404, SERVER_UNSUPPORTED)]
        assert (outcome.acked, outcome.reason_code, outcome.pulled) == ([1], "transport_failed", False)
        assert requests(cloud) == [(SESSION_AUTHORITIES_PATH, 404), (PUSH, 200)]
        assert pulled_keys(http) == ["obs-1"]
        return
    assert (outcome.acked, outcome.failures, outcome.reason_code, outcome.pulled) == ([1, 2], [], None, True)
    assert requests(cloud) == [
        (SESSION_AUTHORITIES_PATH, 200),
        (PROMPT_PAIR_CLAIMS_PATH, 200),
        (PUSH, 200),
        (PULL, 200),
    ]
    assert pulled_keys(http) == ["obs-1", PROMPT]
    # The next cycle's replay of the same preflight is admitted again (200, not a conflict).
    assert run_cycle(http, rows()[1:], eligible_origin()).acked == [2]


@pytest.mark.parametrize(
    ("origin", "denial"),
    [
        (LocalOrigin(None, OWNER), "unverified keyed prompt origin"),
        (
            LocalOrigin(KeyedPrompt(PROMPT, SESSION, "inbox-other", PROJECT), OWNER),
            "unverified keyed prompt origin",
        ),
        (LocalOrigin(KeyedPrompt(PROMPT, SESSION, INBOX_ID, PROJECT), ""), "unverified local session owner"),
    ],
)
def test_a_local_denial_blocks_the_prompt_without_asking_the_cloud(
    cloud: RunningFakeCloud, http: httpx.Client, origin: LocalOrigin, denial: str
) -> None:
    outcome = run_cycle(http, rows(), origin)
    assert (outcome.blocked, outcome.failures) == ([denial], [])
    assert (outcome.acked, outcome.reason_code, outcome.pulled) == ([1], PROMPT_PROVENANCE_BLOCKED, True)
    assert requests(cloud) == [(PUSH, 200), (PULL, 200)]


def test_a_prompt_without_source_inbox_id_needs_no_preflight(
    cloud: RunningFakeCloud, http: httpx.Client
) -> None:
    plain = Row(
        2, "prompt", PROMPT, PROJECT, json.dumps({"sync_id": PROMPT, "session_id": SESSION, "content": "c"})
    )
    assert keyed_prompt(plain.entity, plain.payload) is None
    outcome = run_cycle(http, [rows()[0], plain], LocalOrigin(None, ""))
    assert outcome.reason_code is None and outcome.pulled
    assert [path for path, _ in requests(cloud)] == [PUSH, PULL]


def test_a_session_another_project_owns_is_a_conflict_not_a_block(
    cloud: RunningFakeCloud, http: httpx.Client
) -> None:
    other_device = http.post(SESSION_AUTHORITIES_PATH, json={"session_id": SESSION, "project": PROJECT})
    outcome = run_cycle(http, rows(), eligible_origin())
    if cloud.config.server_version == "v1.20":
        expected = (404, [(SESSION_AUTHORITIES_PATH, 404, SERVER_UNSUPPORTED)])
    else:
        expected = (200, [(SESSION_AUTHORITIES_PATH, 409, "")])
    assert (other_device.status_code, outcome.failures) == expected
    assert (outcome.acked, outcome.reason_code, outcome.pulled) == ([1], "transport_failed", False)


def test_an_owner_outside_the_allowlist_is_policy_forbidden(
    cloud: RunningFakeCloud, http: httpx.Client
) -> None:
    origin = LocalOrigin(KeyedPrompt(PROMPT, SESSION, INBOX_ID, PROJECT), session_owner="gamma")
    outcome = run_cycle(http, rows(), origin)
    if cloud.config.server_version == "v1.20":
        assert outcome.failures == [(SESSION_AUTHORITIES_PATH, 404, SERVER_UNSUPPORTED)]
        assert (outcome.reason_code, outcome.pulled) == ("transport_failed", False)
        return
    assert outcome.failures == [(SESSION_AUTHORITIES_PATH, 403, "")]
    assert (outcome.reason_code, outcome.pulled) == ("policy_forbidden", False)


def test_a_claim_without_a_registered_authority_keeps_the_servers_code(
    cloud: RunningFakeCloud, http: httpx.Client
) -> None:
    body = {
        "session_id": "s9",
        "source_inbox_id": "i",
        "sync_id": "y",
        "owner_project": OWNER,
        "project": PROJECT,
    }
    answer = http.post(PROMPT_PAIR_CLAIMS_PATH, json=body)
    expected = (
        SERVER_UNSUPPORTED if cloud.config.server_version == "v1.20" else "session_authority_unavailable"
    )
    assert answer.status_code == 404
    assert provenance_error_code(PROMPT_PAIR_CLAIMS_PATH, answer.status_code, answer.content) == expected
