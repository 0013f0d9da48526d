"""reconcile against a cloud the user does not control: a malicious HTTP/HTTPS server on loopback
(tests/canary/hostile_cloud.py), started and stopped by each test.

The journal is real: engram v1.20 saved three memories of the enrolled project alpha and pushed them
with `engram sync --cloud` to the fake cloud, so reconcile has acked rows to look for, and the hostile
cloud, which holds none of them, is asked for its pull, its manifest and its chunks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostile_cloud import Answer, HostileCloud, always, gzip_bomb, hostile, http_answer, json_answer
from real_parts import missing
from reconcile_support import TOKEN, Ran, engram, reconcile_here, save_memories

from engram_sync_kit.canary import cloud_client
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram

pytestmark = pytest.mark.engram

PREFIX = "ENGRAM-CANARY-RECONCILE"
INT64_MAX = 2**63 - 1
# How long past --timeout the command may still run: the interpreter's own steps between two reads.
DEADLINE_SLACK_SECONDS = 1.5


@pytest.fixture(scope="module")
def acked_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Found without the engram_bin fixture on purpose: what is under test is the cloud's side, so these
    tests run once, not once per engram schema (tests/engram_schemas/per_version.py)."""
    binary = find_engram(DEFAULT_VERSION)
    if binary is None:
        missing(f"engram {DEFAULT_VERSION} is not installed (run: engram-harness engram install)")
    assert binary is not None
    world = EngramEnvironment(binary=binary, root=tmp_path_factory.mktemp("hostile")).prepare()
    save_memories(world, "alpha", 3)
    engram(world, "cloud", "enroll", "alpha")
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as cloud:
        engram(
            world,
            "sync",
            "--cloud",
            "--project",
            "alpha",
            env={
                "ENGRAM_CLOUD_SERVER": cloud.base_url,
                "ENGRAM_CLOUD_TOKEN": TOKEN,
                "SSL_CERT_FILE": str(cloud.ca_file),
            },
        )
    return world.db_path


def env_for(cloud: HostileCloud) -> dict[str, str]:
    """Over https the cloud gets a token (and its CA); over http none, as reconcile demands."""
    if cloud.tls:
        assert cloud.ca_file is not None
        return {
            "ENGRAM_CLOUD_SERVER": cloud.url,
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "SSL_CERT_FILE": str(cloud.ca_file),
        }
    return {"ENGRAM_CLOUD_SERVER": cloud.url}


def assert_unknown(ran: Ran, pattern: str) -> None:
    assert ran.returncode == 3, ran
    assert ran.stderr == ""
    assert ran.stdout.count("\n") == 1, ran.stdout
    assert re.fullmatch(f"{PREFIX} UNKNOWN - {pattern}\n", ran.stdout), ran.stdout


@dataclass
class Timed:
    ran: Ran
    seconds: float


def timed(db: Path, cloud: HostileCloud, *args: str) -> Timed:
    started = time.monotonic()
    ran = reconcile_here(db, env_for(cloud), *args)
    return Timed(ran, time.monotonic() - started)


def row(seq: int, occurred_at: str = "2020-01-01T00:00:00Z", **fields: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "project": "alpha",
        "entity": "session",
        "entity_key": f"someone-else-{seq}",
        "op": "upsert",
        "payload": {"id": f"someone-else-{seq}"},
        "occurred_at": occurred_at,
        **fields,
    }


EMPTY_PULL = {"mutations": [], "has_more": False, "latest_seq": 0}
ONE_CHUNK = {
    "version": 1,
    "chunks": [{"id": "c1", "created_by": "laptop", "created_at": "2026-01-01T00:00:00Z"}],
}


def cloud_of(pull: Any = EMPTY_PULL, manifest: Any = ONE_CHUNK, chunk: Any = None) -> Answer:
    """A cloud that holds none of alpha's rows: an empty pull, then a manifest and a chunk."""

    def answer(path: str, _query: dict[str, str]) -> bytes:
        if path == "/sync/mutations/pull":
            return json_answer(pull)
        if path == "/sync/pull":
            return json_answer(manifest)
        return json_answer({"version": 1, "mutations": []} if chunk is None else chunk)

    return answer


# ----- item 6: --timeout bounds the whole command -----

TRANSPORTS = [False, True]
SLOW_PARTS = {
    "status line": 0,  # from the first byte on
    "headers": len("HTTP/1.1 200 OK\r\n"),  # the status line at once, then a byte a second
}


