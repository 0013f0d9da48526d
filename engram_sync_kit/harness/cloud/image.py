"""The fake cloud's container image: found by the content that goes into it, or built from the Dockerfile.

One image name everywhere (harness, tests, docs, compose.yaml): ``engram-sync-kit/fake-cloud``. Its tag is
a digest of everything the image is made from (the Dockerfile, the project's sources and pins, the base
image's id), so a changed fake cloud is never served from a stale image, and an unchanged one is found in
milliseconds without building anything. Each build is also tagged ``:latest`` for people and compose.

The engine is spoken to over its HTTP API (the socket of DOCKER_HOST), so every failure is one line of ours:
Docker's multi-line output goes to a log file, never to the user.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx

from engram_sync_kit.harness.errors import HarnessError
from engram_sync_kit.harness.process_env import environment_snapshot

IMAGE_NAME = "engram-sync-kit/fake-cloud"
DEFAULT_BASE_IMAGE = "local/debian-python:bookworm"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
REPO = Path(__file__).resolve().parents[3]
# What the fake cloud in the image is made from, besides the base image. The wheel carries the harness and
# the canary too, but the container runs only engram-fake-cloud, so their edits do not rebuild it.
SOURCE_PACKAGES = ("engram_sync_kit/fake_cloud", "engram_sync_kit/engram_contract")
SOURCE_FILES = ("Dockerfile", "pyproject.toml", "constraints.txt", "scripts/build-wheelhouse.sh")
DIGEST_LENGTH = 12
# Hash tags kept per name: several checkouts may share one engine, so only the oldest go.
KEPT_BUILDS = 3
Progress = Callable[[str], None]


class CloudImageError(HarnessError):
    """No engine, no base image, or a failed build: one line that says what to run."""


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Engine:
    """The few Docker Engine API calls the image needs, over DOCKER_HOST's socket (or tcp)."""

    host: str

    @classmethod
    def from_env(cls) -> Engine:
        return cls(os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST)

    @contextlib.contextmanager
    def _http(self, timeout: float | None = 30.0) -> Iterator[httpx.Client]:
        if self.host.startswith("unix://"):
            transport = httpx.HTTPTransport(uds=self.host[len("unix://") :])
            client = httpx.Client(transport=transport, base_url="http://docker", timeout=timeout)
        elif self.host.startswith("tcp://"):
            client = httpx.Client(base_url="http://" + self.host[len("tcp://") :], timeout=timeout)
        else:
            raise CloudImageError(f"DOCKER_HOST={self.host}: only unix:// and tcp:// engines are supported")
        with client:
            yield client

    def ping(self) -> None:
        try:
            with self._http(timeout=10.0) as http:
                answer = http.get("/_ping")
        except httpx.HTTPError:
            answer = None
        if answer is None or answer.status_code != 200:
            raise CloudImageError(
                f"no Docker engine answers at {self.host}; start one (as root): scripts/docker-engine.sh up"
            )

    def image_id(self, reference: str) -> str | None:
        with self._http() as http:
            answer = http.get(f"/images/{quote(reference, safe='/:')}/json")
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        return str(answer.json()["Id"])

    def build(
        self, context: IO[bytes], params: dict[str, str], on_message: Callable[[dict[str, Any]], None]
    ) -> None:
        def chunks() -> Iterator[bytes]:
            while block := context.read(1 << 20):
                yield block

        with (
            self._http(timeout=None) as http,
            http.stream(
                "POST",
                "/build",
                params=params,
                content=chunks(),
                headers={"Content-Type": "application/x-tar"},
            ) as answer,
        ):
            if answer.status_code != 200:
                answer.read()
                on_message({"error": answer.text})
                return
            for line in answer.iter_lines():
                if line.strip():
                    on_message(json.loads(line))

    def tag(self, image: str, repository: str, tag: str) -> None:
        with self._http() as http:
            http.post(
                f"/images/{quote(image, safe='/:')}/tag", params={"repo": repository, "tag": tag}
            ).raise_for_status()

    def tagged(self, repository: str) -> list[tuple[str, int]]:
        """(tag, created) of every image of REPOSITORY."""
        with self._http() as http:
            answer = http.get("/images/json", params={"filters": json.dumps({"reference": [repository]})})
        answer.raise_for_status()
        return [
            (tag, int(image.get("Created", 0)))
            for image in answer.json()
            for tag in image.get("RepoTags") or []
            if tag.startswith(repository + ":")
        ]

    def untag(self, reference: str) -> None:
        """Drop a tag; the engine refuses (harmlessly) while a container still uses the image."""
        with self._http(timeout=120.0) as http:
            http.delete(f"/images/{quote(reference, safe='/:')}")


def base_image_name() -> str:
    return os.environ.get("ENGRAM_KIT_BASE_IMAGE") or DEFAULT_BASE_IMAGE


def content_digest(repo: Path, base_image_id: str) -> str:
    """A digest of what the fake cloud image is made from: base image, Dockerfile, sources and pins."""
    digest = hashlib.sha256(f"base {base_image_id}\n".encode())
    files = [repo / name for name in SOURCE_FILES]
    for package in SOURCE_PACKAGES:
        files += [
            path for path in (repo / package).rglob("*") if path.is_file() and "__pycache__" not in path.parts
        ]
    for path in sorted(files):
        if path.is_file():
            data = path.read_bytes()
            digest.update(f"{path.relative_to(repo).as_posix()} {len(data)}\n".encode())
            digest.update(data)
    return digest.hexdigest()[:DIGEST_LENGTH]


