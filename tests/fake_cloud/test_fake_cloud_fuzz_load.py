"""Issue 11's adversarial suite, part two: a hypothesis body fuzzer over every route (sync and control) and
a short, bounded loopback load test. Both stop by themselves."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_sync_kit.fake_cloud.control import ROUTES as CONTROL_ROUTES
from engram_sync_kit.fake_cloud.process import FakeCloudProcess
from engram_sync_kit.fake_cloud.routes import SYNC_ROUTES
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

EVERY_ROUTE = sorted(
    [(method, path) for path, route in SYNC_ROUTES.items() for method in route.methods]
    + [("GET", "/sync/pull/abcd1234?project=p"), ("GET", "/sync/mutations/pull?since_seq=-1&limit=99999")]
    + [(method, f"/_fake/{name}") for name, methods in CONTROL_ROUTES.items() for method in methods]
)

# Values that parse but break later: huge and non-finite numbers, lone surrogates, deep nesting.
TRICKY_LITERALS = st.sampled_from(
    [
        "9" * 5000,
        "1e999",
        "-1e999",
        "NaN",
        "Infinity",
        '"\\ud800"',
        '"\\udc00\\ud800"',
        "[" * 300 + "]" * 300,
        "1" + "0" * 30,
        '"9999-12-31T23:59:59-23:59"',
        "-0",
        "1.5e308",
    ]
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["p", "session", "observation", "prompt", "relation", "upsert", "delete", "s1", ""]),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
entry_like = st.fixed_dictionaries(
    {},
    optional={
        "project": st.sampled_from(["p", "", " ", "P--x"]) | json_leaves,
        "entity": st.sampled_from(["session", "observation", "prompt", "relation", "thing"]) | json_leaves,
        "entity_key": st.sampled_from(["s1", "o1", ""]) | json_leaves,
        "op": st.sampled_from(["upsert", "delete", ""]) | json_leaves,
        "payload": json_values,
    },
)
structured = st.one_of(
    json_values,
    st.fixed_dictionaries({"entries": st.lists(entry_like, max_size=3) | json_values}),
    st.fixed_dictionaries({"project": st.sampled_from(["p", ""]) | json_leaves, "data": json_values}),
    st.fixed_dictionaries({}, optional={"count": json_leaves, "timeout": json_leaves, "match": json_values}),
    st.fixed_dictionaries({}, optional={"faults": st.lists(json_values, max_size=2) | json_leaves}),
    st.fixed_dictionaries(
        {}, optional={"projects": json_values, "project": json_leaves, "paused": json_leaves}
    ),
)


def _text(value: object) -> bytes:
    return json.dumps(value).encode()


def _spliced(value: object, literal: str) -> bytes:
    # Put a tricky literal where a JSON value would go: the text still parses with Python's defaults.
    text = json.dumps(value)
    return (text.replace("null", literal, 1) if "null" in text else f'{{"entries": [{literal}]}}').encode()


# Where each route reads a value: a tricky literal (or any JSON value) goes into one of these holes.
PUSH_TEMPLATES = [
    '{"entries": [{"project": "p", "entity": "thing", "entity_key": "k", "op": "upsert", "payload": {"v": @}}]}',
    '{"entries": [{"project": "p", "entity": "observation", "entity_key": "o1", "op": "upsert", '
    '"payload": {"sync_id": "o1", "session_id": "s1", "type": "t", "title": "x", "content": "c", '
    '"scope": "project", "revision_count": @}}]}',
    '{"entries": [{"project": @, "entity": "session", "entity_key": "s1", "op": "delete", "payload": {"id": "s1"}}]}',
    '{"entries": [{"project": "p", "entity": "session", "entity_key": @, "op": "delete", "payload": @}]}',
]
ROUTE_TEMPLATES = {
    "/sync/mutations/push": PUSH_TEMPLATES,
    "/sync/push": [
        '{"project": "p", "client_created_at": @, "data": {"sessions": [{"id": "s1", "directory": "/d"}]}}',
        '{"project": "p", "data": {"sessions": [{"id": "s1", "directory": "/d", "summary": @}]}}',
        '{"project": @, "data": {"mutations": [{"entity": "relation", "op": "upsert", "payload": @}]}}',
    ],
    # engram v3's provenance routes (the fake's default server version serves them).
    "/sync/session-authorities": ['{"session_id": @, "project": "p"}', '{"session_id": "s1", "project": @}'],
    "/sync/prompt-pair-claims": [
        '{"session_id": "s1", "source_inbox_id": @, "sync_id": "y", "owner_project": "p", "project": "p"}',
        '{"session_id": "s1", "source_inbox_id": "i", "sync_id": @, "owner_project": @, "project": "p"}',
    ],
    "/sync/prompt-source-attestations": [
        '{"session_id": "s1", "source_inbox_id": "i", "sync_id": @, "owner_project": "p", "prompt_project": @}'
    ],
    "/sync/prompt-source-attestations/verify": ['{"audit_id": @, "session_id": "s1", "prompt_project": @}'],
    "/_fake/wait": ['{"count": 1, "timeout": 0, "match": {"entity_key": @}}', '{"count": @, "timeout": 0}'],
    "/_fake/allowlist": ['{"projects": ["p", @]}'],
    "/_fake/pause": ['{"project": @, "paused": true}'],
    "/_fake/faults": [
        '{"faults": [{"route": "chunk_pull", "status": @}]}',
        '{"faults": [{"route": "chunk_pull", "action": "latency", "latency_ms": @}]}',
    ],
}
holes = st.one_of(TRICKY_LITERALS, json_values.map(json.dumps))


def templated(path: str) -> st.SearchStrategy[bytes]:
    templates = ROUTE_TEMPLATES.get(path.split("?")[0], PUSH_TEMPLATES)
    return st.tuples(st.sampled_from(templates), holes, holes).map(
        lambda parts: parts[0].replace("@", parts[1], 1).replace("@", parts[2]).encode()
    )


bodies = st.one_of(
    structured.map(_text),
    st.tuples(structured, TRICKY_LITERALS).map(lambda pair: _spliced(*pair)),
    st.binary(max_size=64),
    structured.map(lambda value: gzip.compress(_text(value), mtime=0)),
    structured.map(lambda value: gzip.compress(_text(value), mtime=0)[:-4]),
    st.just(b""),
)


@pytest.fixture(scope="module")
def fuzz_cloud() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, max_push_bytes=256 * 1024)) as cloud:
        yield cloud


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and Infinity, which no JSON parser but Python's accepts."""

    def refuse(name: str) -> object:
        raise AssertionError(f"non-JSON constant {name} served")

    return json.loads(text, parse_constant=refuse)


