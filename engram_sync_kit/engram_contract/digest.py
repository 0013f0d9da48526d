"""The canonical payload digest: how a local journal row is matched to what a cloud holds."""

import contextlib
import hashlib
import json
from typing import Any


def decoded_payload(payload: Any) -> Any:
    """A journal payload as an object: JSON text is decoded; anything else, or text that does not decode
    (bad JSON, nesting past the interpreter's stack, an integer past 4,300 digits), is as given."""
    if isinstance(payload, str):
        with contextlib.suppress(ValueError, RecursionError):
            return json.loads(payload)
    return payload


def carries_fields(state: Any, local: Any, *, ignoring: frozenset[str] = frozenset()) -> bool:
    """An entity's current state delivers a local upsert when it holds every field the row had
    (more fields are fine); `ignoring` names fields a cloud may rewrite, such as a normalized project."""
    if not isinstance(state, dict) or not isinstance(local, dict):
        return False
    # A field the state lacks held Go's zero value when the exporter's omitempty dropped it: v1.20's chunk
    # carries a delete without the journal row's `revision_count: 0` and `duplicate_count: 0`.
    return all(
        state.get(name) == value if name in state else value in GO_ZEROS
        for name, value in local.items()
        if name not in ignoring
    )


GO_ZEROS: tuple[Any, ...] = (0, "", None)


def payload_digest(payload: Any) -> str:
    """sha256 of the payload object's sorted, compact JSON; a JSON string payload is decoded first."""
    text = json.dumps(decoded_payload(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # a lone \ud800 too
