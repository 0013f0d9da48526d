"""engram v3's prompt-provenance routes in the fake, and the --server-version switch.

Every expectation here is predicted from engram's v3 source (docs/fake-cloud.md, "Server versions"),
never observed: no v3 binary builds on this machine. Each refusal test walks the handler's validation
order: a body that fails two checks gets the earlier check's answer.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram_sync_kit.fake_cloud.process import FakeCloudProcess, command
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud

TOKEN = "v3-routes-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LIMIT = 8192  # above 4300 digits: Python's int() limit must be reachable inside it
TEXT = "text/plain; charset=utf-8"
AUTHORITIES = "/sync/session-authorities"
CLAIMS = "/sync/prompt-pair-claims"
ATTESTATIONS = "/sync/prompt-source-attestations"
VERIFY = "/sync/prompt-source-attestations/verify"
PROVENANCE_ROUTES = (AUTHORITIES, CLAIMS, ATTESTATIONS, VERIFY)
UNAVAILABLE = {"error": "session authority unavailable", "error_code": "session_authority_unavailable"}


@pytest.fixture(scope="module")
def v3_cloud() -> Iterator[RunningFakeCloud]:
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha", "beta"), max_push_bytes=LIMIT)
    with start_fake_cloud(config) as cloud:
        yield cloud


@pytest.fixture
def http(v3_cloud: RunningFakeCloud) -> Iterator[httpx.Client]:
    v3_cloud.client.reset()
    with httpx.Client(base_url=v3_cloud.base_url, headers=AUTH, trust_env=False, timeout=10) as client:
        yield client
    v3_cloud.client.check()


def post(http: httpx.Client, path: str, body: Any, **kwargs: Any) -> httpx.Response:
    if isinstance(body, bytes | str):
        return http.post(path, content=body, **kwargs)
    return http.post(path, json=body, **kwargs)


def text(response: httpx.Response) -> tuple[int, str]:
    """A Go http.Error answer: status and the one line it wrote."""
    assert response.headers["content-type"] == TEXT, response.text
    return response.status_code, response.text.removesuffix("\n")


def claim(**overrides: str) -> dict[str, str]:
    body = {
        "session_id": "s1",
        "source_inbox_id": "inbox-1",
        "sync_id": "prompt-1",
        "owner_project": "alpha",
        "project": "beta",
    }
    body.update(overrides)
    return body


# ----- POST /sync/session-authorities -----


def test_session_authority_registers_replays_and_refuses_another_owner(http: httpx.Client) -> None:
    first = post(http, AUTHORITIES, {"session_id": " s1 ", "project": " Alpha "})
    assert (first.status_code, first.json()) == (200, {"status": "ok"})
    # The project is normalized before it is stored: a replay spelled differently is the same owner.
    assert post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"}).json() == {"status": "ok"}
    assert text(post(http, AUTHORITIES, {"session_id": "s1", "project": "beta"})) == (
        409,
        "session authority conflict",
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # 1. the decoder: not JSON, unknown fields, wrong types, a second value, an empty body
        (b"{not json", (400, "invalid session authority request")),
        ({"session_id": "s1", "project": "alpha", "actor": "me"}, (400, "invalid session authority request")),
        ({"session_id": 7, "project": "alpha"}, (400, "invalid session authority request")),
        ([{"session_id": "s1", "project": "alpha"}], (400, "invalid session authority request")),
        (b'{"session_id":"s1","project":"alpha"} {}', (400, "invalid session authority request")),
        (b"", (400, "invalid session authority request")),
        (b'{"session_id":"s1","project":NaN}', (400, "invalid session authority request")),
        # found by the fuzzer: a number too long for Python's int() was an internal error
        (
            b'{"session_id":' + b"9" * 5000 + b',"project":"alpha"}',
            (400, "invalid session authority request"),
        ),
        # 2. both fields, after trimming
        ({"session_id": "  ", "project": "alpha"}, (400, "session_id and project are required")),
        ({"session_id": "s1"}, (400, "session_id and project are required")),
        (b"null", (400, "session_id and project are required")),
        # 3. the scope check (before the store: an unknown project never conflicts)
        ({"session_id": "s1", "project": "gamma"}, (403, None)),
    ],
)
def test_session_authority_refusals_in_order(
    http: httpx.Client, body: Any, expected: tuple[int, str | None]
) -> None:
    response = post(http, AUTHORITIES, body)
    if expected[1] is None:
        assert response.status_code == 403
        assert response.json() == {
            "error": 'forbidden: project "gamma" is not allowed',
            "error_class": "policy",
            "error_code": "policy_forbidden",
        }
    else:
        assert text(response) == expected


def test_session_authority_matches_field_names_like_go(http: httpx.Client) -> None:
    # encoding/json matches keys case-insensitively, and null leaves the field empty.
    ok = post(http, AUTHORITIES, {"Session_ID": "s9", "PROJECT": "beta"})
    assert ok.json() == {"status": "ok"}
    assert text(post(http, AUTHORITIES, {"session_id": None, "project": "beta"}))[0] == 400


def test_session_authority_needs_the_token_before_anything(http: httpx.Client) -> None:
    no_token = http.post(AUTHORITIES, content=b"{not json", headers={"Authorization": ""})
    assert text(no_token) == (401, "unauthorized: missing authorization header")
    wrong = http.post(AUTHORITIES, json={}, headers={"Authorization": "Bearer nope"})
    assert text(wrong) == (401, "unauthorized: unknown token")


def test_session_authority_too_large_is_its_own_413(http: httpx.Client) -> None:
    huge = {"session_id": "s1", "project": "alpha" + " " * LIMIT}
    assert text(post(http, AUTHORITIES, huge)) == (413, "session authority request too large")


def test_insecure_server_answers_401_after_validating_and_stores_nothing() -> None:
    with (
        start_fake_cloud(FakeCloudConfig(insecure_no_auth=True)) as cloud,
        httpx.Client(base_url=cloud.base_url, trust_env=False) as http,
    ):
        assert text(post(http, AUTHORITIES, b"[]")) == (400, "invalid session authority request")
        refused = post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"})
        assert text(refused) == (401, "authentication unavailable")
        # The prompt-pair claim checks the authenticator before it reads the body.
        assert text(post(http, CLAIMS, b"[]")) == (401, "authentication unavailable")


# ----- POST /sync/prompt-pair-claims -----


def test_prompt_pair_claim_happy_path_replay_and_conflicts(http: httpx.Client) -> None:
    assert post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"}).status_code == 200
    first = post(http, CLAIMS, claim())
    assert (first.status_code, first.json()) == (200, {"status": "ok"})
    assert post(http, CLAIMS, claim(owner_project=" ALPHA ")).json() == {"status": "ok"}  # a replay
    # The pair is bound: another sync id for it, or this sync id for another pair, is a conflict.
    assert text(post(http, CLAIMS, claim(sync_id="prompt-2"))) == (409, "prompt pair claim conflict")
    assert text(post(http, CLAIMS, claim(source_inbox_id="inbox-2"))) == (409, "prompt pair claim conflict")


@pytest.mark.parametrize(
    ("setup", "body", "expected"),
    [
        # 1. the decoder
        (False, b"{", (400, "invalid prompt pair claim request")),
        (False, {**claim(), "actor": "x"}, (400, "invalid prompt pair claim request")),
        (False, {**claim(), "sync_id": ["p"]}, (400, "invalid prompt pair claim request")),
        (False, b'{"session_id":"s1"}\n"trailing"', (400, "invalid prompt pair claim request")),
        # 2. all five fields (checked before the projects are looked at)
        (
            False,
            claim(sync_id=" ", owner_project="gamma"),
            (400, "session_id, source_inbox_id, sync_id, owner_project and project are required"),
        ),
        # 3. both grants, owner first, before the session is looked up
        (False, claim(owner_project="gamma", project="delta"), (403, "gamma")),
        (False, claim(project="delta"), (403, "delta")),
        # 4. the session's authority: none, or another owner
        (False, claim(), (404, None)),
        (True, claim(owner_project="beta", project="alpha"), (404, None)),
    ],
)
def test_prompt_pair_claim_refusals_in_order(
    http: httpx.Client, setup: bool, body: Any, expected: tuple[int, str | None]
) -> None:
    if setup:
        assert post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"}).status_code == 200
    response = post(http, CLAIMS, body)
    status, detail = expected
    if status == 403:
        assert response.status_code == 403
        assert response.json()["error"] == f'forbidden: project "{detail}" is not allowed'
    elif status == 404:
        assert (response.status_code, response.json()) == (404, UNAVAILABLE)
        assert response.headers["content-type"] == "application/json"
    else:
        assert text(response) == expected


def test_prompt_pair_claim_checks_the_token_then_the_size(http: httpx.Client) -> None:
    assert text(http.post(CLAIMS, json=claim(), headers={"Authorization": "Basic x"})) == (
        401,
        "unauthorized: authorization must use Bearer token",
    )
    huge = claim(project="beta" + " " * LIMIT)
    assert text(post(http, CLAIMS, huge)) == (413, "prompt pair claim request too large")


# ----- POST /sync/prompt-source-attestations and /verify -----


@pytest.mark.parametrize(
    ("path", "expected"),
    [(ATTESTATIONS, "human authentication required"), (VERIFY, "authentication required")],
)
def test_attestations_need_a_principal_a_legacy_token_does_not_have(
    http: httpx.Client, path: str, expected: str
) -> None:
    body = {
        "session_id": "s1",
        "source_inbox_id": "i",
        "sync_id": "p",
        "owner_project": "alpha",
        "prompt_project": "beta",
    }
    assert text(post(http, path, body)) == (401, expected)
    assert text(post(http, path, b"x" * (LIMIT * 2))) == (401, expected)  # before the body is read
    assert text(http.post(path, json=body, headers={"Authorization": ""}))[0] == 401


def test_provenance_routes_take_post_only_and_are_journaled(
    http: httpx.Client, v3_cloud: RunningFakeCloud
) -> None:
    for path in PROVENANCE_ROUTES:
        refused = http.get(path)
        assert (refused.status_code, refused.headers["allow"]) == (405, "POST")
    post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"})
    [entry] = v3_cloud.client.wait(timeout=5, path=AUTHORITIES, status=200)
    assert (entry.project, entry.method, entry.transport) == ("alpha", "POST", "other")


# ----- the version switch -----


def test_v120_does_not_route_the_provenance_paths() -> None:
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha",), server_version="v1.20")
    with (
        start_fake_cloud(config) as cloud,
        httpx.Client(base_url=cloud.base_url, headers=AUTH, trust_env=False) as http,
    ):
        for path in PROVENANCE_ROUTES:
            assert text(post(http, path, {"session_id": "s1", "project": "alpha"})) == (
                404,
                "404 page not found",
            )
        # v1.20 (observed) keeps the unnamed policy 403.
        forbidden = http.get("/sync/pull", params={"project": "gamma"})
        assert forbidden.json()["error"] == "forbidden: project is not allowed"


def test_v2_routes_the_provenance_paths_as_v3_and_keeps_the_unnamed_policy_403() -> None:
    """The v2 worker after @0cd24e8a calls register and claim before a keyed prompt (manager.go, module
    /v2, index file id 71019478362), so a v2 server that predates them would strand such prompts; the
    fake's v2 serves them as v3's handlers do. v2's own handlers are not stored: an assumption."""
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha", "beta"), server_version="v2")
    with (
        start_fake_cloud(config) as cloud,
        httpx.Client(base_url=cloud.base_url, headers=AUTH, trust_env=False) as http,
    ):
        assert post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"}).json() == {"status": "ok"}
        assert post(http, CLAIMS, claim()).json() == {"status": "ok"}
        unavailable = post(http, CLAIMS, claim(session_id="s2"))
        assert (unavailable.status_code, unavailable.json()) == (404, UNAVAILABLE)
        assert post(http, AUTHORITIES, {"session_id": "s3", "project": "gamma"}).status_code == 403
        forbidden = http.get("/sync/pull", params={"project": "gamma"})
        assert forbidden.json()["error"] == "forbidden: project is not allowed"