def _real_500(response: httpx.Response) -> bool:
    """The one 5xx the real v1.20 answers too: a mutation payload its batch insert cannot materialize."""
    return response.status_code == 500 and response.text.startswith("insert mutations: cloudstore: ")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(EVERY_ROUTE), data=st.data(), authorized=st.sampled_from([True, True, False]))
def test_every_route_answers_every_body_with_a_4xx_or_better(
    fuzz_cloud: RunningFakeCloud, route: tuple[str, str], data: st.DataObject, authorized: bool
) -> None:
    method, path = route
    body = data.draw(st.one_of(templated(path), templated(path), bodies), label="body")
    if path == "/_fake/wait":
        # The fuzzer must not park itself: any wait it sends times out at once.
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            parsed = None
        if isinstance(parsed, dict):
            body = json.dumps({**parsed, "timeout": 0}).encode()
        elif not body.decode("utf-8", "replace").strip():
            # An empty body is {} to the control API: a wait of the default 10 s, as long as the client's
            # own timeout (a ReadTimeout in about one run of ten).
            body = b'{"timeout": 0}'
    headers = {**(AUTH if authorized else {}), "Content-Type": "application/json"}
    with httpx.Client(base_url=fuzz_cloud.base_url, trust_env=False, timeout=10) as http:
        http.post("/_fake/reset")  # each example on a fresh fake, so a failure replays the same
        http.delete("/_fake/errors")
        response = http.request(method, path, content=body, headers=headers)
        assert response.status_code < 500 or _real_500(response), (method, path, body[:200], response.text)
        if response.headers.get("content-type", "").startswith("application/json") and method != "HEAD":
            strict_json(response.text)
        for read in ("/sync/mutations/pull", "/sync/pull?project=p", "/_fake/journal", "/_fake/received"):
            served = http.get(read, headers=AUTH)
            assert served.status_code in (200, 403), (read, served.text)
            strict_json(served.text)
        http.delete("/_fake/faults")
        assert http.get("/health").status_code == 200
        errors = http.get("/_fake/errors").json()["errors"]
    assert errors == [], errors[0]["traceback"]


