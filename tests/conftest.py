"""Test tiers: unit (no external process), engram (the real binary), docker (a real engine).

Outside CI a tier whose dependency is missing skips with a one-line reason. Under CI=true it fails:
a green CI run must mean that every tier ran.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_parts import missing

from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.engram.install import DEFAULT_VERSION, find_engram

# Plugins rather than conftest.py files in subdirectories: mypy names every conftest.py "conftest" and can
# check only one. The fake cloud's cloud/cloud_server/http fixtures (tests/fake_cloud/cloud_fixtures.py) and
# the canary tests' runs per engram schema (tests/engram_schemas/per_version.py).
pytest_plugins = ["cloud_fixtures", "engram_schemas.per_version", "scheduling"]

TIERS = ("unit", "engram", "docker")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tiers = [name for name in TIERS if item.get_closest_marker(name)]
        if not tiers and item.path.suffix == ".py":
            item.add_marker(pytest.mark.unit)


# Threads that outlive one test by design: the scenario plugin's session pools.
LONG_LIVED_THREADS = ("scenario",)
THREAD_GRACE_SECONDS = 2.0


# Every spawn with fork(), not vfork(): a vfork child shares the worker's memory while it execs, and one
# CI run saw execve fail with EFAULT (Bad address) on a spawn of engram. CPython documents this switch for
# such cases ("Disabling use of vfork() or posix_spawn()", subprocess, 3.11+).
subprocess._USE_VFORK = False  # type: ignore[misc]  # typeshed marks it Final; the docs invite setting it


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a thread running: a leaked server or watcher outlives its test and
    makes later ones flaky. Session and module fixtures start before this snapshot, so theirs count
    as already there."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE_SECONDS
    leaked = []
    for thread in set(threading.enumerate()) - before:
        if thread.name.startswith(LONG_LIVED_THREADS):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked.append(thread.name)
    if leaked:
        pytest.fail(f"threads still running after the test: {', '.join(sorted(leaked))}", pytrace=False)


@pytest.fixture(scope="session")
def engram_bin() -> Path:
    binary = find_engram(DEFAULT_VERSION)
    if binary is None:
        missing(f"engram {DEFAULT_VERSION} is not installed (run: engram-harness engram install)")
    assert binary is not None
    return binary


@pytest.fixture
def engram_world(engram_bin: Path, tmp_path: Path) -> EngramEnvironment:
    return EngramEnvironment(binary=engram_bin, root=tmp_path).prepare()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as error:
        missing(f"no Docker engine answers ({type(error).__name__})")
        raise
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    tag = os.environ.get("ENGRAM_KIT_BASE_IMAGE", "local/debian-python:bookworm")
    try:
        docker_client.images.get(tag)
    except Exception:
        missing(f"base image {tag} is missing (run: scripts/docker-engine.sh base)")
    return tag
