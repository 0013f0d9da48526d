"""Known foreign targets per database, so that a machine with old debt only alarms on NEW targets.

Stored next to the config (baseline.json in the config's directory), keyed by the resolved db path.
Written atomically (tmp file + rename) so a crash never leaves half a baseline.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from canary.errors import CanaryError

BASELINE_FILE_NAME = "baseline.json"
BASELINE_SCHEMA = "engram-canary/baseline/v1"


class BaselineError(CanaryError):
    """The baseline file cannot be read or written."""


class BaselineEntry(BaseModel):
    recorded_at: str
    targets: list[str] = Field(default_factory=list)


class Baseline(BaseModel):
    schema_: str = Field(default=BASELINE_SCHEMA, alias="schema")
    databases: dict[str, BaselineEntry] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}

    def targets_for(self, db_path: Path) -> frozenset[str]:
        entry = self.databases.get(db_key(db_path))
        return frozenset(entry.targets) if entry else frozenset()


def db_key(db_path: Path) -> str:
    return str(db_path.expanduser().resolve())


def baseline_path_for(config_path: Path) -> Path:
    return config_path.parent / BASELINE_FILE_NAME


def load_baseline(path: Path) -> Baseline:
    if not path.exists():
        return Baseline()
    try:
        return Baseline.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as error:
        first = str(error).splitlines()[0]
        raise BaselineError(f"{path}: not a readable canary baseline ({first}); re-record it") from error


def record_baseline(path: Path, db_path: Path, targets: list[str], recorded_at: str) -> Baseline:
    baseline = load_baseline(path)
    baseline.databases[db_key(db_path)] = BaselineEntry(recorded_at=recorded_at, targets=sorted(targets))
    write_atomically(path, baseline.model_dump_json(by_alias=True, indent=2) + "\n")
    return baseline


def write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        raise BaselineError(f"{path}: cannot write ({error.strerror or error})") from error
