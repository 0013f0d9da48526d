"""Run the fake cloud: in a background thread of the caller (``start_fake_cloud``) or in the foreground."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engram_sync_kit.fake_cloud.app import FakeCloudApp
from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.fake_cloud.httpserver import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    HttpServer,
    warn,
)
from engram_sync_kit.fake_cloud.state import (
    DEFAULT_JOURNAL_LIMIT,
    DEFAULT_MAX_PUSH_BYTES,
    DEFAULT_STORE_LIMIT,
    NEWEST_SERVER_VERSION,
    SERVER_VERSIONS,
    FakeCloudState,
    ServerVersion,
)

if TYPE_CHECKING:
    import ssl

    from engram_sync_kit.fake_cloud.client import FakeCloudClient

START_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class FakeCloudConfig:
    token: str | None = None
    allowed_projects: Sequence[str] = ("*",)
    insecure_no_auth: bool = False
    # Not the real server: with insecure_no_auth, serve projects by the allowlist instead of the real
    # v1.20's 403 "principal is required" on every project route.
    insecure_permissive: bool = False
    tls: bool = False
    host: str = "127.0.0.1"
    port: int = 0
    journal_limit: int = DEFAULT_JOURNAL_LIMIT
    max_push_bytes: int = DEFAULT_MAX_PUSH_BYTES
    ca_out: Path | None = None
    # Required for a non-loopback bind: every /_fake/ request must then carry it as a bearer token.
    control_token: str | None = None
    store_limit: int = DEFAULT_STORE_LIMIT
    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    # Concurrent connections; past it a connection is refused at once (httpserver.MAX_CONNECTIONS).
    max_connections: int = MAX_CONNECTIONS
    # Which real server to answer as: v1.20 (observed), v2 or v3 (predicted from source).
    server_version: ServerVersion = NEWEST_SERVER_VERSION

    def validate(self) -> None:
        """The real server's start-up rules for auth, plus range checks; raises FakeCloudError."""
        if self.server_version not in SERVER_VERSIONS:
            raise FakeCloudError(
                f"server_version must be one of {', '.join(SERVER_VERSIONS)}, got {self.server_version!r}"
            )
        token = (self.token or "").strip()
        if self.insecure_no_auth and token:
            raise FakeCloudError(
                "conflicting auth configuration: insecure_no_auth cannot be used together with a token"
            )
        if not self.insecure_no_auth and not token:
            raise FakeCloudError(
                "cloud auth token is required: set ENGRAM_CLOUD_TOKEN or --token "
                "(or ENGRAM_CLOUD_INSECURE_NO_AUTH=1 / --insecure-no-auth for no auth)"
            )
        if self.insecure_permissive and not self.insecure_no_auth:
            raise FakeCloudError("insecure_permissive only applies together with insecure_no_auth")
        if isinstance(self.allowed_projects, str):
            raise FakeCloudError(
                "allowed_projects must be a sequence of names, not one string; use ('*',) for all"
            )
        if not 0 <= self.port <= 65535:
            raise FakeCloudError(f"port must be 0 to 65535, got {self.port}")
        if self.journal_limit < 1:
            raise FakeCloudError(f"journal_limit must be at least 1, got {self.journal_limit}")
        if self.max_push_bytes < 1:
            raise FakeCloudError(f"max_push_bytes must be at least 1, got {self.max_push_bytes}")
        if self.store_limit < 1:
            raise FakeCloudError(f"store_limit must be at least 1, got {self.store_limit}")
        if self.max_connections < 1:
            raise FakeCloudError(f"max_connections must be at least 1, got {self.max_connections}")
        if self.control_token is not None and not self.control_token.strip():
            raise FakeCloudError("control_token is empty; give a secret, or None on loopback")
        if not is_loopback(self.host) and self.control_token is None:
            raise FakeCloudError(
                f"refusing to bind {self.host or 'every address'!r} without a control token: the /_fake/ API "
                "(journal with payloads, reset, faults) would be open to the network; "
                "pass --control-token (or bind 127.0.0.1)"
            )

    def new_state(self) -> FakeCloudState:
        return FakeCloudState(
            token=None if self.insecure_no_auth else self.token,
            allowed_projects=self.allowed_projects,
            journal_limit=self.journal_limit,
            max_push_bytes=self.max_push_bytes,
            principal_required=self.insecure_no_auth and not self.insecure_permissive,
            store_limit=self.store_limit,
            server_version=self.server_version,
        )


