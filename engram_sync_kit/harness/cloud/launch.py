"""A scenario's fake cloud: launched as a local process, a container or (tests) in this process, or an
already-running one attached with a clean journal and the scenario's allowlist."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from engram_sync_kit.harness.cloud.image import ensure_image
from engram_sync_kit.harness.errors import HarnessError

CloudMode = Literal["process", "docker", "inprocess"]

# Which real cloud server the harness's fake answers as: the one the engram it runs (v1.20) talks to.
CLOUD_SERVER_VERSION: Final = "v1.20"


@dataclass(frozen=True)
class CloudTarget:
    """An already-running fake cloud (`run --cloud-url`), local or remote; scenarios take turns on it."""

    url: str
    token: str | None
    ca_file: Path | None = None
    control_token: str | None = None


class CloudHandle:
    """The scenario's own fake cloud, as a local process, a container or (tests) in this process."""

    def __init__(
        self,
        mode: CloudMode,
        token: str | None,
        allowed_projects: list[str],
        log_path: Path,
        target: CloudTarget | None = None,
        *,
        tls: bool = False,
    ) -> None:
        # the fake cloud's code loads only for a scenario that runs one
        from engram_sync_kit.fake_cloud.client import FakeCloudClient

        self.mode = mode
        self.token = target.token if target is not None else token
        self.ca_file = target.ca_file if target is not None else None
        self.log_path = log_path
        self._stop: Callable[[], object] = lambda: None
        if target is None:
            if tls:
                self.ca_file = log_path.parent / "fake-cloud-ca" / "ca.pem"
                self.ca_file.parent.mkdir(parents=True, exist_ok=True)
            self.base_url = self._start(mode, token, allowed_projects, log_path)
            self.client = FakeCloudClient(self.base_url, self.ca_file)
        else:
            self.base_url = target.url.rstrip("/")
            self.client = FakeCloudClient(self.base_url, self.ca_file, control_token=target.control_token)
            self._attach(token, allowed_projects)

    def _attach(self, token: str | None, allowed: list[str]) -> None:
        """Make a running cloud this scenario's: same auth kind, a clean journal, the scenario's allowlist."""
        # the fake cloud's code loads only for a scenario that runs one
        from engram_sync_kit.fake_cloud.errors import FakeCloudError

        if (token is None) != (self.token is None):
            wanted = "no auth" if token is None else "a token"
            raise HarnessError(
                f"the scenario needs a cloud with {wanted}, and the cloud at {self.base_url} "
                f"{'requires a token' if self.token else 'has no auth'}; run it with --cloud process"
            )
        try:
            self.client.reset()
            self.client.set_allowlist(allowed)
        except FakeCloudError as error:
            self.client.close()
            raise HarnessError(f"--cloud-url {self.base_url}: {error}") from None

    def _start(self, mode: CloudMode, token: str | None, allowed: list[str], log_path: Path) -> str:
        serve_args = [
            "--port",
            "0",
            *(["--token", token] if token else ["--insecure-no-auth"]),
            # The fake answers as the newest server unless told; the harness drives engram v1.20.
            *("--server-version", CLOUD_SERVER_VERSION),
        ]
        allowed_text = ",".join(allowed) if allowed != ["*"] else "*"
        ca_file = self.ca_file
        if mode == "inprocess":
            # asyncio server, h11
            from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

            config = FakeCloudConfig(
                token=token,
                allowed_projects=tuple(allowed),
                insecure_no_auth=token is None,
                server_version=CLOUD_SERVER_VERSION,
                tls=ca_file is not None,
                ca_out=ca_file,
            )
            manager = start_fake_cloud(config)
            cloud = manager.__enter__()
            self._stop = lambda: manager.__exit__(None, None, None)
            return str(cloud.base_url)
        if mode == "process":
            tls_args = ["--tls", "--ca-out", str(ca_file)] if ca_file else []
            return self._start_process(
                None, [*serve_args, *tls_args, "--allowed-projects", allowed_text], log_path
            )
        image = ensure_image()
        # The image's HEALTHCHECK probes its fixed port 8080; this server picks a free one instead.
        launcher = ["docker", "run", "--rm", "-i", "--network", "host", "--no-healthcheck"]
        tls_args = []
        if ca_file is not None:  # the container writes its CA into a directory of this scenario
            launcher += ["-v", f"{ca_file.parent.absolute()}:/run/engram-fake-cloud-ca"]
            tls_args = ["--tls", "--ca-out", f"/run/engram-fake-cloud-ca/{ca_file.name}"]
        launcher += [image, "engram-fake-cloud"]
        serve_args = [*serve_args, *tls_args, "--host", "127.0.0.1", "--allowed-projects", allowed_text]
        return self._start_process(launcher, serve_args, log_path)

    def _start_process(self, launcher: list[str] | None, serve_args: list[str], log_path: Path) -> str:
        # the fake cloud's code loads only for a scenario that runs one
        from engram_sync_kit.fake_cloud.errors import FakeCloudError
        from engram_sync_kit.fake_cloud.process import FakeCloudProcess

        process = FakeCloudProcess(serve_args, launcher=launcher, stderr_log=log_path, start_timeout=60.0)
        try:
            process.start()
        except FakeCloudError as error:
            # docker run's own error spans lines ("See 'docker run --help'."): the first one, and the log.
            first = next((line.strip() for line in str(error).splitlines() if line.strip()), "no output")
            raise HarnessError(f"the fake cloud did not start: {first} (its stderr: {log_path})") from error
        self._stop = process.stop
        return process.base_url

    def close(self) -> None:
        try:
            self.client.check()  # a bug the fake recorded fails the run as the fake's, never as engram's
        finally:
            self._stop()
