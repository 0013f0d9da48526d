"""Differential: the same contract cases against the REAL `engram cloud serve` (v1.20.0, Postgres) and the
fake, in the same order, with the same configuration; the answers must match as the client sees them.

The good push carries real engram mutations, read from the journal of a world where the real binary
saved memories. Pausing is done the way the real dashboard does it: a cloud_project_controls row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from differential_cases import ALLOWED, MAX_PUSH_BYTES, PAUSED, TOKEN, Case, Outcome, build_cases, run_cases
from real_parts import missing

from engram_sync_kit.fake_cloud.real_server import RealCloudError, real_cloud_server, throwaway_postgres
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment, meaningful_stderr

# One worker runs the whole table: the real server and its database are started once.
pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("differential")]


# Go's encoding/json wording for a body it cannot decode; only the prefix is compared for these cases
# (reported to the fake's authors: Go names JSON kinds and Go types).
DECODER_DETAIL = {
    "push not an object": "invalid request body: json: cannot unmarshal ",
    "push project is an array": "invalid request body: json: cannot unmarshal ",
    "push entries is an object": "invalid request body: json: cannot unmarshal ",
    "push entry is a number": "invalid request body: json: cannot unmarshal ",
    "chunk push project is an array": "invalid push payload: json: cannot unmarshal ",
    "chunk push data is a string": "invalid push payload: decode chunk data: json: cannot unmarshal ",
}
# v1.20.0's server does not gunzip /sync/push; the fake accepts gzip because newer clients send it.
# (the real answer, the fake's status); empty since the fake's v1.20 reads a gzip chunk push as sent too
KNOWN_SUPERSET: dict[str, tuple[Outcome, int]] = {}


# Values Python cannot hold as Go and Postgres do: the real server stores them (a 200), the fake refuses
# them with a 400 naming the value (documented in docs/fake-cloud.md).
KNOWN_REFUSED_BY_THE_FAKE = {
    "push 1e999": "invalid request body: number 1e999 is out of range for float64",
    "push 5000-digit integer": "invalid request body: number 9999999999999999999999999999999999999999... is out "
    "of range (5000 digits)",
}
NOT_COMPARED = {*KNOWN_SUPERSET, *KNOWN_REFUSED_BY_THE_FAKE}


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    try:
        with throwaway_postgres() as url:
            yield url
    except RealCloudError as error:
        reason = f"no PostgreSQL for the real cloud server: {error}"
        missing(reason)


@pytest.fixture(scope="module")
def real_engram_entries(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    world = EngramEnvironment(binary=engram_bin, root=tmp_path_factory.mktemp("diff-world")).prepare()
    for number in range(3):
        saved = world.run(["save", f"differential {number}", f"body {number}", "--project", "alpha"])
        assert saved.returncode == 0, meaningful_stderr(saved.stderr)
    connection = sqlite3.connect(f"file:{world.db_path}?mode=ro", uri=True, timeout=5)
    try:
        rows = connection.execute(
            "SELECT project, entity, entity_key, op, payload FROM sync_mutations ORDER BY seq"
        ).fetchall()
    finally:
        connection.close()
    assert [row[1] for row in rows] == ["session", "observation"] * 3
    return [
        {"project": p, "entity": e, "entity_key": k, "op": o, "payload": json.loads(payload)}
        for p, e, k, o, payload in rows
    ]


@pytest.fixture(scope="module")
def cases(real_engram_entries: list[dict[str, Any]]) -> list[Case]:
    return build_cases(real_engram_entries)


@pytest.fixture(scope="module")
def real_answers(engram_bin: Path, postgres_url: str, cases: list[Case]) -> dict[str, Outcome]:
    with real_cloud_server(
        engram_bin, postgres_url, token=TOKEN, allowed_projects=ALLOWED, max_push_bytes=MAX_PUSH_BYTES
    ) as real:
        real.pause(PAUSED)
        return run_cases(real.base_url, cases)


@pytest.fixture(scope="module")
def fake_answers(cases: list[Case]) -> dict[str, Outcome]:
    config = FakeCloudConfig(
        token=TOKEN, allowed_projects=ALLOWED, max_push_bytes=MAX_PUSH_BYTES, server_version="v1.20"
    )
    with start_fake_cloud(config) as fake:
        fake.client.pause(PAUSED)
        return run_cases(fake.base_url, cases)


def comparable(name: str, answer: Outcome) -> Outcome:
    prefix = DECODER_DETAIL.get(name)
    if prefix is None:
        return answer
    key = "text" if answer.kind == "text" else "error"
    message = str(answer.fields.get(key, ""))
    assert message.startswith(prefix), (name, message)
    return Outcome(answer.status, answer.kind, {**answer.fields, key: prefix})


CASE_NAMES = [case.name for case in build_cases([])]


@pytest.mark.parametrize("name", [name for name in CASE_NAMES if name not in NOT_COMPARED])
def test_fake_answers_like_the_real_server(
    name: str, real_answers: dict[str, Outcome], fake_answers: dict[str, Outcome]
) -> None:
    assert comparable(name, fake_answers[name]) == comparable(name, real_answers[name])


def test_the_table_covers_every_required_outcome(real_answers: dict[str, Outcome]) -> None:
    statuses = {answer.status for answer in real_answers.values()}
    assert {200, 400, 401, 403, 404, 405, 409, 413} <= statuses
    assert real_answers["push real engram batch"].fields["accepted_seqs"] == 6
    assert real_answers["push paused project"].fields["error_code"] == "sync-paused"
    assert real_answers["push forbidden project"].fields["error_code"] == "policy_forbidden"
    assert real_answers["push empty batch"].fields["error_code"] == "empty_batch"
    assert real_answers["push oversize"].status == 413
    # v1.20 validates these payloads only inside its batch insert: 500, nothing stored.
    assert real_answers["push session without directory"] == Outcome(
        500,
        "text",
        {
            "text": "insert mutations: cloudstore: canonicalize materialized mutation batch chunk: "
            "mutations[0]: session payload directory is required for upsert"
        },
    )
    # Measured: v1.20's mutation push stores a memory whose session the project never got (the chunk path
    # refuses it: 'references missing session_id'), and the pull hands it out again.
    assert real_answers["push observation whose session the project never got"].status == 200
    assert real_answers["push observation whose session the project never got"].fields["accepted_seqs"] == 1
    assert real_answers["pull after refused payloads"].fields["pulled"] == [
        ("alpha", "observation", "o-orphan", "upsert"),
        ("alpha", "thing", "k1", "upsert"),
    ]
    assert real_answers["push NaN"] == Outcome(
        400, "text", {"text": "invalid request body: invalid character 'N' looking for beginning of value"}
    )
    postgres_refusal = "invalid input syntax for type json (SQLSTATE 22P02)"
    assert real_answers["push lone surrogate in payload"] == Outcome(
        500, "text", {"text": f"insert mutations: cloudstore: insert mutation: ERROR: {postgres_refusal}"}
    )
    assert (
        real_answers["manifest after push"].fields["chunks"][0][0]
        == (real_answers["chunk push"].fields["chunk_id"])
    )


@pytest.mark.parametrize("name", sorted(KNOWN_REFUSED_BY_THE_FAKE))
def test_known_refusals_of_the_fake_are_still_what_they_were(
    name: str, real_answers: dict[str, Outcome], fake_answers: dict[str, Outcome]
) -> None:
    assert real_answers[name].status == 200
    assert fake_answers[name] == Outcome(400, "text", {"text": KNOWN_REFUSED_BY_THE_FAKE[name]})


def test_known_superset_is_still_what_it_was(
    real_answers: dict[str, Outcome], fake_answers: dict[str, Outcome]
) -> None:
    for name, (real_expected, fake_status) in KNOWN_SUPERSET.items():
        assert real_answers[name] == real_expected
        assert fake_answers[name].status == fake_status


PROJECT_ROUTE_CASES = [
    "push real engram batch",
    "push forbidden project",
    "push paused project",
    "pull since 0",
    "manifest empty",
    "chunk push",
    "chunk pull unknown",
]


def test_insecure_mode_answers_like_the_real_server(
    engram_bin: Path, postgres_url: str, cases: list[Case]
) -> None:
    """v1.20.0's ENGRAM_CLOUD_INSECURE_NO_AUTH=1 wires the principal check but no principal exists, so every
    project-scoped route is 403; only the checks before it (body, empty batch, project, size) differ."""
    unauthenticated = [Case(c.name, c.method, c.path, {}, c.body) for c in cases]
    with real_cloud_server(
        engram_bin, postgres_url, token=None, allowed_projects=ALLOWED, max_push_bytes=MAX_PUSH_BYTES
    ) as real:
        real.pause(PAUSED)
        real_insecure = run_cases(real.base_url, unauthenticated)
    config = FakeCloudConfig(
        insecure_no_auth=True, allowed_projects=ALLOWED, max_push_bytes=MAX_PUSH_BYTES, server_version="v1.20"
    )
    with start_fake_cloud(config) as fake:
        fake.client.pause(PAUSED)
        fake_insecure = run_cases(fake.base_url, unauthenticated)
    refused = Outcome(
        403,
        "json",
        {
            "error": "forbidden: principal is required",
            "error_class": "policy",
            "error_code": "policy_forbidden",
        },
    )
    assert {name: real_insecure[name] for name in PROJECT_ROUTE_CASES} == dict.fromkeys(
        PROJECT_ROUTE_CASES, refused
    )
    assert real_insecure["push empty batch"].fields["error_code"] == "empty_batch"
    assert (
        real_insecure["manifest missing project"].fields["error_code"] == "upgrade_blocked_project_required"
    )
    assert real_insecure["health"].status == 200

    def seen(name: str, answer: Outcome) -> Outcome:
        # Decoder wording is compared by prefix only where the answer is the decoder's 400.
        return comparable(name, answer) if answer.status == 400 else answer

    compared = [name for name in CASE_NAMES if name not in NOT_COMPARED]
    assert {name: seen(name, fake_insecure[name]) for name in compared} == {
        name: seen(name, real_insecure[name]) for name in compared
    }
