"""Shared pieces of the fake cloud tests: the object a ``cloud`` fixture yields, and how each mode starts.

Each mode is a starter in ``STARTERS`` and a name in ``CLOUD_MODES``; a new mode (a container, for
example) is one more starter and one more name. A starter yields a ``CloudUnderTest`` whose server
was started with ``TOKEN``, the allowlist ``*`` and the default limits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engram_sync_kit.fake_cloud.client import FakeCloudClient
from engram_sync_kit.fake_cloud.process import FakeCloudProcess
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

TOKEN = "contract-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class CloudUnderTest:
    mode: str
    base_url: str
    ca_file: Path | None
    client: FakeCloudClient
    token: str = TOKEN

    def http(self, **kwargs: Any) -> httpx.Client:
        """A raw HTTP client for the sync routes (no auth header unless given)."""
        verify: Any = str(self.ca_file) if self.ca_file else True
        return httpx.Client(base_url=self.base_url, verify=verify, trust_env=False, timeout=30, **kwargs)


@contextlib.contextmanager
def start_inprocess(tmp: Path) -> Iterator[CloudUnderTest]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, server_version="v1.20")) as cloud:
        yield CloudUnderTest("inprocess", cloud.base_url, cloud.ca_file, cloud.client)


@contextlib.contextmanager
def start_subprocess(tmp: Path) -> Iterator[CloudUnderTest]:
    with (
        FakeCloudProcess(["--port", "0", "--token", TOKEN], server_version="v1.20") as process,
        FakeCloudClient(process.base_url) as client,
    ):
        yield CloudUnderTest("subprocess", process.base_url, None, client)


STARTERS: dict[str, Callable[[Path], AbstractContextManager[CloudUnderTest]]] = {
    "inprocess": start_inprocess,
    "subprocess": start_subprocess,
}
CLOUD_MODES = ["inprocess", "subprocess"]


def push_observation(http: httpx.Client, project: str = "p", key: str = "o1") -> httpx.Response:
    """One observation upsert on the mutation push route."""
    payload = {
        "sync_id": key,
        "session_id": "s1",
        "type": "t",
        "title": "x",
        "content": "c",
        "scope": "project",
    }
    entry = {
        "project": project,
        "entity": "observation",
        "entity_key": key,
        "op": "upsert",
        "payload": payload,
    }
    return http.post("/sync/mutations/push", json={"entries": [entry]})
