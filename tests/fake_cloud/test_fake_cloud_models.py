"""The pure parts, without HTTP: chunk canonicalization, the journal, the fault schedule."""

from __future__ import annotations

import json

import pytest

from engram_sync_kit.fake_cloud import chunkcodec
from engram_sync_kit.fake_cloud.chunkcodec import ChunkError
from engram_sync_kit.fake_cloud.models import (
    FakeCloudState,
    Fault,
    FaultAction,
    InvalidControlRequest,
    JournalItem,
    Route,
    payload_digest,
)


def test_go_json_sorts_keys_and_escapes_html_like_encoding_json() -> None:
    assert chunkcodec.go_json({"b": "<a & b>", "a": "ñ"}) == '{"a":"ñ","b":"\\u003ca \\u0026 b\\u003e"}'


@pytest.mark.parametrize(("raw", "normalized"), [(" My--Proj__X ", "my-proj_x"), ("a---b", "a-b"), ("", "")])
def test_normalize_project_matches_engram(raw: str, normalized: str) -> None:
    assert chunkcodec.normalize_project(raw) == normalized


def test_canonicalize_sets_the_project_on_every_row() -> None:
    data = {"sessions": [{"id": "s", "directory": "/d"}], "observations": [{"sync_id": "o", "project": "x"}]}
    canonical = json.loads(chunkcodec.canonicalize_for_project(data, "p"))
    assert canonical["sessions"][0]["project"] == "p"
    assert canonical["observations"][0]["project"] == "p"


def test_canonicalize_normalizes_mutation_payloads_in_go_field_order() -> None:
    payload = json.dumps(
        {"title": " T ", "sync_id": "o", "session_id": "s", "type": "t", "content": "c", "scope": "x"}
    )
    data = {"mutations": [{"entity": "observation", "op": "upsert", "payload": payload}]}
    [mutation] = json.loads(chunkcodec.canonicalize_for_project(data, "p"))["mutations"]
    assert mutation["entity_key"] == "o"
    assert mutation["project"] == "p"
    assert list(json.loads(mutation["payload"])) == [
        "sync_id",
        "session_id",
        "type",
        "title",
        "content",
        "project",
        "scope",
    ]
    assert json.loads(mutation["payload"])["title"] == "T"


def test_a_session_not_owned_by_the_chunks_mutations_keeps_its_project() -> None:
    data = {"sessions": [{"id": "other", "project": "q"}], "mutations": []}
    assert json.loads(chunkcodec.canonicalize_for_project(data, "p"))["sessions"][0]["project"] == "q"


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (
            {"entity": "thing", "op": "upsert", "payload": "{}"},
            'mutations[0]: unsupported mutation "thing"/"upsert"',
        ),
        ({"entity": "session", "op": "upsert", "payload": ""}, "mutations[0]: payload is required"),
        (
            {"entity": "session", "op": "delete", "entity_key": "a", "payload": '{"id": "b"}'},
            'mutations[0]: entity_key "a" does not match payload key "b"',
        ),
        (
            {"entity": "session", "op": "upsert", "payload": '{"id": "s"}'},
            "mutations[0]: session payload directory is required for upsert",
        ),
    ],
)
def test_canonicalize_refuses_what_the_real_codec_refuses(mutation: dict[str, str], message: str) -> None:
    with pytest.raises(ChunkError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        chunkcodec.canonicalize_for_project({"mutations": [mutation]}, "p")


def test_payload_digest_is_the_same_for_an_object_and_its_json_string() -> None:
    assert payload_digest({"b": 1, "a": "x"}) == payload_digest('{"a": "x", "b": 1}')


def test_journal_is_bounded_and_counts_what_it_dropped() -> None:
    state = FakeCloudState(token="t", journal_limit=2)
    for index in range(3):
        state.record(request_id=f"r{index}", transport="other", method="GET", path="/health", status=200)
    assert [entry.id for entry in state.journal] == [2, 3]
    assert state.overflow == 1
    written = state.record(
        request_id="r9",
        transport="mutation",
        method="POST",
        path="/x",
        status=200,
        items=[JournalItem("p"), JournalItem("q")],
    )
    assert [entry.request_id for entry in written] == ["r9", "r9"]
    assert state.overflow == 3
    assert [entry.id for entry in state.journal_since(4)] == [5]
    assert [entry.id for entry in state.journal_since(0)] == [4, 5]
    assert state.journal_since(5) == []


def test_faults_fire_in_order_and_are_used_up() -> None:
    state = FakeCloudState(token="t")
    state.add_faults(
        [Fault(route=Route.CHUNK_PUSH, project="p", times=2), Fault(route=Route.ANY, status=500)]
    )
    assert state.take_fault(Route.CHUNK_PUSH, ["q"]) is not None  # only the catch-all matches "q"
    assert state.take_fault(Route.CHUNK_PUSH, ["p"]) is not None
    assert state.take_fault(Route.CHUNK_PUSH, ["p"]) is not None
    assert state.take_fault(Route.CHUNK_PUSH, ["p"]) is None


def test_fault_defaults_and_validation() -> None:
    fault = Fault.from_dict({})
    assert (fault.route, fault.action, fault.times, fault.status) == (Route.ANY, FaultAction.STATUS, 1, 503)
    with pytest.raises(InvalidControlRequest, match=r"fault.times: expected an integer from 1"):
        Fault.from_dict({"times": 0})
    with pytest.raises(InvalidControlRequest, match=r"fault.seconds: expected a number from 0 to 600"):
        Fault.from_dict({"seconds": "long"})
