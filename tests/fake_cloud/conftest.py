"""The ``cloud`` fixture: one contract, every way of running the fake (see fake_cloud_support)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fake_cloud_support import AUTH, CLOUD_MODES, STARTERS, CloudUnderTest


@pytest.fixture(scope="session", params=CLOUD_MODES)
def cloud_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CloudUnderTest]:
    mode = str(request.param)
    with STARTERS[mode](tmp_path_factory.mktemp(f"cloud-{mode}")) as server:
        yield server


@pytest.fixture
def cloud(cloud_server: CloudUnderTest) -> CloudUnderTest:
    cloud_server.client.reset()
    return cloud_server


@pytest.fixture
def http(cloud: CloudUnderTest) -> Iterator[httpx.Client]:
    with cloud.http(headers=AUTH) as client:
        yield client