def test_v3_names_the_project_in_the_policy_403_on_existing_routes(http: httpx.Client) -> None:
    forbidden = http.get("/sync/pull", params={"project": " Gamma "})
    assert forbidden.status_code == 403
    assert forbidden.json()["error"] == 'forbidden: project "gamma" is not allowed'


def test_cli_selects_the_server_version_and_defaults_to_v3() -> None:
    for version, expected in ((None, 200), ("v3", 200), ("v1.20", 404), ("v2", 200)):
        with (
            FakeCloudProcess(["--port", "0", "--token", TOKEN], server_version=version) as process,
            httpx.Client(base_url=process.base_url, headers=AUTH, trust_env=False) as http,
        ):
            answer = post(http, AUTHORITIES, {"session_id": "s1", "project": "p"})
            assert answer.status_code == expected, (version, answer.text)


def test_cli_refuses_an_unknown_server_version() -> None:
    done = subprocess.run(
        [*command(), "serve", "--token", "t", "--server-version", "v4"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 3
    assert "Invalid value for '--server-version': 'v4' is not one of 'v1.20', 'v2', 'v3'" in done.stderr


def test_python_api_refuses_an_unknown_server_version() -> None:
    from engram_sync_kit.fake_cloud.errors import FakeCloudError

    with pytest.raises(FakeCloudError, match="server_version must be one of v1.20, v2, v3, got 'v4'"):
        FakeCloudConfig(token="t", server_version="v4").validate()  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["inprocess", "process"])
def test_the_harness_cloud_answers_as_v120_for_the_v120_client(mode: str, tmp_path: Path) -> None:
    from engram_sync_kit.harness.cloud.launch import CloudHandle

    handle = CloudHandle(mode, TOKEN, ["alpha"], tmp_path / "cloud.log")  # type: ignore[arg-type]
    try:
        with httpx.Client(base_url=handle.base_url, headers=AUTH, trust_env=False) as http:
            assert post(http, AUTHORITIES, {"session_id": "s1", "project": "alpha"}).status_code == 404
            forbidden = http.get("/sync/pull", params={"project": "gamma"})
            assert forbidden.json()["error"] == "forbidden: project is not allowed"
    finally:
        handle.close()


def test_an_answer_that_leaves_the_body_unread_closes_the_connection(http: httpx.Client) -> None:
    # Without "connection: close" a pooling client reuses the connection and meets the close.
    refused = post(http, ATTESTATIONS, b"x" * (LIMIT * 2))
    assert (refused.status_code, refused.headers.get("connection")) == (401, "close")
