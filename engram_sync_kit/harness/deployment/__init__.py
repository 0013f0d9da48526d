"""A reproducible messy engram deployment, shaped like the one measured in the design (issue #1013).

The real engram binary creates the file (`engram cloud enroll` runs engram's own migrations and
writes the enrollment rows). Everything after that is a SIMULATION OF LEGACY DATA: three months of
sessions, observations, prompts, relations and their sync journal are written straight into engram's
tables, shaped like engram v1.20's own writes (store.go: enqueueSyncMutationTx, the sync*Payload
structs, refreshProjectSyncStateTx). Same spec and seed, same rows, byte for byte.

The package follows the seams of that work: spec (what to generate), naming (seeded names and texts),
records (engram's time text, Go's JSON, the journal), history (the three months drawn from the seed),
sequencing (seqs, acks, sync_state), workspace (the home dir and its git repositories), fill (engram
creates the file, then the rows go in) and digest (the determinism proof).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from engram_sync_kit.engram_contract import TELEMETRY_ENTITIES
from engram_sync_kit.harness.deployment.digest import canonical_digest
from engram_sync_kit.harness.deployment.fill import enroll, fill
from engram_sync_kit.harness.deployment.history import History
from engram_sync_kit.harness.deployment.records import stamp, to_text
from engram_sync_kit.harness.deployment.sequencing import FORBIDDEN_MESSAGE, sequence
from engram_sync_kit.harness.deployment.spec import (
    MAX_SCALE,
    REFERENCE_TIME,
    DeploymentError,
    DeploymentSpec,
    DeploymentSummary,
    KeyVolume,
)
from engram_sync_kit.harness.deployment.workspace import check_workspace, materialize

__all__ = [
    "FORBIDDEN_MESSAGE",
    "MAX_SCALE",
    "REFERENCE_TIME",
    "DeploymentError",
    "DeploymentSpec",
    "DeploymentSummary",
    "KeyVolume",
    "canonical_digest",
    "generate",
    "stamp",
]


def generate(
    spec: DeploymentSpec,
    seed: int,
    out: Path,
    engram_binary: Path,
    *,
    with_digest: bool = False,
    workspace: Path | None = None,
) -> DeploymentSummary:
    """Create `out` with the real engram, fill it with the simulated legacy history, move it into place.

    `with_digest` adds the canonical sha256 of every row (about 9 s per million mutation rows).
    `workspace` puts the home dir under that directory and creates it: every repository the sessions
    worked in (enrolled, unenrolled, the 403 one) becomes a real git repository, so git-root derivation
    (engram's and the design's) sees what the measured machine saw. Rows then depend on its path.
    """
    began = time.perf_counter()
    out = out.expanduser()
    if out.exists():
        raise DeploymentError(f"{out}: already exists; remove it or choose another --out")
    if not out.parent.is_dir():
        raise DeploymentError(f"{out.parent}: no such directory for --out")
    if not engram_binary.is_file():
        raise DeploymentError(f"{engram_binary}: no engram binary there (see: engram-harness engram path)")
    engram_binary = engram_binary.resolve()
    if workspace is not None:
        check_workspace(workspace)
    history = History(spec, seed, workspace)
    history.build()
    if workspace is not None:
        materialize(history)
    rows = sequence(history)
    try:
        workdir = Path(tempfile.mkdtemp(prefix=".make-deployment-", dir=out.parent))
    except OSError as error:
        raise DeploymentError(
            f"{out.parent}: cannot create the deployment there ({error.strerror})"
        ) from error
    try:
        db_path = enroll(engram_binary, workdir, history.enrolled)
        fill(db_path, history, rows)
        for leftover in ("-wal", "-shm"):
            if Path(f"{db_path}{leftover}").exists():
                raise DeploymentError(f"{db_path}{leftover} was left behind; the file is not complete")
        digest = canonical_digest(db_path) if with_digest else None
        os.replace(db_path, out)
    except sqlite3.Error as error:
        raise DeploymentError(f"{out}: could not fill the engram database ({error})") from error
    except OSError as error:
        raise DeploymentError(f"{out}: could not write the deployment ({error.strerror})") from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return DeploymentSummary(
        path=str(out),
        seed=seed,
        scale=spec.scale,
        reference_time=to_text(spec.reference_time),
        engram_binary=str(engram_binary),
        enrolled_projects=list(history.enrolled),
        designated_project=history.designated_project,
        designated_directory=history.designated_directory,
        home_key=history.user,
        phantom_keys=[plan.key for plan in history.plans],
        forbidden_key=history.forbidden_key,
        sessions=len(history.sessions),
        prompts=len(history.prompts),
        observations=len(history.observations),
        relations=len(history.relations),
        mutation_rows=len(rows.mutations),
        max_seq=rows.max_seq,
        stuck_rows=len(rows.stuck),
        stuck_telemetry=rows.count_stuck(TELEMETRY_ENTITIES),
        per_project_rows=rows.per_project_rows,
        home_sessions=spec.home.sessions,
        designated_sessions=spec.designated_sessions,
        seconds=round(time.perf_counter() - began, 3),
        digest=digest,
    )
