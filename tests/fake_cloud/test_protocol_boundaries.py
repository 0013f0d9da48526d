"""The protocol's numeric edges, each pinned on both sides (a mutation run left them unguarded)."""

from __future__ import annotations

from typing import Any

from engram_sync_kit.fake_cloud.protocol import (
    DEFAULT_PULL_LIMIT,
    MAX_MUTATION_BATCH,
    pull_mutations,
    push_mutations,
)
from engram_sync_kit.fake_cloud.routes import CHUNK_READ, MANIFEST, match
from engram_sync_kit.fake_cloud.state import FakeCloudState, ServerVersion


def sessions(count: int, project: str = "p") -> dict[str, Any]:
    return {
        "entries": [
            {
                "project": project,
                "entity": "session",
                "entity_key": f"s{index}",
                "op": "upsert",
                "payload": {
                    "id": f"s{index}",
                    "project": project,
                    "directory": "/work",
                    "started_at": "2026-01-01 00:00:00",
                },
            }
            for index in range(count)
        ]
    }


def test_a_batch_of_exactly_the_maximum_is_accepted_and_one_more_is_refused() -> None:
    assert MAX_MUTATION_BATCH == 100
    state = FakeCloudState(token=None)
    accepted, _ = push_mutations(state, sessions(MAX_MUTATION_BATCH))
    assert accepted.status == 200
    assert len(accepted.body["accepted_seqs"]) == MAX_MUTATION_BATCH
    refused, _ = push_mutations(FakeCloudState(token=None), sessions(MAX_MUTATION_BATCH + 1))
    assert (refused.status, refused.body) == (400, "batch too large: max 100 entries per request")


def test_a_pull_limit_of_zero_or_less_means_the_default_page() -> None:
    state = FakeCloudState(token=None)
    for _ in range(2):
        assert push_mutations(state, sessions(MAX_MUTATION_BATCH))[0].status == 200
    for limit in ("0", "-1"):
        page = pull_mutations(state, "0", limit)
        assert page.status == 200
        assert len(page.body["mutations"]) == DEFAULT_PULL_LIMIT
        assert page.body["has_more"] is True
    assert len(pull_mutations(state, "0", "1").body["mutations"]) == 1


def test_a_pull_limit_above_the_cap_gets_the_cap_and_one_below_gets_itself() -> None:
    state = FakeCloudState(token=None)
    for _ in range(2):
        assert push_mutations(state, sessions(MAX_MUTATION_BATCH))[0].status == 200
    sizes = {
        limit: (len(page.body["mutations"]), page.body["has_more"])
        for limit in ("99", "100", "101", "100000")
        for page in [pull_mutations(state, "0", limit)]
    }
    assert DEFAULT_PULL_LIMIT == 100
    assert sizes == {"99": (99, True), "100": (100, True), "101": (100, True), "100000": (100, True)}
    last = pull_mutations(state, "100", "100")
    assert (len(last.body["mutations"]), last.body["has_more"]) == (100, False)


def test_a_chunk_is_read_from_exactly_one_segment_after_sync_pull() -> None:
    versions: tuple[ServerVersion, ...] = ("v1.20", "v2", "v3")
    for version in versions:
        assert match("/sync/pull", version) is MANIFEST
        assert match("/sync/pull/abc", version) is CHUNK_READ
        assert match("/sync/pull/a%2Fb", version) is CHUNK_READ
        assert [match(path, version) for path in ("/sync/pull/", "/sync/pull/a/b", "/sync/pull/a/")] == [
            None
        ] * 3
