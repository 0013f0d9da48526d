"""harness.cloud_image without a real engine: the content digest, and every failure as one line of ours.

A small HTTP server stands in for the Docker Engine API (DOCKER_HOST=tcp://...), so the build's error
paths are pinned without building anything. The real build and the missing-base-image path run in the
docker tier (tests/fake_cloud/test_fake_cloud_container.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from engram_sync_kit.harness.cloud.image import (
    IMAGE_NAME,
    CloudImageError,
    Engine,
    content_digest,
    ensure_image,
)
from engram_sync_kit.harness.cloud.launch import CloudHandle
from engram_sync_kit.harness.errors import HarnessError

HARNESS = str(Path(sys.executable).parent / "engram-harness")
REPO = Path(__file__).resolve().parents[2]
PKG = "engram_sync_kit"
BASE_ID = "sha256:" + "b" * 64


class FakeEngine(BaseHTTPRequestHandler):
    """/_ping, image inspect (only the base image exists), and a build that fails with Docker's words."""

    build_messages: ClassVar[list[dict[str, Any]]] = []
    requests: ClassVar[list[str]] = []

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.requests.append(f"GET {self.path}")
        if self.path == "/_ping":
            self._answer(200, b"OK", "text/plain")
        elif self.path.startswith("/images/local/base:1/json"):
            self._answer(200, json.dumps({"Id": BASE_ID}).encode())
        else:
            self._answer(404, b'{"message": "No such image"}')

    def do_POST(self) -> None:
        self.requests.append(f"POST {self.path.split('?')[0]}")
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        elif self.headers.get("Transfer-Encoding") == "chunked":
            while (size := int(self.rfile.readline().strip(), 16)) != 0:
                self.rfile.read(size + 2)
            self.rfile.readline()
        body = b"".join(json.dumps(message).encode() + b"\r\n" for message in self.build_messages)
        self._answer(200, body)


@pytest.fixture
def engine() -> Iterator[Engine]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEngine)
    FakeEngine.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Engine(f"tcp://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


def checkout(root: Path, wheelhouse_script: str = "exit 0\n") -> Path:
    """The files the image is made from, with a stand-in wheelhouse script."""
    for name in ("Dockerfile", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    for package in ("fake_cloud", "engram_contract", "harness"):
        shutil.copytree(
            REPO / PKG / package, root / PKG / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (root / "scripts").mkdir()
    (root / "scripts" / "build-wheelhouse.sh").write_text(wheelhouse_script)
    (root / ".cache" / "wheelhouse" / "deps").mkdir(parents=True)
    return root


def test_the_digest_follows_the_fake_cloud_and_the_base_image_not_the_harness(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    first = content_digest(repo, BASE_ID)
    assert len(first) == 12 and first == content_digest(repo, BASE_ID)
    (repo / PKG / "harness" / "runner.py").write_text("# an edit of the harness\n", encoding="utf-8")
    assert content_digest(repo, BASE_ID) == first
    with (repo / PKG / "fake_cloud" / "app.py").open("a", encoding="utf-8") as app:
        app.write("# an edit of the fake cloud\n")
    changed = content_digest(repo, BASE_ID)
    assert changed != first
    assert content_digest(repo, "sha256:" + "c" * 64) != changed
    (repo / "pyproject.toml").write_text("# a new pin\n", encoding="utf-8")
    assert content_digest(repo, BASE_ID) not in (first, changed)


def test_a_failed_docker_build_is_one_line_with_the_log_kept(engine: Engine, tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    FakeEngine.build_messages = [
        {"stream": "Step 1/10 : ARG BASE_IMAGE=python:3.12-slim\n"},
        {"stream": " ---> Running in 0123\n"},
        {"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1\nmore\nlines"},
    ]
    shown: list[str] = []
    tag = f"{IMAGE_NAME}:{content_digest(repo, BASE_ID)}"
    with pytest.raises(CloudImageError) as raised:
        ensure_image(shown.append, base_image="local/base:1", repo=repo, engine=engine)
    log = repo / ".cache" / "fake-cloud-image.log"
    assert str(raised.value) == (
        f"docker build of {tag} failed: The command '/bin/sh -c pip install' returned a non-zero code: 1 "
        f"(full log: {log})"
    )
    assert shown == [
        f"building {tag} (once per change of the fake cloud)",
        "building the wheelhouse (scripts/build-wheelhouse.sh)",
        "Step 1/10 : ARG BASE_IMAGE=python:3.12-slim",
    ]
    assert "more\nlines" in log.read_text()
    assert "POST /build" in FakeEngine.requests


def test_a_failed_wheelhouse_is_one_line(engine: Engine, tmp_path: Path) -> None:
    script = "echo 'pip: first line' >&2\necho 'build-wheelhouse: the host Python is 3.12' >&2\nexit 1\n"
    repo = checkout(tmp_path, script)
    with pytest.raises(CloudImageError) as raised:
        ensure_image(base_image="local/base:1", repo=repo, engine=engine)
    assert (
        str(raised.value) == "scripts/build-wheelhouse.sh failed: build-wheelhouse: the host Python is 3.12"
    )
    assert "POST /build" not in FakeEngine.requests


def test_an_installed_copy_without_a_dockerfile_says_to_use_a_checkout(
    engine: Engine, tmp_path: Path
) -> None:
    with pytest.raises(CloudImageError, match=r"has no Dockerfile; run from a clone of engram-sync-kit$"):
        ensure_image(base_image="local/base:1", repo=tmp_path, engine=engine)


@pytest.mark.parametrize(
    "args",
    [
        ["cloud", "image"],
        ["run", str(REPO / "scenarios" / "enrolled-legacy-lane.scenario.yaml"), "--cloud", "docker"],
    ],
    ids=["cloud-image", "run-cloud-docker"],
)
def test_no_engine_is_one_line_that_says_what_to_run(args: list[str], tmp_path: Path) -> None:
    socket = tmp_path / "no-engine.sock"
    done = subprocess.run(
        [HARNESS, *args],
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{socket}", "ENGRAM_BIN": "/bin/true"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr == (
        f"Error: no Docker engine answers at unix://{socket}; start one (as root): scripts/docker-engine.sh up\n"
    )


def test_a_cloud_that_does_not_start_is_one_line_naming_its_log(tmp_path: Path) -> None:
    failing_docker = [
        "sh",
        "-c",
        "echo 'docker: Error response from daemon: pull access denied.' >&2; "
        "echo \"See 'docker run --help'.\" >&2; exit 125",
        "docker",
    ]
    handle = CloudHandle.__new__(CloudHandle)
    log = tmp_path / "fake-cloud.log"
    with pytest.raises(HarnessError) as raised:
        handle._start_process(failing_docker, ["--port", "0"], log)
    assert str(raised.value) == (
        "the fake cloud did not start: engram-fake-cloud serve did not start (exit 125): "
        f"docker: Error response from daemon: pull access denied. (its stderr: {log})"
    )
