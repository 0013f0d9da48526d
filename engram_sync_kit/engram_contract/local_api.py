"""engram's own HTTP API (`engram serve`), where the kit's harness calls it and versions differ.

PATCH and DELETE /observations/{id}: v3 reads `expected_project` from the query string and refuses an
update without a valid one (400 "expected_project must be a valid non-empty project name"), or one that is
not the observation's owner (409 "expected_project does not match observation owner"): handleUpdateObservation
and handleDeleteObservation in internal/server/server.go@d4397781, ErrExpectedProjectRequired and
ErrObservationProjectMismatch in internal/store/store.go@d4397781 (PREDICTED from source; which tag first
shipped it is not established from the source). v1.20.0's handler reads only the JSON body, so the query
parameter changes nothing there (observed: the harness sends it on every run of the real v1.20.0 binary).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

EXPECTED_PROJECT_PARAM: Final = "expected_project"


def observation_path(observation_id: int, project: str) -> str:
    """The path of one observation for PATCH/DELETE, naming its owner as v3 requires. An observation without
    a project gets no parameter: v3 refuses to update it through this route at all (predicted, 400)."""
    path = f"/observations/{observation_id}"
    if project.strip():
        path += f"?{EXPECTED_PROJECT_PARAM}={quote(project, safe='')}"
    return path
