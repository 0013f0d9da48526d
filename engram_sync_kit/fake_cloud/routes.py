"""The client-facing routes of engram's cloud server, as data: what the HTTP layer may answer from a
request's head (Go's ServeMux 404/405, the bearer token's 401, a declared size's 413) and what the
handlers need to know about each route. v1.20's routes are served by every server version; the
provenance routes by v2 and v3 (v1.20's mux answers them 404): the newer v2 worker calls them before it
pushes a prompt that carries source_inbox_id (docs/version-reach.md), so the fake's v2 serves them as
v3's handlers do (v2's own handlers are not stored in the reference index: an assumption)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from engram_sync_kit.fake_cloud.faults import Route
from engram_sync_kit.fake_cloud.state import ServerVersion, Transport


@dataclass(frozen=True)
class SyncRoute:
    name: str
    methods: tuple[str, ...]
    transport: Transport
    fault_route: Route | None  # which scheduled faults can hit it; None: none can
    needs_token: bool
    push: bool  # its body is capped by max_push_bytes (413)
    # A v2/v3 provenance route: its handler decides when an oversize body is 413 (some check auth first)
    # and words it, so the head's 413 does not apply; older servers do not route it.
    provenance: bool = False


HEALTH = SyncRoute("health", ("GET", "HEAD"), "other", None, needs_token=False, push=False)
MUTATIONS_PUSH = SyncRoute(
    "mutations_push", ("POST",), "mutation", Route.MUTATIONS_PUSH, needs_token=True, push=True
)
MUTATIONS_PULL = SyncRoute(
    "mutations_pull", ("GET", "HEAD"), "mutation", Route.MUTATIONS_PULL, needs_token=True, push=False
)
CHUNK_PUSH = SyncRoute("chunk_push", ("POST",), "chunk", Route.CHUNK_PUSH, needs_token=True, push=True)
MANIFEST = SyncRoute("manifest", ("GET", "HEAD"), "chunk", Route.CHUNK_PULL, needs_token=True, push=False)
CHUNK_READ = SyncRoute("chunk_read", ("GET", "HEAD"), "chunk", Route.CHUNK_PULL, needs_token=True, push=False)


def _provenance(name: str) -> SyncRoute:
    return SyncRoute(name, ("POST",), "other", None, needs_token=True, push=True, provenance=True)


SESSION_AUTHORITIES = _provenance("session_authorities")
PROMPT_PAIR_CLAIMS = _provenance("prompt_pair_claims")
PROMPT_SOURCE_ATTESTATIONS = _provenance("prompt_source_attestations")
PROMPT_SOURCE_ATTESTATIONS_VERIFY = _provenance("prompt_source_attestations_verify")

SYNC_ROUTES: dict[str, SyncRoute] = {
    "/health": HEALTH,
    "/sync/mutations/push": MUTATIONS_PUSH,
    "/sync/mutations/pull": MUTATIONS_PULL,
    "/sync/push": CHUNK_PUSH,
    "/sync/pull": MANIFEST,
    "/sync/session-authorities": SESSION_AUTHORITIES,
    "/sync/prompt-pair-claims": PROMPT_PAIR_CLAIMS,
    "/sync/prompt-source-attestations": PROMPT_SOURCE_ATTESTATIONS,
    "/sync/prompt-source-attestations/verify": PROMPT_SOURCE_ATTESTATIONS_VERIFY,
}


def match(raw_path: str, version: ServerVersion) -> SyncRoute | None:
    """The route serving the escaped path ``raw_path`` on that server version, like the real ServeMux:
    each segment is unescaped on its own, so "%73ync" is "sync" but "a%2Fb" stays one segment
    ("/sync/pull/{chunkID}" takes it)."""
    segments = [unquote(part) for part in raw_path.split("/")[1:]]
    if not any("/" in segment for segment in segments):
        route = SYNC_ROUTES.get("/" + "/".join(segments))
        if route is not None:
            return None if route.provenance and version == "v1.20" else route
    if len(segments) == 3 and segments[:2] == ["sync", "pull"] and segments[2]:
        return CHUNK_READ
    return None


def last_segment(raw_path: str) -> str:
    """The {chunkID} of /sync/pull/{chunkID}, unescaped."""
    return unquote(raw_path.rsplit("/", 1)[1])


def clean_path(raw_path: str) -> str:
    """Go's ServeMux cleanPath: "." and ".." resolved, repeated slashes merged, a final slash kept. A
    request whose path is not clean is redirected to the clean one."""
    parts: list[str] = []
    for part in raw_path.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    cleaned = "/" + "/".join(parts)
    return cleaned + "/" if raw_path.endswith("/") and cleaned != "/" else cleaned


def redirect_location(cleaned: str, raw_query: str) -> str:
    """The Location Go writes: the clean path escaped again as a path (its "%" too), then the query."""
    escaped = quote(cleaned, safe="/-_.~$&+,:;=@")
    return f"{escaped}?{raw_query}" if raw_query else escaped