def is_loopback(host: str) -> bool:
    # By spelling, not via ipaddress: importing it costs start-up time the fake does not have.
    host = host.strip("[]").lower()
    if host in ("localhost", "::1", "0:0:0:0:0:0:0:1"):
        return True
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(part.isdigit() and int(part) < 256 for part in parts)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class Serving:
    """A started server on the current event loop."""

    def __init__(self, config: FakeCloudConfig, ca_file: Path | None) -> None:
        config.validate()
        self.config = config
        self.ca_file = ca_file
        self.app = FakeCloudApp(config.new_state(), control_token=config.control_token)
        # Control bodies share the cap; the handlers answer 413 themselves past max_push_bytes.
        self.http = HttpServer(
            self.app.handle,
            max_body=max(config.max_push_bytes, 1024 * 1024),
            screen=self.app.screen,
            body_limit=self.app.body_limit,
            on_error=self.app.record_error,
            header_timeout=config.header_timeout,
            body_timeout=config.body_timeout,
            idle_timeout=config.idle_timeout,
            max_connections=config.max_connections,
        )
        self.base_url = ""

    async def start(self) -> str:
        asyncio.get_running_loop().set_exception_handler(_LoopErrors(self.app))
        ssl_context: ssl.SSLContext | None = None
        if self.config.tls:
            from engram_sync_kit.fake_cloud.tls import server_context  # trustme only with --tls

            if self.ca_file is None:
                raise FakeCloudError("tls needs a path for the CA file")
            ssl_context = server_context(self.config.host, self.ca_file)
        try:
            host, port = await self.http.start(self.config.host or "0.0.0.0", self.config.port, ssl_context)
        except OSError as error:
            raise FakeCloudError(
                f"cannot listen on {self.config.host}:{self.config.port}: {error.strerror or error}"
            ) from None
        scheme = "https" if ssl_context else "http"
        # The address actually bound, not the one asked for: "localhost" is printed as 127.0.0.1.
        self.base_url = f"{scheme}://{_url_host(host)}:{port}"
        return self.base_url

    async def stop(self) -> None:
        await self.http.stop()


class _LoopErrors:
    """What asyncio reports outside any request, as one line: out of file descriptors, each failed
    accept (hundreds a second) and each retry left over at shutdown would be a traceback on stderr;
    Go logs one line and retries. Anything else is a bug of the fake, recorded like any other."""

    def __init__(self, app: FakeCloudApp) -> None:
        self.app = app
        self.last_warning = -1.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        error = context.get("exception")
        message = str(context.get("message", "event loop error"))
        retrying = "_start_serving" in repr(context.get("handle"))  # a retry, or one left at shutdown
        if isinstance(error, OSError | ValueError) and (retrying or message.startswith("socket.accept()")):
            now = loop.time()
            if isinstance(error, OSError) and now - self.last_warning >= 1.0:
                self.last_warning = now
                warn(f"cannot accept a connection, retrying: {error}")
            return
        if isinstance(error, Exception):
            self.app.record_error("event loop", error)
        else:
            warn(message)


async def serve_until(
    config: FakeCloudConfig, stop: asyncio.Event, on_ready: Callable[[str], None], ca_file: Path | None = None
) -> None:
    serving = Serving(config, ca_file or config.ca_out)
    on_ready(await serving.start())
    try:
        await stop.wait()
    finally:
        await serving.stop()


class RunningFakeCloud:
    """A fake cloud on its own event loop in a daemon thread; stop() is idempotent and joins."""

    def __init__(self, config: FakeCloudConfig) -> None:
        config.validate()
        self.config = config
        self._tmp: Path | None = None
        ca_file = config.ca_out
        if config.tls and ca_file is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="engram-fake-cloud-"))
            ca_file = self._tmp / "ca.pem"
        self.ca_file: Path | None = ca_file if config.tls else None
        self.base_url = ""
        self._client: FakeCloudClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="engram-fake-cloud", daemon=True)

    def start(self) -> RunningFakeCloud:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_SECONDS):
            self.stop()
            raise FakeCloudError(f"fake cloud did not start within {START_TIMEOUT_SECONDS:g} s")
        if self._error is not None:
            self.stop()
            if isinstance(self._error, FakeCloudError):
                raise self._error
            raise FakeCloudError(f"fake cloud failed to start: {self._error}") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._stop_event = asyncio.Event()

        def ready(url: str) -> None:
            self.base_url = url
            self._ready.set()

        try:
            loop.run_until_complete(serve_until(self.config, self._stop_event, ready, self.ca_file))
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()
            loop.close()

    @property
    def client(self) -> FakeCloudClient:
        if self._client is None:
            from engram_sync_kit.fake_cloud.client import FakeCloudClient  # httpx only for a test's client

            self._client = FakeCloudClient(
                self.base_url, self.ca_file, control_token=self.config.control_token
            )
        return self._client

    def check(self) -> None:
        """Raise FakeCloudInternalError when the fake recorded a bug of its own (and forget them)."""
        self.client.check()

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(stop_event.set)
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> RunningFakeCloud:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        # Like pytest-httpserver's check(): a bug in the fake fails the block that used it.
        try:
            if exc_type is None and self._thread.is_alive():
                self.check()
        finally:
            self.stop()


def start_fake_cloud(config: FakeCloudConfig) -> RunningFakeCloud:
    """Start a fake cloud in a background thread; use it as ``with start_fake_cloud(cfg) as cloud:``."""
    return RunningFakeCloud(config).start()
