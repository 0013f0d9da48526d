"""The fake's v3 mode answers the chunk manifest as v3's store writes it (predicted from source:
ReadManifest in internal/cloud/cloudstore/cloudstore.go, module /v3, fork wahh-22/engram @9c52018c):
version 2. v1.20 (observed) and v2 answer version 1."""

from __future__ import annotations

import httpx
import pytest

from engram_sync_kit.engram_contract.envelope import manifest_version
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.fake_cloud.state import ServerVersion

TOKEN = "v3-manifest-token"


@pytest.mark.parametrize(("version", "expected"), [("v3", 2), ("v2", 1), ("v1.20", 1)])
def test_the_manifest_version(version: ServerVersion, expected: int) -> None:
    assert manifest_version(version) == expected
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("alpha",), server_version=version)
    with start_fake_cloud(config) as cloud:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=cloud.base_url, headers=headers, trust_env=False, timeout=10) as http:
            response = http.get("/sync/pull", params={"project": "alpha"})
    assert response.status_code == 200, response.text
    assert response.json() == {"chunks": [], "version": expected}
