"""The fake cloud as a container: the harness's image (harness.cloud_image), run with testcontainers.

The image is the one `engram-harness run --cloud docker` uses, tagged by the digest of what it is made
from; a file lock in harness.cloud_image lets one xdist worker build it while the other waits.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from fake_cloud_support import TOKEN, CloudUnderTest

from engram_sync_kit.fake_cloud.client import FakeCloudClient
from engram_sync_kit.fake_cloud.server import FakeCloudConfig
from engram_sync_kit.harness.cloud.image import ensure_image
from engram_sync_kit.harness.cloud.launch import CloudHandle

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

REPO = Path(__file__).resolve().parents[2]
CONTAINER_PORT = 8080
CA_IN_CONTAINER = "/run/engram-fake-cloud/ca.pem"
READY_TIMEOUT_SECONDS = 30.0

# machine-notes: no reaper image can be pulled, and /.dockerenv fools testcontainers into using the
# 172.17.0.1 gateway, which is refused; published ports are on loopback only.
TESTCONTAINERS_SETTINGS = {
    "TESTCONTAINERS_RYUK_DISABLED": "true",
    "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
    "TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
}


def configure_testcontainers() -> None:
    for key, value in TESTCONTAINERS_SETTINGS.items():
        os.environ.setdefault(key, value)


def build_image(base_image: str) -> str:
    """The harness's own image for this checkout (found, or built from the Dockerfile on BASE_IMAGE)."""
    return ensure_image(base_image=base_image)


@dataclass
class DockerFakeCloud:
    """A running fake cloud container; the same surface as the in-process RunningFakeCloud."""

    container: DockerContainer
    base_url: str
    ca_file: Path | None
    control_token: str | None = None
    _client: FakeCloudClient | None = field(default=None, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def client(self) -> FakeCloudClient:
        if self._client is None:
            self._client = FakeCloudClient(self.base_url, self.ca_file, control_token=self.control_token)
        return self._client

    def logs(self) -> str:
        stdout, stderr = self.container.get_logs()
        return (stdout + stderr).decode(errors="replace")

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        with contextlib.suppress(Exception):
            self.container.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> DockerFakeCloud:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _environment(config: FakeCloudConfig, control_token: str) -> dict[str, str]:
    env = {
        # The container binds 0.0.0.0, so the fake requires a control token for /_fake/.
        "ENGRAM_FAKE_CLOUD_CONTROL_TOKEN": control_token,
        "ENGRAM_CLOUD_ALLOWED_PROJECTS": ",".join(config.allowed_projects),
        "ENGRAM_CLOUD_MAX_PUSH_BYTES": str(config.max_push_bytes),
        "ENGRAM_FAKE_CLOUD_TLS": "1" if config.tls else "0",
        "ENGRAM_FAKE_CLOUD_SERVER_VERSION": config.server_version,
    }
    if config.insecure_no_auth:
        env["ENGRAM_CLOUD_INSECURE_NO_AUTH"] = "1"
        if config.insecure_permissive:
            env["ENGRAM_FAKE_CLOUD_INSECURE_PERMISSIVE"] = "1"
    elif config.token:
        env["ENGRAM_CLOUD_TOKEN"] = config.token
    return env


def start_docker_fake_cloud(config: FakeCloudConfig, image: str) -> DockerFakeCloud:
    """Run the image with the config's auth, allowlist and TLS; return once /_fake/ready answers."""
    configure_testcontainers()
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image, name=f"engram-fake-cloud-{uuid.uuid4().hex[:12]}")
    container.with_exposed_ports(CONTAINER_PORT)
    control_token = config.control_token or f"control-{uuid.uuid4().hex}"
    for key, value in _environment(config, control_token).items():
        container.with_env(key, value)
    container.start()
    host = container.get_container_host_ip()
    port = container.get_exposed_port(CONTAINER_PORT)
    scheme = "https" if config.tls else "http"
    cloud = DockerFakeCloud(
        container=container, base_url=f"{scheme}://{host}:{port}", ca_file=None, control_token=control_token
    )
    try:
        _wait_ready(cloud, config.tls)
    except BaseException:
        cloud.stop()
        raise
    return cloud


def _wait_ready(cloud: DockerFakeCloud, tls: bool) -> None:
    if tls:
        cloud._tmp = tempfile.TemporaryDirectory(prefix="engram-fake-cloud-ca-")
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            if cloud._tmp is not None and cloud.ca_file is None:
                # The server writes its CA while starting; until then the copy fails.
                ca_file = Path(cloud._tmp.name) / "ca.pem"
                cloud.container.copy_from_container(CA_IN_CONTAINER, ca_file)
                cloud.ca_file = ca_file
            if cloud.client.ready():
                return
            last_error = "/_fake/ready did not answer 200"
        except Exception as error:
            last_error = f"{type(error).__name__}: {error}"
        time.sleep(0.1)
    raise TimeoutError(
        f"fake cloud container at {cloud.base_url} not ready within {READY_TIMEOUT_SECONDS:g} s "
        f"({last_error}); its log:\n{cloud.logs()[-2000:]}"
    )


def health_status(base_url: str, ca_file: Path | None = None) -> int:
    verify: str | bool = str(ca_file) if ca_file else True
    return httpx.get(f"{base_url}/health", verify=verify, timeout=5, trust_env=False).status_code


@pytest.fixture(scope="session")
def fake_cloud_image(base_image: str) -> str:
    """The repository's Dockerfile built on ``base_image``, once per session."""
    return build_image(base_image)


DOCKER_MODE = pytest.param("docker", marks=pytest.mark.docker, id="docker")


@contextlib.contextmanager
def start_docker(tmp: Path) -> Iterator[CloudUnderTest]:
    """The ``docker`` mode of the ``cloud`` fixture: the container exactly as `--cloud docker` runs it
    (host network, bound to loopback, so /_fake/ needs no control token, as in the other modes)."""
    cloud = CloudHandle("docker", TOKEN, ["*"], tmp / "fake-cloud.log")
    try:
        yield CloudUnderTest("docker", cloud.base_url, cloud.ca_file, cloud.client)
    finally:
        cloud.close()
