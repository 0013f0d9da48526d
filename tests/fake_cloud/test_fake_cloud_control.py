"""The control API (/_fake/) and the fault schedule, against every mode of the ``cloud`` fixture."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from fake_cloud_support import AUTH, CloudUnderTest
from fake_cloud_support import push_observation as push

from engram_sync_kit.fake_cloud.client import FakeCloudControlError, FakeCloudWaitTimeout
from engram_sync_kit.fake_cloud.models import Fault, FaultAction, Route


def test_ready_and_reset_clear_every_kind_of_state(cloud: CloudUnderTest, http: httpx.Client) -> None:
    assert cloud.client.ready()
    assert push(http).status_code == 200
    http.post("/sync/push", json={"project": "p", "data": {"sessions": [{"id": "s1", "directory": "/d"}]}})
    cloud.client.set_allowlist(["only"])
    cloud.client.pause("p")
    cloud.client.add_faults([Fault(route=Route.CHUNK_PULL)])
    cloud.client.reset()
    assert cloud.client.journal().entries == []
    assert cloud.client.received() == []
    assert http.get("/sync/pull", params={"project": "p"}).json()["chunks"] == []
    assert http.get("/sync/mutations/pull").json()["mutations"] == []
    assert push(http).json()["accepted_seqs"] == [1]


def test_journal_records_every_request_with_monotonic_ids(cloud: CloudUnderTest, http: httpx.Client) -> None:
    http.get("/health")
    push(http)
    with cloud.http() as raw:
        raw.get("/sync/mutations/pull")
    journal = cloud.client.journal()
    assert [(e.transport, e.path, e.status) for e in journal.entries] == [
        ("other", "/health", 200),
        ("mutation", "/sync/mutations/push", 200),
        ("mutation", "/sync/mutations/pull", 401),
    ]
    ids = [e.id for e in journal.entries]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert journal.overflow == 0
    assert [e.id for e in cloud.client.journal(since_id=ids[0]).entries] == ids[1:]
    assert all(e.time > time.time() - 60 for e in journal.entries)


def wait_until_parked(cloud: CloudUnderTest) -> None:
    """Until a /_fake/wait call sleeps on the journal (stats: waiting), instead of guessing with a sleep."""
    deadline = time.monotonic() + 20
    while cloud.client.stats()["waiting"] != 1:
        assert time.monotonic() < deadline, "the /_fake/wait call never parked"
        time.sleep(0.01)


def test_wait_returns_as_soon_as_entries_arrive(cloud: CloudUnderTest, http: httpx.Client) -> None:
    def push_later() -> None:
        wait_until_parked(cloud)  # the waiter must already be asleep when the push lands
        push(http, key="late")

    pusher = threading.Thread(target=push_later)
    pusher.start()
    try:
        [entry] = cloud.client.wait(1, timeout=20, entity_key="late", status=200)
    finally:
        pusher.join()
    assert entry.entity == "observation"


def test_wait_times_out_with_408_and_the_closest_misses(cloud: CloudUnderTest, http: httpx.Client) -> None:
    push(http, project="p")
    with pytest.raises(FakeCloudWaitTimeout) as caught:
        cloud.client.wait(1, timeout=0.2, project="q", transport="mutation")
    assert "0 of 1" in str(caught.value)
    [closest] = caught.value.closest
    assert closest["project"] == "p"
    assert closest["mismatched"] == ["project"]


def test_wait_rejects_unknown_match_fields(cloud: CloudUnderTest) -> None:
    with pytest.raises(FakeCloudControlError, match="unknown match field"):
        cloud.client.wait(1, timeout=0.1, colour="blue")


def test_wait_received_counts_stored_mutations_not_requests(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    push(http, key="early")  # stored before the wait: it counts
    cloud.client.ack_without_store()  # a 200 that stores nothing must not count

    def push_later() -> None:
        wait_until_parked(cloud)
        push(http, key="acked-only")
        wait_until_parked(cloud)  # still asleep: an acked-but-unstored push is no stored mutation
        push(http, key="late")

    pusher = threading.Thread(target=push_later)
    pusher.start()
    try:
        found = cloud.client.wait_received(2, timeout=20, match={"entity": "observation", "op": "upsert"})
    finally:
        pusher.join()
    assert [item.entity_key for item in found] == ["early", "late"]
    assert [item.entity_key for item in cloud.client.wait_received(1, timeout=0, since_seq=1)] == ["late"]


def test_wait_received_times_out_with_the_closest_stored_mutations(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    push(http, project="p", key="o1")
    with pytest.raises(FakeCloudWaitTimeout) as caught:
        cloud.client.wait_received(2, timeout=0.2, match={"project": "p"})
    assert (
        str(caught.value) == "wait: 1 of 2 matching received mutations after 0.2 s (match {'project': 'p'})"
    )
    assert [item.entity_key for item in caught.value.found] == ["o1"]
    [closest] = caught.value.closest
    assert (closest["seq"], closest["mismatched"], "payload" in closest) == (1, [], False)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"of": "requests"}, '"of" must be "journal" or "received", got \'requests\''),
        ({"of": "received", "match": {"path": "/x"}}, "unknown match field(s) ['path']; allowed: ['entity'"),
        ({"of": "received", "match": {"payload": {}}}, "unknown match field(s) ['payload']"),
        ({"of": "received", "since_seq": "1"}, '"since_seq" must be an integer'),
        ({"of": "received", "match": ["entity"]}, '"match" must be an object of stored mutation fields'),
    ],
)
def test_wait_received_refuses_bad_requests_with_400(
    cloud: CloudUnderTest, http: httpx.Client, body: dict[str, Any], error: str
) -> None:
    response = http.post("/_fake/wait", json={"timeout": 0, **body})
    assert response.status_code == 400 and error in response.json()["error"]


def test_status_fault_fails_the_next_pushes_of_one_project_only(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.add_faults([Fault(route=Route.MUTATIONS_PUSH, project="p", times=2, status=503)])
    assert push(http, project="q").status_code == 200
    assert push(http, project="p").status_code == 503
    assert push(http, project="p").status_code == 503
    assert push(http, project="p").status_code == 200
    statuses = [e.status for e in cloud.client.journal().entries if e.project == "p"]
    assert statuses == [503, 503, 200]
    assert [r.project for r in cloud.client.received()] == ["q", "p"]


def test_latency_fault_delays_but_answers_normally(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.add_faults([{"route": "mutations_pull", "action": "latency", "latency_ms": 300}])
    started = time.monotonic()
    assert http.get("/sync/mutations/pull").status_code == 200
    assert time.monotonic() - started >= 0.3


def test_reset_after_read_stores_the_push_but_the_client_sees_an_error(cloud: CloudUnderTest) -> None:
    cloud.client.add_faults([Fault(route=Route.MUTATIONS_PUSH, action=FaultAction.RESET_AFTER_READ)])
    with cloud.http(headers=AUTH) as http, pytest.raises(httpx.TransportError):
        push(http)
    [received] = cloud.client.received()
    assert received.entity_key == "o1"
    [entry] = cloud.client.wait(1, timeout=5, path="/sync/mutations/push")
    assert entry.status == 0


def test_short_accepted_fault_returns_fewer_seqs_than_entries(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.add_faults([Fault(route=Route.MUTATIONS_PUSH, action=FaultAction.SHORT_ACCEPTED, keep=1)])
    entries = [
        {"project": "p", "entity": "x", "entity_key": f"k{i}", "op": "upsert", "payload": {"n": i}}
        for i in range(3)
    ]
    response = http.post("/sync/mutations/push", json={"entries": entries})
    assert response.status_code == 200
    assert response.json()["accepted_seqs"] == [1]
    assert len(cloud.client.received()) == 3


def test_ack_without_store_answers_like_a_stored_push_but_keeps_nothing(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.ack_without_store(project="p")
    lost = push(http, key="lost")
    assert lost.status_code == 200
    assert lost.json() == {
        "accepted_seqs": [1],
        "project": "p",
        "project_path": "",
        "project_source": "request_body",
    }
    [entry] = cloud.client.wait(1, timeout=5, path="/sync/mutations/push", entity_key="lost")
    assert entry.status == 200
    assert cloud.client.received() == []
    assert http.get("/sync/mutations/pull").json()["mutations"] == []
    assert http.get("/sync/pull", params={"project": "p"}).json()["chunks"] == []
    # Consumed once: the next push is stored, and is given the seq the lost one was acknowledged with.
    kept = push(http, key="kept")
    assert kept.json()["accepted_seqs"] == [1]
    assert [m["entity_key"] for m in http.get("/sync/mutations/pull").json()["mutations"]] == ["kept"]
    assert len(http.get("/sync/pull", params={"project": "p"}).json()["chunks"]) == 1


def test_ack_without_store_on_the_chunk_route(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.add_faults([{"route": "chunk_push", "action": "ack_without_store"}])
    chunk = {"sessions": [{"id": "s1", "directory": "/d"}]}
    answer = http.post("/sync/push", json={"project": "p", "data": chunk})
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"
    assert http.get("/sync/pull", params={"project": "p"}).json()["chunks"] == []
    assert http.get(f"/sync/pull/{answer.json()['chunk_id']}", params={"project": "p"}).status_code == 404
    assert cloud.client.received() == []


def test_hang_fault_holds_the_request_then_drops_it(cloud: CloudUnderTest) -> None:
    cloud.client.add_faults([{"route": "any", "action": "hang", "seconds": 2}])
    with cloud.http(headers=AUTH) as http, pytest.raises(httpx.TimeoutException):
        http.get("/sync/mutations/pull", timeout=0.3)
    [entry] = cloud.client.wait(1, timeout=5, path="/sync/mutations/pull")
    assert entry.status == 0


def test_faults_can_be_listed_and_cleared(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.add_faults([Fault(route=Route.CHUNK_PUSH, times=3)])
    cloud.client.clear_faults()
    assert push(http).status_code == 200
    assert http.get("/_fake/faults").json() == {"faults": []}


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", "faults", {"faults": [{"route": "nowhere"}]}, "faults[0].route: 'nowhere' is not one of"),
        (
            "POST",
            "faults",
            {"faults": [{"action": "status", "status": 42}]},
            "faults[0].status: expected an integer from 200 to 599",
        ),
        ("POST", "faults", {"faults": [{"colour": 1}]}, "faults[0]: unknown field(s) ['colour']"),
        ("POST", "faults", {"faults": "all"}, '"faults" must be a list'),
        ("PUT", "allowlist", {"projects": "p"}, '"projects" must be a list of strings'),
        ("PUT", "pause", {"paused": True}, '"project" must be a non-empty string'),
        ("POST", "wait", {"count": 0}, '"count" must be a positive integer'),
        ("POST", "wait", {"timeout": -1}, '"timeout" must be 0 to 600 seconds'),
    ],
)
def test_bad_control_requests_get_a_one_line_400(
    cloud: CloudUnderTest, method: str, path: str, body: dict[str, Any], message: str
) -> None:
    with cloud.http() as raw:
        response = raw.request(method, f"/_fake/{path}", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error
    assert "\n" not in error


def test_control_api_unknown_route_and_method(cloud: CloudUnderTest) -> None:
    with cloud.http() as raw:
        assert raw.get("/_fake/nothing").status_code == 404
        assert raw.get("/_fake/reset").status_code == 405
        assert raw.post("/_fake/wait", content=b"{oops").status_code == 400


def test_received_pages_by_since_seq(cloud: CloudUnderTest, http: httpx.Client) -> None:
    for key in ("a", "b", "c"):
        push(http, key=key)
    assert [r.entity_key for r in cloud.client.received(since_seq=1)] == ["b", "c"]
    assert http.get("/_fake/received", params={"since_seq": 99}).json() == {
        "count": 3,
        "overflow": 0,
        "received": [],
    }


def test_wait_keeps_counting_across_a_reset(cloud: CloudUnderTest, http: httpx.Client) -> None:
    for key in ("a", "b", "c"):
        push(http, key=key)

    def reset_then_push() -> None:
        wait_until_parked(cloud)  # the waiter must already be asleep, having scanned ids 1-3
        cloud.client.reset()
        push(http, key="after")

    worker = threading.Thread(target=reset_then_push)
    worker.start()
    try:
        [entry] = cloud.client.wait(1, timeout=20, entity_key="after")
    finally:
        worker.join()
    assert entry.id == 1
