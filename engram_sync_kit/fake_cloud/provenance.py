"""engram v3's prompt-provenance routes, predicted from source (never observed: no v3 binary builds here).

Read in Gentleman-Programming/engram's v3 cloud server (module ``engram/v3``): the routes are registered
in internal/cloud/cloudserver/cloudserver.go @d4397781; the three handlers live in cloudserver files the
reference index names only by content (session authority: file id 70376908309; prompt pair claim:
70242872058; attestation and its /verify: 70549957305). Each function below follows its handler's
validation order step by step, with the statuses and texts it writes (``http.Error`` text, or JSON).
`--server-version v2` serves the same handlers: the newer v2 worker calls register and claim (manager.go,
module /v2, index file id 71019478362), and v2's own handlers are not stored (an assumption).

The fake models the server `engram cloud serve` runs with one legacy bearer token (and its project
allowlist), the same server the v1.20 routes model: a legacy token resolves to no principal, so the
attestation routes, which need a human principal, always answer 401 here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_loads
from engram_sync_kit.engram_contract.names import normalize_project
from engram_sync_kit.fake_cloud.state import FakeCloudState
from engram_sync_kit.fake_cloud.wire import Reply

OK = Reply(200, {"status": "ok"})
AUTHENTICATION_UNAVAILABLE = Reply(401, "authentication unavailable")
SESSION_AUTHORITY_UNAVAILABLE = Reply(
    404, {"error": "session authority unavailable", "error_code": "session_authority_unavailable"}
)
AUTHORITY_FIELDS = ("session_id", "project")
CLAIM_FIELDS = ("session_id", "source_inbox_id", "sync_id", "owner_project", "project")

_RAW_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\r\n"
INT64 = (-(2**63), 2**63 - 1)


class _Invalid(Exception):
    """The body is not what Go's json.Decoder (DisallowUnknownFields, then a second Decode) accepts."""


def decode_struct(body: bytes, fields: tuple[str, ...], int_fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """The struct Go would decode: one JSON value, then only whitespace (the handlers' second Decode must
    be io.EOF). Keys match field names case-insensitively; an unknown key, a wrong type or a value Go's
    decoder refuses (NaN, depth, ...) raises _Invalid. null leaves a field at its zero value."""
    text = body.decode("utf-8", "replace")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    if start == len(text):
        raise _Invalid("EOF")
    try:
        _, end = _RAW_DECODER.raw_decode(text, start)
        if text[end:].strip(_WHITESPACE):
            raise _Invalid("a second value, or garbage, after the first")
        value = go_loads(text[start:end])
    except (ValueError, ContractError) as error:
        # ValueError: JSON syntax, and also a number too long for int() (every field that could hold it
        # is a string or an int64, so Go refuses it as well).
        raise _Invalid(str(error)) from None
    out: dict[str, Any] = {name: 0 if name in int_fields else "" for name in (*fields, *int_fields)}
    if value is None:
        return out
    if not isinstance(value, dict):
        raise _Invalid("not an object")
    by_fold = {name.casefold(): name for name in (*fields, *int_fields)}
    for key, item in value.items():
        name = key if key in out else by_fold.get(key.casefold())
        if name is None:
            raise _Invalid(f"json: unknown field {key!r}")
        if item is None:
            continue
        if name in int_fields:
            if type(item) is not int or not INT64[0] <= item <= INT64[1]:
                raise _Invalid(f"{name}: not an int64")
        elif not isinstance(item, str):
            raise _Invalid(f"{name}: not a string")
        out[name] = item
    return out


def register_session_authority(
    state: FakeCloudState, body: bytes, too_large: bool
) -> tuple[Reply, str | None]:
    """POST /sync/session-authorities: decode, require both fields, normalize, auth, scope, store."""
    if too_large:
        return Reply(413, "session authority request too large"), None
    try:
        payload = decode_struct(body, AUTHORITY_FIELDS)
    except _Invalid:
        return Reply(400, "invalid session authority request"), None
    session_id, project = payload["session_id"].strip(), payload["project"].strip()
    if not session_id or not project:
        return Reply(400, "session_id and project are required"), None
    project = normalize_project(project)
    if not project:
        return Reply(400, "project is required"), None
    if state.token is None:  # no authenticator and no principal: the insecure mode writes nothing
        return AUTHENTICATION_UNAVAILABLE, project
    denied = state.scope_denied(project)
    if denied is not None:
        return denied, project
    owner = state.session_authorities.get(session_id)
    if owner is not None and owner != project:
        return Reply(409, "session authority conflict"), project
    state.register_session_authority(session_id, project)
    return OK, project


def claim_prompt_pair(state: FakeCloudState, body: bytes, too_large: bool) -> tuple[Reply, str | None]:
    """POST /sync/prompt-pair-claims: auth first (before the body), then decode, require, normalize,
    both projects' grants (before the session lookup), the session's authority, the claim."""
    if state.token is None:
        return AUTHENTICATION_UNAVAILABLE, None
    if too_large:
        return Reply(413, "prompt pair claim request too large"), None
    try:
        payload = decode_struct(body, CLAIM_FIELDS)
    except _Invalid:
        return Reply(400, "invalid prompt pair claim request"), None
    session_id, inbox_id, sync_id, owner, project = (payload[name].strip() for name in CLAIM_FIELDS)
    if not (session_id and inbox_id and sync_id and owner and project):
        return Reply(
            400, "session_id, source_inbox_id, sync_id, owner_project and project are required"
        ), None
    owner, project = normalize_project(owner), normalize_project(project)
    if not owner or not project:
        return Reply(400, "owner_project and project are required"), None
    denied = state.scope_denied(owner) or state.scope_denied(project)
    if denied is not None:
        return denied, project
    if state.session_authorities.get(session_id) != owner:
        return SESSION_AUTHORITY_UNAVAILABLE, project
    if not state.claim_prompt_pair(session_id, inbox_id, sync_id, project):
        return Reply(409, "prompt pair claim conflict"), project
    return OK, project


def attest_prompt_source(state: FakeCloudState, body: bytes, too_large: bool) -> tuple[Reply, str | None]:
    """POST /sync/prompt-source-attestations: a human principal first; a legacy token has none."""
    return Reply(401, "human authentication required"), None


def verify_prompt_source_attestation(
    state: FakeCloudState, body: bytes, too_large: bool
) -> tuple[Reply, str | None]:
    """POST /sync/prompt-source-attestations/verify: a principal first; a legacy token has none."""
    return Reply(401, "authentication required"), None


HANDLERS: dict[str, Callable[[FakeCloudState, bytes, bool], tuple[Reply, str | None]]] = {
    "session_authorities": register_session_authority,
    "prompt_pair_claims": claim_prompt_pair,
    "prompt_source_attestations": attest_prompt_source,
    "prompt_source_attestations_verify": verify_prompt_source_attestation,
}