@pytest.mark.parametrize("tls", TRANSPORTS, ids=["http", "https"])
@pytest.mark.parametrize("part", sorted(SLOW_PARTS))
def test_a_status_line_or_headers_at_one_byte_a_second_end_at_the_timeout(
    acked_db: Path, tmp_path: Path, tls: bool, part: str
) -> None:
    with hostile(
        always(json_answer(EMPTY_PULL)), tls=tls, directory=tmp_path, drip_from=SLOW_PARTS[part]
    ) as cloud:
        run = timed(acked_db, cloud, "--timeout", "2")

    assert_unknown(
        run.ran,
        rf"GET /sync/mutations/pull on {re.escape(cloud.url)}: not done within --timeout 2 s \(1 requests\)",
    )
    assert run.seconds < 2 + DEADLINE_SLACK_SECONDS


@pytest.mark.parametrize("tls", TRANSPORTS, ids=["http", "https"])
def test_a_cloud_that_accepts_and_says_nothing_ends_at_the_timeout(
    acked_db: Path, tmp_path: Path, tls: bool
) -> None:
    """Over https the handshake itself never ends; over http the answer never starts."""
    with hostile(always(b"x"), drip_from=0, drip_seconds=30) as silent:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{silent.port}"
        env = {"ENGRAM_CLOUD_SERVER": url}
        started = time.monotonic()
        ran = reconcile_here(acked_db, env, "--timeout", "1.5")
        seconds = time.monotonic() - started

    # 0 requests when a loaded machine spends the 1.5 s before the first one is counted (seen in CI)
    assert_unknown(
        ran,
        rf"GET /sync/mutations/pull on {re.escape(url)}: not done within --timeout 1.5 s \([01] requests\)",
    )
    assert seconds < 1.5 + DEADLINE_SLACK_SECONDS


@pytest.mark.parametrize("tls", TRANSPORTS, ids=["http", "https"])
def test_every_page_counts_against_one_timeout(acked_db: Path, tmp_path: Path, tls: bool) -> None:
    """Each page comes quickly, but the pages never end: the deadline is the command's, not a page's."""

    answered = []

    def endless(_path: str, query: dict[str, str]) -> bytes:
        answered.append(query)
        if len(answered) > 200:  # the test's own bound: a client without a deadline would go on
            return http_answer("503 Service Unavailable", b"enough")
        time.sleep(0.05)
        since = int(query["since_seq"])
        return json_answer({"mutations": [row(since + 1)], "has_more": True})

    with hostile(endless, tls=tls, directory=tmp_path) as cloud:
        run = timed(acked_db, cloud, "--timeout", "2")

    assert_unknown(
        run.ran,
        rf"GET /sync/mutations/pull on {re.escape(cloud.url)}: not done within --timeout 2 s \(\d+ requests\)",
    )
    assert run.seconds < 2 + DEADLINE_SLACK_SECONDS


# ----- item 7: caps on pages, probes and integers -----


def endless_pages(_path: str, query: dict[str, str]) -> bytes:
    since = int(query["since_seq"])
    return json_answer({"mutations": [row(since + n) for n in range(1, 101)], "has_more": True})


