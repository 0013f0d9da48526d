"""The faults explore's newer nemeses use, against every mode of the ``cloud`` fixture: a truncated and a
slow answer, every row of a pull answered twice, and a fault that hits one client host only (one machine
partitioned while the other's requests pass)."""

from __future__ import annotations

import time

import httpx
import pytest
from fake_cloud_support import AUTH, CloudUnderTest, push_observation

from engram_sync_kit.fake_cloud.client import FakeCloudControlError
from engram_sync_kit.fake_cloud.faults import Fault, InvalidControlRequest, request_host


def _push(http: httpx.Client, key: str = "o1") -> httpx.Response:
    return push_observation(http, key=key)


def test_a_truncated_answer_is_cut_after_the_push_was_stored(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    cloud.client.add_faults([{"route": "mutations_push", "action": "truncate_body"}])
    with pytest.raises(httpx.RemoteProtocolError):
        _push(http)
    assert [item.entity_key for item in cloud.client.received()] == ["o1"]
    assert _push(http, "o2").status_code == 200  # the fault is used up


def test_a_slow_answer_arrives_whole_after_its_seconds(cloud: CloudUnderTest, http: httpx.Client) -> None:
    cloud.client.add_faults([{"route": "mutations_push", "action": "slow_body", "seconds": 1.0}])
    started = time.monotonic()
    answer = _push(http)
    assert answer.status_code == 200 and answer.json()["accepted_seqs"] == [1]
    assert time.monotonic() - started >= 0.9


def test_duplicate_rows_answers_a_pull_page_with_every_row_twice(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    assert _push(http).status_code == 200
    cloud.client.add_faults([{"route": "mutations_pull", "action": "duplicate_rows"}])
    page = http.get("/sync/mutations/pull", params={"since_seq": 0}).json()
    assert [row["seq"] for row in page["mutations"]] == [1, 1]
    again = http.get("/sync/mutations/pull", params={"since_seq": 0}).json()
    assert [row["seq"] for row in again["mutations"]] == [1]


def test_duplicate_rows_lists_a_chunk_twice_and_its_rows_twice(
    cloud: CloudUnderTest, http: httpx.Client
) -> None:
    chunk = {"sessions": [{"id": "s1", "directory": "/d"}]}
    chunk_id = http.post("/sync/push", json={"project": "p", "data": chunk}).json()["chunk_id"]
    cloud.client.add_faults([{"route": "chunk_pull", "action": "duplicate_rows", "times": 2}])
    manifest = http.get("/sync/pull", params={"project": "p"}).json()
    assert [entry["id"] for entry in manifest["chunks"]] == [chunk_id, chunk_id]
    rows = http.get(f"/sync/pull/{chunk_id}", params={"project": "p"}).json()
    assert [session["id"] for session in rows["sessions"]] == ["s1", "s1"]


def test_a_fault_with_a_host_hits_that_client_only(cloud: CloudUnderTest, http: httpx.Client) -> None:
    """The harness's `device:` machines reach a loopback cloud as localhost, the scenario's own engram as
    127.0.0.1: a `host` fault partitions one machine while the other's requests pass."""
    cloud.client.add_faults(
        [{"route": "any", "action": "status", "status": 503, "host": "localhost", "times": 5}]
    )
    assert _push(http).status_code == 200  # 127.0.0.1 passes
    verify = str(cloud.ca_file) if cloud.ca_file else True
    other = cloud.base_url.replace("127.0.0.1", "localhost")
    with httpx.Client(base_url=other, verify=verify, trust_env=False, timeout=30, headers=AUTH) as machine_b:
        assert _push(machine_b, "o2").status_code == 503
    assert [item.entity_key for item in cloud.client.received()] == ["o1"]


def test_a_host_fault_must_name_a_host() -> None:
    with pytest.raises(InvalidControlRequest, match="host: expected a host name"):
        Fault.from_dict({"host": " "})
    assert Fault.from_dict({"host": "LocalHost"}).host == "localhost"
    assert [request_host(h) for h in ("localhost:443", "[::1]:80", "example.org")] == [
        "localhost",
        "::1",
        "example.org",
    ]


def test_the_control_api_refuses_an_unknown_fault_action_naming_the_new_ones(cloud: CloudUnderTest) -> None:
    with pytest.raises(FakeCloudControlError, match="truncate_body"):
        cloud.client.add_faults([{"action": "vanish"}])


def test_the_journal_names_the_host_each_request_addressed(cloud: CloudUnderTest, http: httpx.Client) -> None:
    """Two machines through one cloud: the harness tells machine A's worker cycles from B's by the host."""
    mark = max((entry.id for entry in cloud.client.journal().entries), default=0)
    assert _push(http).status_code == 200
    verify = str(cloud.ca_file) if cloud.ca_file else True
    other = cloud.base_url.replace("127.0.0.1", "localhost")
    with httpx.Client(base_url=other, verify=verify, trust_env=False, timeout=30, headers=AUTH) as machine_b:
        assert _push(machine_b, "o2").status_code == 200
        assert machine_b.get("/nowhere").status_code == 404
    entries = cloud.client.journal(since_id=mark).entries
    assert [(entry.path, entry.host) for entry in entries] == [
        ("/sync/mutations/push", "127.0.0.1"),
        ("/sync/mutations/push", "localhost"),
        ("/nowhere", "localhost"),
    ]
