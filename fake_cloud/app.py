"""The client-facing routes of engram's self-hosted cloud: parse the request, call the model, serialize.

Routing follows Go's ServeMux as the real server uses it: an unknown path answers 404
"404 page not found", a known path with the wrong method 405 with an Allow header. Sync routes check
the bearer token before anything else, then the body size, then what the model checks.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

from fake_cloud import control
from fake_cloud.chunkcodec import go_json
from fake_cloud.httpserver import DROP, Drop, Request, Response, warn
from fake_cloud.models import (
    FakeCloudState,
    Fault,
    FaultAction,
    JournalItem,
    Reply,
    Route,
    Transport,
    payload_digest,
    payload_invalid,
    too_large,
)

TEXT = "text/plain; charset=utf-8"
JSON_DECODER = json.JSONDecoder()
SYNC_ROUTES: dict[str, tuple[str, ...]] = {
    "/health": ("GET", "HEAD"),
    "/sync/pull": ("GET", "HEAD"),
    "/sync/push": ("POST",),
    "/sync/mutations/push": ("POST",),
    "/sync/mutations/pull": ("GET", "HEAD"),
}


def json_response(status: int, body: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    # Go's json.Encoder: sorted keys, compact, HTML-safe escapes, one trailing newline.
    return Response(status, (go_json(body) + "\n").encode(), "application/json", headers or [])


def text_response(status: int, text: str, headers: list[tuple[str, str]] | None = None) -> Response:
    # Go's http.Error.
    return Response(
        status, (text + "\n").encode(), TEXT, [("x-content-type-options", "nosniff"), *(headers or [])]
    )


def render(reply: Reply) -> Response:
    if isinstance(reply.body, bytes):
        return Response(reply.status, reply.body, "application/json")
    if isinstance(reply.body, str):
        return text_response(reply.status, reply.body)
    return json_response(reply.status, reply.body)


class FakeCloudApp:
    """Owns the state on the event loop and wakes waiters whenever the journal grows."""

    def __init__(self, state: FakeCloudState) -> None:
        self.state = state
        self.journal_grew = asyncio.Condition()
        self.background: set[asyncio.Task[None]] = set()

    async def record(
        self,
        request: Request,
        request_id: str,
        transport: Transport,
        status: int,
        items: list[JournalItem] | None = None,
    ) -> None:
        self.state.record(
            request_id=request_id,
            transport=transport,
            method=request.method,
            path=request.path,
            status=status,
            items=items or (),
        )
        async with self.journal_grew:
            self.journal_grew.notify_all()

    async def handle(self, request: Request) -> Response | Drop:
        try:
            if request.path.startswith(control.PREFIX):
                return await control.handle(self, request)
            return await self._sync(request)
        except Exception as error:  # a bug in the fake: answer one line, never a traceback
            warn(f"internal error on {request.method} {request.path}: {type(error).__name__}: {error}")
            return text_response(500, f"fake cloud internal error: {type(error).__name__}")

    async def _sync(self, request: Request) -> Response | Drop:
        path, method = request.path, request.method
        if path.startswith("/sync/pull/") and path.count("/") == 3 and path != "/sync/pull/":
            allowed: tuple[str, ...] = ("GET", "HEAD")
        elif path in SYNC_ROUTES:
            allowed = SYNC_ROUTES[path]
        else:
            request_id = self.state.new_request_id()
            await self.record(request, request_id, "other", 404)
            return text_response(404, "404 page not found")
        request_id = self.state.new_request_id()
        if method not in allowed:
            await self.record(request, request_id, "other", 405)
            return text_response(405, "Method Not Allowed", [("allow", ", ".join(allowed))])
        if path == "/health":
            await self.record(request, request_id, "other", 200)
            return json_response(200, {"service": "engram-cloud", "status": "ok"})
        if path == "/sync/mutations/push":
            return await self._mutation_push(request, request_id)
        if path == "/sync/mutations/pull":
            return await self._simple(request, request_id, "mutation", Route.MUTATIONS_PULL, None)
        if path == "/sync/push":
            return await self._chunk_push(request, request_id)
        return await self._simple(
            request, request_id, "chunk", Route.CHUNK_PULL, request.query.get("project")
        )

    async def _fault(
        self,
        request: Request,
        request_id: str,
        transport: Transport,
        route: Route,
        projects: list[str],
        items: list[JournalItem],
    ) -> tuple[Fault | None, Response | Drop | None]:
        """Apply a scheduled fault; returns the fault and, when it ends the request, what to answer."""
        fault = self.state.take_fault(route, projects)
        if fault is None:
            return None, None
        if fault.action is FaultAction.LATENCY:
            await asyncio.sleep(fault.latency_ms / 1000)
            return fault, None
        if fault.action is FaultAction.STATUS:
            await self.record(request, request_id, transport, fault.status, items)
            body = {"error": f"fake cloud fault: injected status {fault.status}", "error_code": "fake_fault"}
            return fault, json_response(fault.status, body)
        if fault.action is FaultAction.HANG:
            await self.record(request, request_id, transport, 0, items)
            await asyncio.sleep(fault.seconds)
            return fault, DROP
        return fault, None

    async def _simple(
        self, request: Request, request_id: str, transport: Transport, route: Route, project: str | None
    ) -> Response | Drop:
        projects = [project.strip()] if project else []
        items = [JournalItem(project=project.strip() or None)] if project else []
        fault, early = await self._fault(request, request_id, transport, route, projects, items)
        if early is not None:
            return early
        refused = self._refused(request)
        if refused is not None:
            reply = refused
        elif route is Route.MUTATIONS_PULL:
            reply = self.state.pull_mutations(request.query.get("since_seq"), request.query.get("limit"))
        elif request.path == "/sync/pull":
            reply = self.state.manifest(project)
        else:
            reply = self.state.read_chunk(project, request.path.rsplit("/", 1)[1])
        return await self._finish(request, request_id, transport, reply, items, fault)

    def _refused(self, request: Request, too_big: bool = False) -> Reply | None:
        """The 401 for a bad token, else the 413 for an oversize body: the real server's first checks."""
        denied = self.state.check_bearer(request.headers.get("authorization"))
        if denied:
            return Reply(401, denied)
        return too_large(self.state.max_push_bytes) if too_big else None

    async def _finish(
        self,
        request: Request,
        request_id: str,
        transport: Transport,
        reply: Reply,
        items: list[JournalItem],
        fault: Fault | None,
    ) -> Response | Drop:
        if fault is not None and fault.action is FaultAction.RESET_AFTER_READ:
            await self.record(request, request_id, transport, 0, items)
            return DROP
        if (
            fault is not None
            and fault.action is FaultAction.SHORT_ACCEPTED
            and reply.status == 200
            and isinstance(reply.body, dict)
            and "accepted_seqs" in reply.body
        ):
            reply = Reply(200, {**reply.body, "accepted_seqs": reply.body["accepted_seqs"][: fault.keep]})
        await self.record(request, request_id, transport, reply.status, items)
        return render(reply)

    def _decoded_body(self, request: Request) -> tuple[bytes | None, str | None]:
        """The body, gunzipped when it is gzip (by header or by its 1f8b magic), or why it is unusable."""
        body = request.body
        is_gzip = request.headers.get("content-encoding", "").lower() == "gzip" or body[:2] == b"\x1f\x8b"
        if not is_gzip:
            return body, None
        try:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = inflater.decompress(body, self.state.max_push_bytes + 1)
        except zlib.error as error:
            return None, f"gzip body: {error}"
        if len(data) > self.state.max_push_bytes:
            return None, "too large"
        return data, None

    def _read_json(self, request: Request) -> tuple[Any, str | None, bool]:
        """(value, decode error, too large) like Go's json.Decoder over a MaxBytesReader."""
        if request.body_too_large or len(request.body) > self.state.max_push_bytes:
            return None, None, True
        body, problem = self._decoded_body(request)
        if problem == "too large":
            return None, None, True
        if body is None:
            return None, problem, False
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = body.decode("utf-8", "replace")
        stripped = text.lstrip(" \t\r\n")
        if not stripped:
            return None, "EOF", False
        try:
            value, _ = JSON_DECODER.raw_decode(stripped)
        except json.JSONDecodeError as error:
            if error.pos >= len(stripped) or error.msg.startswith("Unterminated string"):
                return None, "unexpected EOF", False  # Go's wording when the input ends inside a value
            return None, f"invalid character at offset {error.pos}: {error.msg}", False
        except RecursionError:
            return None, "exceeded max depth", False
        return value, None, False

    async def _mutation_push(self, request: Request, request_id: str) -> Response | Drop:
        body, problem, over = self._read_json(request)
        # Only a scheduled fault needs these before validation.
        projects = _pushed_projects(body) if self.state.faults else []
        items = _mutation_items(body) if self.state.faults else []
        fault, early = await self._fault(
            request, request_id, "mutation", Route.MUTATIONS_PUSH, projects, items
        )
        if early is not None:
            return early
        refused = self._refused(request, over)
        if refused is not None:
            reply = refused
        elif problem:
            reply = Reply(400, f"invalid request body: {problem}")
        else:
            reply, parsed_items = self.state.push_mutations(body, store=_stores(fault))
            items = parsed_items or items
        if not items and reply.status != 200:
            items = _mutation_items(body)
        return await self._finish(request, request_id, "mutation", reply, items, fault)

    async def _chunk_push(self, request: Request, request_id: str) -> Response | Drop:
        body, problem, over = self._read_json(request)
        project = ""
        if isinstance(body, dict) and isinstance(body.get("project"), str):
            project = body["project"].strip()
        project = project or request.query.get("project", "").strip()
        items = [JournalItem(project=project or None)] if project else []
        fault, early = await self._fault(
            request, request_id, "chunk", Route.CHUNK_PUSH, [project] if project else [], items
        )
        if early is not None:
            return early
        refused = self._refused(request, over)
        if refused is not None:
            reply = refused
        elif problem:
            reply = payload_invalid(f"invalid push payload: {problem}")
        else:
            reply, parsed_items = self.state.push_chunk(
                body, request.query.get("project"), store=_stores(fault)
            )
            items = parsed_items or items
        return await self._finish(request, request_id, "chunk", reply, items, fault)


def _stores(fault: Fault | None) -> bool:
    return fault is None or fault.action is not FaultAction.ACK_WITHOUT_STORE


def _pushed_projects(body: Any) -> list[str]:
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list):
        return []
    names = [raw.get("project") for raw in body["entries"] if isinstance(raw, dict)]
    return sorted({name for name in names if isinstance(name, str) and name})


def _mutation_items(body: Any) -> list[JournalItem]:
    """Best-effort journal items from a push body, before it is validated."""
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list):
        return []
    items = []
    for raw in body["entries"]:
        if not isinstance(raw, dict):
            items.append(JournalItem())
            continue

        def text(name: str, raw: dict[str, Any] = raw) -> str | None:
            value = raw.get(name)
            return value if isinstance(value, str) and value else None

        payload = raw.get("payload")
        items.append(
            JournalItem(
                project=text("project"),
                entity=text("entity"),
                entity_key=text("entity_key"),
                op=text("op"),
                payload_digest=None if payload is None else payload_digest(payload),
            )
        )
    return items