def test_pages_are_capped(acked_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap is 50,000 pages (5,000,000 rows); the test lowers it to keep the run short."""
    assert cloud_client.MAX_PULL_PAGES == 50_000
    monkeypatch.setattr(cloud_client, "MAX_PULL_PAGES", 30)

    with hostile(endless_pages) as cloud:
        run = timed(acked_db, cloud)

    assert_unknown(
        run.ran,
        r"GET /sync/mutations/pull\?since_seq=3000: has_more after 30 pages \(3000 rows\); "
        r"reconcile stops there \(a cloud this size needs --since\)",
    )
    assert len(cloud.requests) == 30


def test_a_since_search_that_never_settles_stops_at_the_protocol_range(
    acked_db: Path, tmp_path: Path
) -> None:
    seen: list[int] = []

    def answer(_path: str, query: dict[str, str]) -> bytes:
        seen.append(int(query["since_seq"]))
        if len(seen) > 1000:  # the test's own bound: the old client went on for 14,000 requests
            return http_answer("503 Service Unavailable", b"enough")
        return json_answer({"mutations": [row(int(query["since_seq"]) + 1)], "has_more": True})

    with hostile(answer) as cloud:
        run = timed(acked_db, cloud, "--since", "24h")

    assert_unknown(
        run.ran,
        rf"GET /sync/mutations/pull\?since_seq={INT64_MAX}: mutations\[0\]\.seq {INT64_MAX + 1} "
        rf"is outside the protocol's range 1\.\.{INT64_MAX}",
    )
    assert max(seen) == INT64_MAX
    assert len(seen) <= 2 * 64  # doubling up to 2^63, no further


def test_the_since_search_is_capped(acked_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cloud_client.MAX_SEARCH_PROBES == 200
    monkeypatch.setattr(cloud_client, "MAX_SEARCH_PROBES", 10)

    def answer(_path: str, query: dict[str, str]) -> bytes:
        return json_answer({"mutations": [row(int(query["since_seq"]) + 1)], "has_more": True})

    with hostile(answer) as cloud:
        run = timed(acked_db, cloud, "--since", "24h")

    assert_unknown(
        run.ran, r"GET /sync/mutations/pull: the --since search did not settle within 10 one-row pulls"
    )
    assert len(cloud.requests) == 10


def test_chunk_reads_are_capped(acked_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cloud_client.MAX_CHUNK_READS == 10_000
    monkeypatch.setattr(cloud_client, "MAX_CHUNK_READS", 5)
    many = {"version": 1, "chunks": [{"id": f"c{n}", "created_by": "laptop"} for n in range(50)]}

    with hostile(cloud_of(manifest=many)) as cloud:
        run = timed(acked_db, cloud)

    assert_unknown(
        run.ran, r"GET /sync/pull/c5\?project=alpha: more than 5 chunks to read; reconcile stops there"
    )
    assert len(cloud.requests) == 1 + 1 + 5


OUT_OF_RANGE = {
    "a seq past int64": (
        {"mutations": [row(INT64_MAX + 1)], "has_more": False},
        rf"GET /sync/mutations/pull\?since_seq=0: mutations\[0\]\.seq {INT64_MAX + 1} is outside the protocol's range 1\.\.{INT64_MAX}",
    ),
    "a negative seq": (
        {"mutations": [row(-5)], "has_more": False},
        r"GET /sync/mutations/pull\?since_seq=0: seq -5 does not increase past 0",
    ),
    "a seq of 5,000 digits": (
        b'{"mutations": [{"seq": ' + b"9" * 5000 + b'}], "has_more": false}',
        r"GET /sync/mutations/pull: truncated or malformed JSON \(Exceeds the limit \(4300 digits\).+; 5045 bytes\)",
    ),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_integers_outside_the_protocol_range(acked_db: Path, case: str) -> None:
    document, pattern = OUT_OF_RANGE[case]
    answer = http_answer("200 OK", document) if isinstance(document, bytes) else json_answer(document)

    with hostile(always(answer)) as cloud:
        assert_unknown(timed(acked_db, cloud).ran, pattern)


# ----- item 8: every answer's shape is checked -----

CHUNK = r"GET /sync/pull/c1\?project=alpha"
MANIFEST = r"GET /sync/pull\?project=alpha"
PULL = r"GET /sync/mutations/pull"
WRONG_SHAPES: dict[str, tuple[dict[str, Any], str]] = {
    "chunk mutations is a number": ({"chunk": {"mutations": 5}}, rf"{CHUNK}: 'mutations' is not a list"),
    "chunk sessions is a number": ({"chunk": {"sessions": 5}}, rf"{CHUNK}: 'sessions' is not a list"),
    "chunk observations is text": (
        {"chunk": {"observations": "x"}},
        rf"{CHUNK}: 'observations' is not a list",
    ),
    "chunk prompts is an object": ({"chunk": {"prompts": {"a": 1}}}, rf"{CHUNK}: 'prompts' is not a list"),
    "chunk mutation is a number": (
        {"chunk": {"mutations": [5]}},
        rf"{CHUNK}: mutations\[0\] is not an object",
    ),
    "chunk session is text": ({"chunk": {"sessions": ["s"]}}, rf"{CHUNK}: sessions\[0\] is not an object"),
    "chunk mutation entity is a number": (
        {"chunk": {"mutations": [{"entity": 5, "entity_key": "k", "op": "upsert"}]}},
        rf"{CHUNK}: mutations\[0\]\.entity is not a string",
    ),
    "chunk session id is a list": (
        {"chunk": {"sessions": [{"id": []}]}},
        rf"{CHUNK}: sessions\[0\]\.id is not a string",
    ),
    "chunk is a list": ({"chunk": [1]}, rf"{CHUNK}: the chunk is not a JSON object"),
    "manifest chunks is a number": ({"manifest": {"chunks": 5}}, rf"{MANIFEST}: answer has no 'chunks' list"),
    "manifest entry is a number": ({"manifest": {"chunks": [5]}}, rf"{MANIFEST}: chunks\[0\] has no id"),
    "manifest id is a number": ({"manifest": {"chunks": [{"id": 5}]}}, rf"{MANIFEST}: chunks\[0\] has no id"),
    "manifest created_by is a number": (
        {"manifest": {"chunks": [{"id": "c1", "created_by": 5}]}},
        rf"{MANIFEST}: chunks\[0\]\.created_by is not a string",
    ),
    "manifest created_at is a list": (
        {"manifest": {"chunks": [{"id": "c1", "created_at": []}]}},
        rf"{MANIFEST}: chunks\[0\]\.created_at is not a string",
    ),
    "manifest id with a slash": (
        {"manifest": {"chunks": [{"id": "../mutations/pull"}]}},
        rf"{MANIFEST}: chunks\[0\]\.id '\.\./mutations/pull' is not a chunk id",
    ),
    "pull mutations is a number": ({"pull": {"mutations": 5}}, rf"{PULL}: answer has no 'mutations' list"),
    "pull has_more is text": (
        {"pull": {"mutations": [], "has_more": "yes"}},
        rf"{PULL}: 'has_more' is not a boolean",
    ),
    "pull seq is text": (
        {"pull": {"mutations": [{**row(1), "seq": "1"}]}},
        rf"{PULL}: mutations\[0\]\.seq is not an integer",
    ),
    "pull project is a number": (
        {"pull": {"mutations": [row(1, project=5)]}},
        rf"{PULL}: mutations\[0\]\.project is not a string",
    ),
    "pull occurred_at is an object": (
        {"pull": {"mutations": [{**row(1), "occurred_at": {"at": 1}}]}},
        rf"{PULL}: mutations\[0\]\.occurred_at is not a string",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG_SHAPES))
def test_a_wrong_shaped_answer_is_one_unknown_line(acked_db: Path, case: str) -> None:
    parts, pattern = WRONG_SHAPES[case]

    with hostile(cloud_of(**parts)) as cloud:
        assert_unknown(timed(acked_db, cloud).ran, pattern)


# ----- what held, and must still hold -----


def test_the_token_never_follows_a_redirect(acked_db: Path, tmp_path: Path) -> None:
    with hostile(always(json_answer(EMPTY_PULL))) as elsewhere:
        moved = http_answer("302 Found", b"", (f"Location: {elsewhere.url}/sync/mutations/pull",))
        with hostile(always(moved), tls=True, directory=tmp_path) as cloud:
            run = timed(acked_db, cloud)

        assert elsewhere.requests == []
    assert_unknown(run.ran, rf"{PULL}: HTTP 302")
    assert all(f"Bearer {TOKEN}".encode() in request.head for request in cloud.requests)


def test_a_gzip_bomb_is_cut_off(acked_db: Path) -> None:
    with hostile(always(gzip_bomb(96 * 1024 * 1024))) as cloud:
        assert_unknown(timed(acked_db, cloud).ran, rf"{PULL}: answer larger than 64 MiB")


def test_a_well_behaved_hostile_cloud_still_gives_a_verdict(acked_db: Path) -> None:
    """The same server, answering like an empty v1.20 cloud: every acked row is lost, exit 2."""
    with hostile(cloud_of()) as cloud:
        ran = timed(acked_db, cloud).ran

    assert ran.returncode == 2, ran
    assert ran.stdout.startswith(f"{PREFIX} CRITICAL - ")


# ----- issue 35, item 17: one big page cannot outlast --timeout -----

ROW_TEXT = (
    b'{"seq":%d,"project":"alpha","entity":"session","entity_key":"k","op":"upsert",'
    b'"payload":{"id":"k"},"occurred_at":"2020-01-01T00:00:00Z"}'
)


def big_page(kind: str) -> bytes:
    """About 60 MiB of one pull page that takes the JSON parser many seconds."""
    if kind == "400,000 rows":
        rows = b",".join(ROW_TEXT % seq for seq in range(1, 400_001))
    else:  # one row whose payload is a list of millions of small objects
        wide = b"[" + b'{"a":[1]},' * 6_000_000 + b"{}]"
        rows = ROW_TEXT.replace(b'{"id":"k"}', wide) % 1
    return http_answer("200 OK", b'{"mutations":[' + rows + b'],"has_more":false}')


@pytest.mark.parametrize("kind", ["400,000 rows", "one wide payload"])
def test_one_big_pull_page_ends_at_the_timeout(acked_db: Path, kind: str) -> None:
    with hostile(always(big_page(kind))) as cloud:
        run = timed(acked_db, cloud, "--timeout", "3")
    assert run.seconds < 3 + DEADLINE_SLACK_SECONDS, run
    assert_unknown(
        run.ran, rf"{PULL} on {re.escape(cloud.url)}: not done within --timeout 3 s \(1 requests\)"
    )


def test_a_page_of_more_rows_than_asked_is_refused(acked_db: Path) -> None:
    page = {"mutations": [row(seq) for seq in range(1, 102)], "has_more": False}
    with hostile(always(json_answer(page))) as cloud:
        assert_unknown(
            timed(acked_db, cloud).ran,
            rf"{PULL}\?since_seq=0: 101 mutations, more than the 100 asked",
        )
