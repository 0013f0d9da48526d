"""The canonical payload digest: how a local journal row is matched to what a cloud holds."""

import contextlib
import hashlib
import json
from typing import Any


def payload_digest(payload: Any) -> str:
    """sha256 of the payload object's sorted, compact JSON; a JSON string payload is decoded first."""
    if isinstance(payload, str):
        with contextlib.suppress(json.JSONDecodeError):
            payload = json.loads(payload)
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()  # a lone \ud800 too
