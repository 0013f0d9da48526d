"""The ``cloud`` fixture: one contract, every way of running the fake (see fake_cloud_support).

A plugin that tests/conftest.py loads (``pytest_plugins``), not a conftest.py of its own: mypy names every
conftest.py "conftest" and cannot check two. pyproject's ``pythonpath`` puts this directory on sys.path.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from docker_cloud import DOCKER_MODE, fake_cloud_image, start_docker  # noqa: F401 - a fixture
from fake_cloud_support import AUTH, CLOUD_MODES, STARTERS, CloudUnderTest

# Plain names, and docker as a pytest.param that carries its marker.
MODES: list[object] = [*CLOUD_MODES, DOCKER_MODE]


@pytest.fixture(scope="session", params=MODES)
def cloud_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CloudUnderTest]:
    mode = str(request.param)
    if mode == "docker":
        request.getfixturevalue("fake_cloud_image")  # built once per session
    starter = {**STARTERS, "docker": start_docker}[mode]
    with starter(tmp_path_factory.mktemp(f"cloud-{mode}")) as server:
        yield server


@pytest.fixture
def cloud(cloud_server: CloudUnderTest) -> Iterator[CloudUnderTest]:
    cloud_server.client.reset()
    yield cloud_server
    cloud_server.client.check()  # a bug the fake recorded fails the test that met it


@pytest.fixture
def http(cloud: CloudUnderTest) -> Iterator[httpx.Client]:
    with cloud.http(headers=AUTH) as client:
        yield client
