"""One isolated engram world: its own ENGRAM_DATA_DIR and HOME, and a way to run the real binary in it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engram_sync_kit.engram_contract import children
from engram_sync_kit.harness.process_env import environment_snapshot

# engram checks for updates on every command; with no route to the internet that only adds a line
# of noise on stderr, which callers strip before judging what engram printed.
UPDATE_CHECK_NOISE = "Could not check for updates"

# Variables of the caller's own engram setup that must never leak into an isolated world.
_ENGRAM_VARIABLES = (
    "ENGRAM_DATA_DIR",
    "ENGRAM_PROJECT",
    "ENGRAM_PORT",
    "ENGRAM_CLOUD_SERVER",
    "ENGRAM_CLOUD_TOKEN",
    "ENGRAM_CLOUD_AUTOSYNC",
    "ENGRAM_HTTP_TOKEN",
)


@dataclass
class EngramEnvironment:
    binary: Path
    root: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / "engram-data"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "engram.db"

    def prepare(self) -> EngramEnvironment:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        return self

    def env(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        base = {key: value for key, value in environment_snapshot().items() if key not in _ENGRAM_VARIABLES}
        base.update(
            {
                "ENGRAM_DATA_DIR": str(self.data_dir.resolve()),
                "HOME": str(self.home.resolve()),
                "GIT_CONFIG_NOSYSTEM": "1",
            }
        )
        base.update(self.extra_env)
        if overrides:
            base.update(overrides)
        return base

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        input_text: str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        return children.run(
            [str(self.binary), *args],
            cwd=cwd or self.home,
            env=self.env(env),
            input_text=input_text,
            timeout=timeout,
        )


def meaningful_stderr(stderr: str) -> str:
    """engram's stderr without the offline update-check noise."""
    kept = [line for line in stderr.splitlines() if line.strip() and UPDATE_CHECK_NOISE not in line]
    return "\n".join(kept)
