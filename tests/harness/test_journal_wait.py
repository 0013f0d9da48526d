"""The harness waits on the fake's /_fake/wait, never on a loop over the journal or the stored rows: after
a manual sync (a newer journal entry) and in an autosync `until:` (enough stored mutations)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_sync_kit.fake_cloud.state import RECEIVED_MATCH_FIELDS
from engram_sync_kit.harness.cloud.launch import CloudHandle
from engram_sync_kit.harness.errors import ScenarioError, StepFailed
from engram_sync_kit.harness.scenario import steps
from engram_sync_kit.harness.scenario.loader import parse_scenario
from engram_sync_kit.harness.scenario.schema import RECEIVED_FIELDS, UntilReceived
from engram_sync_kit.harness.scenario.steps import await_journal, await_received

TOKEN = "harness-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[CloudHandle]:
    handle = CloudHandle("inprocess", TOKEN, ["*"], tmp_path / "cloud.log")
    try:
        yield handle
    finally:
        handle.close()


def test_the_wait_parks_on_the_fake_until_a_newer_entry_arrives(cloud: CloudHandle) -> None:
    with httpx.Client(base_url=cloud.base_url) as http:
        http.get("/health")
        mark = cloud.client.journal().entries[-1].id

        def request_once_parked() -> None:
            deadline = time.monotonic() + 20
            while cloud.client.stats()["waiting"] != 1:  # asleep in /_fake/wait, not polling
                assert time.monotonic() < deadline
                time.sleep(0.01)
            http.get("/health")

        requester = threading.Thread(target=request_once_parked)
        requester.start()
        try:
            await_journal(cloud.client, mark, timeout=20, what="the manual sync's requests")
        finally:
            requester.join()
    assert [entry.id > mark for entry in cloud.client.journal(since_id=mark).entries] == [True]


def test_nothing_new_fails_the_step_in_one_line_with_the_fakes_answer(cloud: CloudHandle) -> None:
    with pytest.raises(StepFailed) as caught:
        await_journal(
            cloud.client, 0, timeout=0.2, what="the fake cloud to journal the manual sync's requests"
        )
    message = str(caught.value)
    assert message.startswith(
        "timed out after 0s waiting for the fake cloud to journal the manual sync's requests (wait: 0 of 1 "
    )
    assert "\n" not in message


def push(http: httpx.Client, key: str, project: str = "p") -> None:
    payload = {
        "sync_id": key,
        "session_id": "s1",
        "type": "t",
        "title": "x",
        "content": "c",
        "scope": "project",
    }
    entry = {
        "project": project,
        "entity": "observation",
        "entity_key": key,
        "op": "upsert",
        "payload": payload,
    }
    assert http.post("/sync/mutations/push", json={"entries": [entry]}).status_code == 200


def parked(cloud: CloudHandle) -> None:
    deadline = time.monotonic() + 10
    while cloud.client.stats()["waiting"] != 1:  # asleep in /_fake/wait, not polling
        assert time.monotonic() < deadline, "the wait never parked on /_fake/wait"
        time.sleep(0.01)


def test_the_until_wait_counts_every_stored_mutation_and_parks_on_the_fake(cloud: CloudHandle) -> None:
    until = UntilReceived(received=2, match={"entity": "observation", "project": "p"})
    failures: list[BaseException] = []
    with httpx.Client(base_url=cloud.base_url, headers=AUTH) as http:
        push(http, "before")  # stored before the wait began: it counts, as `until` always counted
        push(http, "elsewhere", project="q")

        def push_once_parked() -> None:
            try:
                parked(cloud)
                push(http, "after")
            except BaseException as failure:  # reported by the test, not lost in the thread
                failures.append(failure)

        pusher = threading.Thread(target=push_once_parked)
        pusher.start()
        try:
            await_received(cloud.client, until, timeout=10)
        finally:
            pusher.join()
    assert failures == []
    assert [item.entity_key for item in cloud.client.received()] == ["before", "elsewhere", "after"]


def test_until_zero_returns_at_once(cloud: CloudHandle) -> None:
    await_received(cloud.client, UntilReceived(received=0), timeout=0.2)


def test_too_few_stored_fails_the_step_in_one_line_with_the_closest_miss(cloud: CloudHandle) -> None:
    with httpx.Client(base_url=cloud.base_url, headers=AUTH) as http:
        push(http, "o1", project="p")
    with pytest.raises(StepFailed) as caught:
        await_received(cloud.client, UntilReceived(received=1, match={"project": "q"}), timeout=0.2)
    message = str(caught.value)
    assert message.startswith(
        "timed out after 0s waiting for the cloud to store 1 mutation(s) matching {'project': 'q'} "
        "(wait: 0 of 1 matching received mutations after 0.2 s"
    ), message
    assert '; closest: {"seq": 1, ' in message and '"mismatched": ["project"]}' in message
    assert '"payload":' not in message and "\n" not in message


def test_an_until_field_the_cloud_does_not_store_is_refused_on_load(tmp_path: Path) -> None:
    text = "name: x\ncloud: {autosync: true}\nsteps:\n  - sync: {until: {received: 1, match: {path: /x}}}\n"
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text, tmp_path / "s.scenario.yaml")
    assert str(refused.value) == (
        f"{tmp_path / 's.scenario.yaml'}:4: steps.0.sync.until.match: unknown field 'path' to match; allowed: "
        "transport, project, entity, entity_key, op, payload_digest, seq"
    )


def test_the_until_fields_are_the_fields_the_fake_matches_stored_mutations_on() -> None:
    assert set(RECEIVED_FIELDS) == RECEIVED_MATCH_FIELDS


def test_a_wait_longer_than_the_fakes_limit_parks_again_until_its_deadline(
    cloud: CloudHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        steps, "WAIT_SLICE_SECONDS", 0.2
    )  # the fake's limit is 600 s; one slice is enough here
    calls: list[float] = []
    wait_received = cloud.client.wait_received

    def counted(count: int, timeout: float, **options: Any) -> Any:
        calls.append(timeout)
        return wait_received(count, timeout, **options)

    monkeypatch.setattr(cloud.client, "wait_received", counted)
    failures: list[BaseException] = []
    with httpx.Client(base_url=cloud.base_url, headers=AUTH) as http:

        def push_in_a_later_slice() -> None:
            try:
                deadline = time.monotonic() + 10
                while len(calls) < 3:
                    assert time.monotonic() < deadline, "the wait never parked a third time"
                    time.sleep(0.01)
                push(http, "late")
            except BaseException as failure:
                failures.append(failure)

        pusher = threading.Thread(target=push_in_a_later_slice)
        pusher.start()
        try:
            await_received(cloud.client, UntilReceived(received=1), timeout=20)
        finally:
            pusher.join()
    assert failures == [] and len(calls) >= 3 and max(calls) <= 0.2
