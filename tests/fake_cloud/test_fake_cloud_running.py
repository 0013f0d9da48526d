"""Starting, configuring and stopping the fake: Python API, CLI flags and environment, TLS, limits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engram_sync_kit.fake_cloud.client import FakeCloudClient
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.fake_cloud.process import FakeCloudProcess, command
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_CLOUD_")}
    env.update(extra)
    return env


def test_inprocess_tls_hands_out_a_ca_that_verifies_the_server() -> None:
    with start_fake_cloud(FakeCloudConfig(token="t", tls=True)) as cloud:
        assert cloud.base_url.startswith("https://127.0.0.1:")
        assert cloud.ca_file is not None and cloud.ca_file.read_text().startswith(
            "-----BEGIN CERTIFICATE-----"
        )
        assert cloud.client.ready()
        response = httpx.get(f"{cloud.base_url}/health", verify=str(cloud.ca_file))
        assert response.status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{cloud.base_url}/health", verify=True)
        ca_file = cloud.ca_file
    assert not ca_file.exists()


def test_subprocess_tls_writes_the_ca_where_asked(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    with FakeCloudProcess(["--port", "0", "--token", "t", "--tls", "--ca-out", str(ca)]) as process:
        assert process.base_url.startswith("https://")
        with FakeCloudClient(process.base_url, ca) as client:
            assert client.ready()


def test_subprocess_reads_the_real_servers_environment_variables() -> None:
    env = clean_env(ENGRAM_CLOUD_TOKEN="envtok", ENGRAM_CLOUD_ALLOWED_PROJECTS="a, b")
    with (
        FakeCloudProcess(["--port", "0"], env=env) as process,
        httpx.Client(base_url=process.base_url) as http,
    ):
        auth = {"Authorization": "Bearer envtok"}
        assert http.get("/sync/pull", params={"project": "a"}, headers=auth).status_code == 200
        assert http.get("/sync/pull", params={"project": "c"}, headers=auth).status_code == 403


def test_insecure_no_auth_refuses_project_routes_like_the_real_server() -> None:
    with (
        FakeCloudProcess(["--port", "0"], env=clean_env(ENGRAM_CLOUD_INSECURE_NO_AUTH="true")) as process,
        httpx.Client(base_url=process.base_url) as http,
    ):
        refused = http.get("/sync/pull", params={"project": "a"})
        assert (refused.status_code, refused.json()) == (
            403,
            {
                "error": "forbidden: principal is required",
                "error_class": "policy",
                "error_code": "policy_forbidden",
            },
        )
        assert http.get("/sync/mutations/pull").status_code == 403
        assert http.get("/sync/pull").status_code == 400  # the project check comes first
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--insecure-no-auth", "--insecure-permissive"], {}),
        ([], {"ENGRAM_CLOUD_INSECURE_NO_AUTH": "1", "ENGRAM_FAKE_CLOUD_INSECURE_PERMISSIVE": "1"}),
    ],
)
def test_insecure_permissive_accepts_requests_without_a_token(args: list[str], env: dict[str, str]) -> None:
    with (
        FakeCloudProcess(["--port", "0", *args], env=clean_env(**env)) as process,
        httpx.Client(base_url=process.base_url) as http,
    ):
        assert http.get("/sync/pull", params={"project": "a"}).status_code == 200


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {}, "engram-fake-cloud: cloud auth token is required"),
        (["--token", "t", "--insecure-no-auth"], {}, "engram-fake-cloud: conflicting auth configuration"),
        (
            [],
            {"ENGRAM_CLOUD_TOKEN": "t", "ENGRAM_CLOUD_INSECURE_NO_AUTH": "1"},
            "conflicting auth configuration",
        ),
        (["--token", "t", "--tls"], {}, "--tls needs --ca-out FILE"),
        (["--token", "t", "--allowed-projects", " , "], {}, "--allowed-projects is empty"),
        (["--token", "t", "--insecure-permissive"], {}, "insecure_permissive only applies together with"),
    ],
)
def test_bad_configuration_exits_3_with_one_line(args: list[str], env: dict[str, str], message: str) -> None:
    # Before: click's usage errors printed its usage block (3 lines) and exited 2, the others one line.
    result = subprocess.run(
        [*command(), "serve", "--port", "0", *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("engram-fake-cloud: ") and message in line
    assert line.endswith(" (see engram-fake-cloud serve --help)")
    assert "Traceback" not in result.stderr


def test_port_in_use_is_a_one_line_error() -> None:
    with start_fake_cloud(FakeCloudConfig(token="t")) as cloud:
        port = cloud.base_url.rsplit(":", 1)[1]
        result = subprocess.run(
            [*command(), "serve", "--port", port, "--token", "t"],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert result.stderr.startswith(f"engram-fake-cloud: cannot listen on 127.0.0.1:{port}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_sigterm_stops_the_subprocess_cleanly() -> None:
    process = FakeCloudProcess(["--port", "0", "--token", "t"], env=clean_env()).start()
    assert process.process is not None
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(10) == 0
    process.stop()
    assert process.stderr_text() == ""


def test_python_api_validates_its_configuration() -> None:
    with pytest.raises(FakeCloudError, match="cloud auth token is required"):
        start_fake_cloud(FakeCloudConfig())
    with pytest.raises(FakeCloudError, match="journal_limit must be at least 1"):
        start_fake_cloud(FakeCloudConfig(token="t", journal_limit=0))
    with pytest.raises(FakeCloudError, match="not one string"):
        start_fake_cloud(FakeCloudConfig(token="t", allowed_projects="p"))


def test_full_journal_drops_oldest_and_counts_the_overflow() -> None:
    with (
        start_fake_cloud(FakeCloudConfig(token="t", journal_limit=3)) as cloud,
        httpx.Client(base_url=cloud.base_url) as http,
    ):
        for _ in range(5):
            http.get("/health")
        journal = cloud.client.journal()
        assert [e.id for e in journal.entries] == [3, 4, 5]
        assert journal.overflow == 2


def test_max_push_bytes_sets_the_413_limit() -> None:
    with (
        start_fake_cloud(FakeCloudConfig(token="t", max_push_bytes=100)) as cloud,
        httpx.Client(base_url=cloud.base_url) as http,
    ):
        response = http.post(
            "/sync/push", content=b"{" + b" " * 200 + b"}", headers={"Authorization": "Bearer t"}
        )
        assert response.status_code == 413
        assert response.json()["error"] == "push payload too large (max 100 bytes)"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
entry_like = st.fixed_dictionaries(
    {},
    optional={
        "project": st.sampled_from(["p", "", "  ", "Q--x"]) | json_values,
        "entity": st.sampled_from(["session", "observation", "prompt", "relation", "other"]) | json_values,
        "entity_key": st.text(max_size=5) | json_values,
        "op": st.sampled_from(["upsert", "delete"]) | json_values,
        "payload": json_values,
    },
)
push_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"entries": st.lists(entry_like, max_size=4) | json_values}),
    st.fixed_dictionaries(
        {"project": st.sampled_from(["p", ""]) | json_values, "data": json_values},
        optional={"client_created_at": st.text(max_size=25) | json_values, "chunk_id": json_values},
    ),
)


@pytest.fixture(scope="module")
def fuzz_cloud() -> object:
    with start_fake_cloud(FakeCloudConfig(token="t")) as cloud:
        yield cloud


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=push_bodies, path=st.sampled_from(["/sync/mutations/push", "/sync/push"]))
@example(body={"project": "p", "data": {"\u0000": None}}, path="/sync/push")  # a CI run drew it
def test_no_request_body_makes_the_fake_answer_500(fuzz_cloud: object, body: object, path: str) -> None:
    base_url = fuzz_cloud.base_url  # type: ignore[attr-defined]
    response = httpx.post(
        f"{base_url}{path}", content=json.dumps(body), headers={"Authorization": "Bearer t"}
    )
    # 500 only where the real server answers it: a payload its batch insert cannot materialize (v3, the
    # default, names the refused entry instead of the store's text), or a chunk Postgres cannot store.
    real_500 = response.status_code == 500 and (
        response.text.startswith(("insert mutations: cloudstore: ", "insert mutations: batch_index="))
        or response.text.startswith('{"error":"write chunk: cloudstore: ')  # the chunk routes answer JSON
    )
    assert response.status_code in {200, 400, 403, 409} or real_500, response.text
