"""The client-facing routes of engram v1.20's cloud server, as data: what the HTTP layer may answer from
a request's head (Go's ServeMux 404/405, the bearer token's 401, a declared size's 413) and what the
handlers need to know about each route."""

from __future__ import annotations

from dataclasses import dataclass

from fake_cloud.faults import Route
from fake_cloud.state import Transport


@dataclass(frozen=True)
class SyncRoute:
    name: str
    methods: tuple[str, ...]
    transport: Transport
    fault_route: Route | None  # which scheduled faults can hit it; None: none can
    needs_token: bool
    push: bool  # its body is capped by max_push_bytes (413)


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

SYNC_ROUTES: dict[str, SyncRoute] = {
    "/health": HEALTH,
    "/sync/mutations/push": MUTATIONS_PUSH,
    "/sync/mutations/pull": MUTATIONS_PULL,
    "/sync/push": CHUNK_PUSH,
    "/sync/pull": MANIFEST,
}


def match(path: str) -> SyncRoute | None:
    """The route serving ``path``, like the real ServeMux ("/sync/pull/{chunkID}" is one segment)."""
    route = SYNC_ROUTES.get(path)
    if route is not None:
        return route
    if path.startswith("/sync/pull/") and path.count("/") == 3 and path != "/sync/pull/":
        return CHUNK_READ
    return None