_resolved: dict[tuple[Path, str, str], str] = {}
_resolving = threading.Lock()


def ensure_image(
    progress: Progress = _quiet,
    *,
    base_image: str | None = None,
    repo: Path = REPO,
    engine: Engine | None = None,
) -> str:
    """The image for this checkout's content: found, or built (wheelhouse, base image, docker build).

    Resolved once per process: scenarios that start later in a run use the same image even if the sources
    change meanwhile.
    """
    engine = engine or Engine.from_env()
    base = base_image or base_image_name()
    key = (repo, base, engine.host)
    with _resolving:
        if key not in _resolved:
            _resolved[key] = _find_or_build(progress, base, repo, engine)
        return _resolved[key]


def _find_or_build(progress: Progress, base: str, repo: Path, engine: Engine) -> str:
    if not (repo / "Dockerfile").is_file():
        raise CloudImageError(
            f"the fake cloud image is built from a source checkout, and {repo} has no Dockerfile; "
            "run from a clone of engram-sync-kit"
        )
    engine.ping()
    base_id = engine.image_id(base) or _make_base_image(progress, base, repo, engine)
    tag = f"{IMAGE_NAME}:{content_digest(repo, base_id)}"
    if engine.image_id(tag):
        return tag
    with _build_lock(repo):
        if engine.image_id(tag):  # another process built it while this one waited
            return tag
        progress(f"building {tag} (once per change of the fake cloud)")
        _build_wheelhouse(progress, repo)
        _build(progress, tag, base, repo, engine)
        engine.tag(tag, IMAGE_NAME, "latest")
        _drop_old_builds(engine, tag)
    progress(f"built {tag}")
    return tag


@contextlib.contextmanager
def _build_lock(repo: Path) -> Iterator[None]:
    lock_path = repo / ".cache" / "fake-cloud-image.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _make_base_image(progress: Progress, base: str, repo: Path, engine: Engine) -> str:
    progress(f"no base image {base}; making it from Debian packages (about a minute)")
    with _build_lock(repo):
        done = subprocess.run(
            ["bash", str(repo / "scripts" / "docker-engine.sh"), "base"],
            env={**environment_snapshot(), "ENGRAM_KIT_BASE_IMAGE": base},
            capture_output=True,
            text=True,
            check=False,
        )
    base_id = engine.image_id(base) if done.returncode == 0 else None
    if base_id is None:
        raise CloudImageError(
            f"no base image {base}, and it could not be made ({_last_line(done.stderr)}); "
            "run (as root): scripts/docker-engine.sh base"
        )
    return base_id


def _build_wheelhouse(progress: Progress, repo: Path) -> None:
    progress("building the wheelhouse (scripts/build-wheelhouse.sh)")
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "build-wheelhouse.sh")],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
    )
    if done.returncode != 0:
        raise CloudImageError(f"scripts/build-wheelhouse.sh failed: {_last_line(done.stderr)}")


def _context(repo: Path) -> IO[bytes]:
    """The build context: the Dockerfile and the wheelhouse, nothing else (see .dockerignore)."""
    archive = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    wheels = sorted((repo / ".cache" / "wheelhouse").glob("*/*.whl"))
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for path in [repo / "Dockerfile", *wheels]:
            tar.add(path, arcname=path.relative_to(repo).as_posix())
    archive.seek(0)
    return archive


STEP = re.compile(r"^Step \d+/\d+ : ")


def _build(progress: Progress, tag: str, base: str, repo: Path, engine: Engine) -> None:
    log_path = repo / ".cache" / "fake-cloud-image.log"
    errors: list[str] = []
    with log_path.open("w", encoding="utf-8") as log, _context(repo) as context:

        def on_message(message: dict[str, Any]) -> None:
            text = str(message.get("stream") or message.get("status") or "")
            if "error" in message:
                errors.append(str(message["error"]))
                text = f"ERROR: {message['error']}"
            log.write(text if text.endswith("\n") else text + "\n")
            if STEP.match(text):
                progress(text.strip()[:140])

        params = {
            "t": tag,
            "buildargs": json.dumps({"BASE_IMAGE": base}),
            "rm": "1",
            "forcerm": "1",
        }
        try:
            engine.build(context, params, on_message)
        except httpx.HTTPError as error:
            errors.append(f"the engine stopped answering ({type(error).__name__})")
    if errors:
        first = next((line.strip() for line in errors[0].splitlines() if line.strip()), "unknown error")
        raise CloudImageError(f"docker build of {tag} failed: {first} (full log: {log_path})")


def _drop_old_builds(engine: Engine, current: str) -> None:
    hashed = re.compile(rf"^{re.escape(IMAGE_NAME)}:[0-9a-f]{{{DIGEST_LENGTH}}}$")
    builds = sorted(
        (
            (created, tag)
            for tag, created in engine.tagged(IMAGE_NAME)
            if hashed.match(tag) and tag != current
        ),
        reverse=True,
    )
    for _created, tag in builds[KEPT_BUILDS - 1 :]:
        with contextlib.suppress(httpx.HTTPError):
            engine.untag(tag)