PROVENANCE_ROUTES = sorted(path for path, route in SYNC_ROUTES.items() if route.provenance)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PROVENANCE_ROUTES), data=st.data(), gzipped=st.booleans())
def test_provenance_routes_answer_every_body_with_a_4xx_or_better(
    fuzz_cloud: RunningFakeCloud, path: str, data: st.DataObject, gzipped: bool
) -> None:
    body = data.draw(st.one_of(templated(path), templated(path), bodies), label="body")
    with httpx.Client(base_url=fuzz_cloud.base_url, trust_env=False, timeout=10, headers=AUTH) as http:
        http.post("/_fake/reset")
        http.delete("/_fake/errors")
        # A registered session, so a claim can get past the authority lookup.
        assert (
            http.post("/sync/session-authorities", json={"session_id": "s1", "project": "p"}).status_code
            == 200
        )
        response = http.post(path, content=gzip.compress(body, mtime=0) if gzipped else body)
        assert 200 <= response.status_code < 500, (path, body[:200], response.text)
        if response.headers.get("content-type", "").startswith("application/json"):
            strict_json(response.text)
        errors = http.get("/_fake/errors").json()["errors"]
    assert errors == [], errors[0]["traceback"]


# ----- load -----

STORE_LIMIT = 2_000
PUSHERS = 40
SECONDS = 3.0
BATCH = 10


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _pushers(base_url: str) -> list[int]:
    accepted: list[int] = []
    deadline = time.monotonic() + SECONDS
    limits = httpx.Limits(max_connections=PUSHERS)
    async with httpx.AsyncClient(
        base_url=base_url, headers=AUTH, trust_env=False, limits=limits, timeout=30
    ) as http:

        async def pusher(number: int) -> None:
            sent = 0
            while time.monotonic() < deadline:
                entries = [
                    {
                        "project": "load",
                        "entity": "observation",
                        "entity_key": f"o{number}-{sent + i}",
                        "op": "delete",
                        "payload": {"sync_id": f"o{number}-{sent + i}", "pad": "x" * 200},
                    }
                    for i in range(BATCH)
                ]
                response = await http.post("/sync/mutations/push", json={"entries": entries})
                assert response.status_code == 200, response.text
                seqs = response.json()["accepted_seqs"]
                assert len(seqs) == BATCH
                accepted.extend(seqs)
                sent += BATCH

        await asyncio.gather(*(pusher(number) for number in range(PUSHERS)))
    return accepted


def test_a_short_loopback_load_loses_nothing_duplicates_nothing_and_stays_bounded() -> None:
    args = ["--port", "0", "--token", TOKEN, "--store-limit", str(STORE_LIMIT), "--journal-limit", "2000"]
    with FakeCloudProcess(args) as process:
        assert process.process is not None
        pid = process.process.pid
        before = _rss_kib(pid)
        accepted = asyncio.run(_pushers(process.base_url))
        after = _rss_kib(pid)
        with httpx.Client(base_url=process.base_url, trust_env=False, headers=AUTH) as http:
            stats = http.get("/_fake/stats").json()
            pulled = http.get("/sync/mutations/pull", params={"since_seq": len(accepted) - 5}).json()
    total = len(accepted)
    assert total >= PUSHERS * BATCH
    assert sorted(accepted) == list(range(1, total + 1))  # no loss, no duplicate, consecutive
    for store in ("mutations", "received"):
        assert stats[store]["kept"] + stats[store]["dropped"] == total
        assert stats[store]["kept"] <= STORE_LIMIT
    assert stats["journal"]["kept"] <= 2000
    assert stats["chunks"]["kept"] <= STORE_LIMIT
    assert [m["seq"] for m in pulled["mutations"]] == list(range(total - 4, total + 1))
    assert stats["errors"] == 0
    assert after - before < 150 * 1024, f"RSS grew {before} -> {after} KiB over {total} entries"
