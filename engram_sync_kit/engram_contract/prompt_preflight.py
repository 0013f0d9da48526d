"""The v2/v3 autosync worker's prompt-provenance preflight, predicted from source (no v2/v3 binary builds
here; docs/version-reach.md, "The worker").

Read in internal/cloud/autosync/manager.go of module /v2 (index file id 71019478362, 40,311 characters,
commit not named by the index; the /v3 module's version, file id 70742347905, has the same preflight)
and the /v3 manager_test.go (file id 70829266962, TestManagerCycleKeyedPromptBlockAllowsInboundProgress):

- A pending prompt whose payload carries a non-empty `source_inbox_id` is preflighted before its push:
  its journal identity and local origin are checked, then the cloud is asked to register the session's
  authority (POST /sync/session-authorities) and to claim the (session, inbox id) pair
  (POST /sync/prompt-pair-claims). Other rows of the page are pushed and acked as usual.
- A local denial (identity, origin or session owner unverified) sends nothing for that prompt: it stays
  pending, sync_state gets reason `prompt_provenance_blocked` (lifecycle degraded, MarkSyncBlocked), and
  the pull still runs (MarkSyncBlockedAfterSuccess then records the success time).
- A failed call (any non-200, or a 200 without {"status":"ok"}) is an uncertain preflight, not a block:
  the prompt stays pending, the pull is skipped, and sync_state records a failure with backoff whose
  reason is the transport's (401 `auth_required`, 403 `policy_forbidden`, otherwise `transport_failed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

PROMPT_PROVENANCE_BLOCKED: Final = "prompt_provenance_blocked"
SERVER_UNSUPPORTED: Final = "server_unsupported"
SESSION_AUTHORITY_UNAVAILABLE: Final = "session_authority_unavailable"
SESSION_AUTHORITIES_PATH: Final = "/sync/session-authorities"
PROMPT_PAIR_CLAIMS_PATH: Final = "/sync/prompt-pair-claims"


@dataclass(frozen=True)
class KeyedPrompt:
    sync_id: str
    session_id: str
    source_inbox_id: str
    project: str


@dataclass(frozen=True)
class LocalOrigin:
    """What the store answers: the prompt's creation identity (LocalPromptCreationIdentity; None when not
    eligible) and its session's owner project (LocalSessionProvenance; '' when none)."""

    creation: KeyedPrompt | None
    session_owner: str


def keyed_prompt(entity: str, payload: str) -> KeyedPrompt | None:
    """The identity of a prompt row that needs the preflight, or None (not a prompt, no inbox id, or a
    payload the worker fails before any preflight: not a JSON object of strings ('invalid identity'),
    or a sync_id/session_id/project that does not match the row ('invalid journal identity'); those
    are push failures with backoff, not blocks, and are not modelled here)."""
    if entity != "prompt":
        return None
    try:
        fields: Any = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    names = ("sync_id", "session_id", "source_inbox_id", "project")
    values = [fields.get(name) or "" for name in names]
    if not all(isinstance(value, str) for value in values) or not values[2]:
        return None
    return KeyedPrompt(*(str(value) for value in values))


def local_denial(prompt: KeyedPrompt, entity_key: str, row_project: str, origin: LocalOrigin) -> str | None:
    """The worker's promptPreflightError text, or None when the prompt may go to the cloud."""
    if not all((prompt.sync_id, prompt.session_id, prompt.source_inbox_id, prompt.project)) or (
        prompt.sync_id != entity_key or prompt.project != row_project
    ):
        return "unverified keyed prompt mutation identity"
    if origin.creation != prompt:
        return "unverified keyed prompt origin"
    if not origin.session_owner:
        return "unverified local session owner"
    return None


def provenance_error_code(path: str, status: int, body: bytes) -> str:
    """The client's HTTPStatusError.ErrorCode for a refused provenance call: a 404 on the registration is
    always `server_unsupported`; on the claim a 404 keeps the JSON `error_code` the server sent (an old
    server's '404 page not found' has none, so `server_unsupported`); other statuses carry none."""
    if status != 404:
        return ""
    if path == SESSION_AUTHORITIES_PATH:
        return SERVER_UNSUPPORTED
    try:
        code = json.loads(body).get("error_code")
    except (ValueError, AttributeError):
        code = None
    return code if isinstance(code, str) and code else SERVER_UNSUPPORTED


def confirmed(status: int, body: bytes) -> bool:
    """Whether a provenance call succeeded: 200 and {"status":"ok"} (an empty body, a pending status or a
    login page are refused: TestMutationProvenanceRejectsUnverifiedSuccess)."""
    if status != 200:
        return False
    try:
        return bool(json.loads(body).get("status") == "ok")
    except (ValueError, AttributeError):
        return False


def remote_failure_reason(status: int) -> str:
    """classifyTransportError for a failed call (the HTTP status error is assumed to report 401 as an
    auth failure and 403 as a policy failure, as the push transport's does)."""
    return {401: "auth_required", 403: "policy_forbidden"}.get(status, "transport_failed")
