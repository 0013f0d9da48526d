"""The container itself: configuration through the environment, HTTPS with its CA, compose, refusal to
start without auth. The contract runs against the container through the ``cloud`` fixture's docker mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker_cloud import REPO, health_status, start_docker_fake_cloud
from real_parts import missing

from engram_sync_kit.fake_cloud.server import FakeCloudConfig

pytestmark = pytest.mark.docker


def push(base_url: str, ca_file: Path | None, token: str, project: str) -> httpx.Response:
    session = {"id": "s1", "project": project, "directory": "/w", "started_at": "2026-01-01 00:00:00"}
    body = {
        "entries": [
            {"project": project, "entity": "session", "entity_key": "s1", "op": "upsert", "payload": session}
        ]
    }
    verify: Any = str(ca_file) if ca_file else True
    return httpx.post(
        f"{base_url}/sync/mutations/push",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        verify=verify,
        trust_env=False,
        timeout=30,
    )


def test_container_serves_https_with_a_ca_it_hands_out(fake_cloud_image: str) -> None:
    with start_docker_fake_cloud(FakeCloudConfig(token="t", tls=True), fake_cloud_image) as cloud:
        assert cloud.base_url.startswith("https://127.0.0.1:")
        assert cloud.ca_file is not None
        assert "BEGIN CERTIFICATE" in cloud.ca_file.read_text()
        assert health_status(cloud.base_url, cloud.ca_file) == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            health_status(cloud.base_url)  # the system trust store does not know the throwaway CA
        assert push(cloud.base_url, cloud.ca_file, "t", "alpha").json()["accepted_seqs"] == [1]


def test_container_takes_token_and_allowlist_from_the_environment(fake_cloud_image: str) -> None:
    config = FakeCloudConfig(token="env-token", allowed_projects=("alpha", "beta"))
    with start_docker_fake_cloud(config, fake_cloud_image) as cloud:
        wrong = push(cloud.base_url, None, "other", "alpha")
        assert (wrong.status_code, wrong.text.strip()) == (401, "unauthorized: unknown token")
        forbidden = push(cloud.base_url, None, "env-token", "gamma")
        assert forbidden.status_code == 403
        assert forbidden.json()["error_code"] == "policy_forbidden"
        accepted = push(cloud.base_url, None, "env-token", "beta")
        assert accepted.status_code == 200
        assert [m.project for m in cloud.client.received()] == ["beta"]


def test_container_refuses_to_start_without_auth(fake_cloud_image: str) -> None:
    name = f"engram-fake-cloud-noauth-{uuid.uuid4().hex[:10]}"
    try:
        refused = subprocess.run(
            ["docker", "run", "--rm", "--name", name, fake_cloud_image],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False, timeout=120)
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.startswith("engram-fake-cloud: cloud auth token is required"), refused.stderr


@pytest.fixture
def compose_project(fake_cloud_image: str, tmp_path: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    """compose.yaml as docs/fake-cloud-container.md runs it: the harness's image, a token, TLS."""
    if shutil.which("docker-compose") is None:
        reason = "docker-compose is not installed (scripts/docker-engine.sh compose)"
        missing(reason)
    command = ["docker-compose", "-p", f"ekfake{uuid.uuid4().hex[:10]}", "-f", str(REPO / "compose.yaml")]
    env = {
        **os.environ,
        "ENGRAM_FAKE_CLOUD_IMAGE": fake_cloud_image,
        "ENGRAM_CLOUD_TOKEN": "compose-token",
        "ENGRAM_FAKE_CLOUD_CONTROL_TOKEN": "compose-control-token",
        "ENGRAM_FAKE_CLOUD_TLS": "1",
        "ENGRAM_FAKE_CLOUD_CA_DIR": str(tmp_path / "ca"),
        "ENGRAM_FAKE_CLOUD_HOST_PORT": "",  # a free loopback port
    }
    try:
        yield command, env
    finally:
        subprocess.run([*command, "down", "-t", "5"], env=env, capture_output=True, check=False, timeout=300)


@pytest.mark.engram
def test_compose_up_then_a_scenario_runs_against_it_with_cloud_url(
    compose_project: tuple[list[str], dict[str, str]], engram_bin: Path, tmp_path: Path
) -> None:
    command, env = compose_project
    up = subprocess.run([*command, "up", "-d"], env=env, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr[-2000:]
    port = subprocess.run(
        [*command, "port", "fake-cloud", "8080"], env=env, capture_output=True, text=True, timeout=60
    )
    address = port.stdout.strip()
    assert address.startswith("127.0.0.1:"), (address, port.stderr)
    base_url, ca_file = f"https://{address}", tmp_path / "ca" / "ca.pem"
    deadline, status = time.monotonic() + 60, 0
    while time.monotonic() < deadline and status != 200:
        with contextlib.suppress(httpx.HTTPError):
            status = health_status(base_url, ca_file) if ca_file.exists() else 0
        time.sleep(0.2)
    assert status == 200

    report = tmp_path / "report.json"
    scenario = REPO / "scenarios" / "enrolled-legacy-lane.scenario.yaml"
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "engram-harness"),
            "run",
            str(scenario),
            "--engram",
            str(engram_bin),
            "--cloud-url",
            base_url,
            "--cloud-token",
            "compose-token",
            "--cloud-control-token",
            "compose-control-token",
            "--cloud-ca",
            str(ca_file),
            "--expect",
            "baseline",
            "--json",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert f"({base_url} cloud, 1 at a time)" in run.stdout
    [result] = json.loads(report.read_text())["scenarios"]
    assert (result["id"], result["status"]) == ("enrolled-legacy-lane", "passed")

    down = subprocess.run([*command, "down", "-t", "5"], env=env, capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stderr[-2000:]
    with pytest.raises(httpx.HTTPError):
        health_status(base_url, ca_file)


def test_a_base_image_that_cannot_be_made_is_one_line_that_says_what_to_run(docker_client: Any) -> None:
    env = {
        **os.environ,
        "ENGRAM_KIT_BASE_IMAGE": f"local/engram-kit-missing:{uuid.uuid4().hex[:8]}",
        "ENGRAM_KIT_DEBIAN_MIRROR": "http://127.0.0.1:9/debian",  # refused: debootstrap fails at once
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "engram-harness"), "cloud", "image"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, ""), done
    *progress, error = done.stderr.splitlines()
    assert progress == [
        f"fake cloud image: no base image {env['ENGRAM_KIT_BASE_IMAGE']}; making it from Debian packages "
        "(about a minute)"
    ]
    assert error.startswith(
        f"Error: no base image {env['ENGRAM_KIT_BASE_IMAGE']}, and it could not be made ("
    )
    assert error.endswith("); run (as root): scripts/docker-engine.sh base"), error
