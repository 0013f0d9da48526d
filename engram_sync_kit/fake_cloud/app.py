"""The client-facing routes of engram's self-hosted cloud: screen the head, parse, call the model, serialize.

Routing follows Go's ServeMux as the real server uses it: an unknown path answers 404
"404 page not found", a known path with the wrong method 405 with an Allow header. Sync routes check
the bearer token before anything else, then the body size, then what the model checks. All of these are
answered from the request's head (``screen``), before a byte of the body is read, so an unauthenticated
or oversize request costs the fake nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import zlib
from collections import deque
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from engram_sync_kit.engram_contract import envelope, payload_digest
from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_loads
from engram_sync_kit.engram_contract.push_rules import too_large_reason
from engram_sync_kit.fake_cloud import control, protocol, provenance, routes
from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, request_host
from engram_sync_kit.fake_cloud.httpserver import DROP, Drop, Request, RequestHead, Response, warn
from engram_sync_kit.fake_cloud.state import FakeCloudState, JournalItem, Transport, go_quote
from engram_sync_kit.fake_cloud.wire import (
    NOT_FOUND,
    Reply,
    actionable,
    go_quote_char,
    json_response,
    method_not_allowed,
    payload_invalid,
    redirect,
    render,
    text_response,
    too_large,
)

MAX_RECORDED_ERRORS = 1000
CONTROL_BODY_LIMIT = 1024 * 1024


class FakeCloudApp:
    """Owns the state on the event loop, wakes waiters whenever the journal grows, records its own bugs."""

    def __init__(self, state: FakeCloudState, *, control_token: str | None = None) -> None:
        self.state = state
        self.control_token = control_token
        self.journal_grew = asyncio.Condition()
        self.background: set[asyncio.Task[None]] = set()
        self.errors: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDED_ERRORS)
        self.errors_total = 0
        self.parked_waits = 0  # /_fake/wait calls asleep until the journal grows (stats: waiting)

    # ----- what control needs (control.ControlHost) -----

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def record_error(self, where: str, error: BaseException) -> None:
        """A bug in the fake: kept for /_fake/errors (and check()), one line on stderr, never a traceback."""
        import traceback  # only on a bug: not worth its start-up cost

        self.errors_total += 1
        self.errors.append(
            {
                "time": time.time(),
                "where": where,
                "error": f"{type(error).__name__}: {error}"[:2000],
                "traceback": "".join(traceback.format_exception(error))[-8000:],
            }
        )
        warn(f"internal error on {where}: {type(error).__name__}: {str(error)[:200]}")

    def clear_errors(self) -> None:
        self.errors.clear()

    async def notify(self) -> None:
        async with self.journal_grew:
            self.journal_grew.notify_all()

    # ----- requests -----

    async def record(
        self,
        request: Request | RequestHead,
        request_id: str,
        epoch: int,
        transport: Transport,
        status: int,
        items: list[JournalItem] | None = None,
    ) -> None:
        if epoch != self.state.epoch:
            return  # the request began before a reset: it belongs to a journal that no longer exists
        self.state.record(
            request_id=request_id,
            transport=transport,
            method=request.method,
            path=request.path,
            status=status,
            items=items or (),
            host=request_host(request.headers.get("host", "")) or None,
        )
        await self.notify()

    async def screen(self, head: RequestHead) -> Response | None:
        """The answers that need no body: control token, 404, 405, 401 and a declared size over the cap."""
        try:
            if head.path.startswith(control.PREFIX):
                return control.refuse_unauthorized(self.control_token, head)
            cleaned = routes.clean_path(head.raw_path or head.path)
            if cleaned != (head.raw_path or head.path):
                await self.record(head, self.state.new_request_id(), self.state.epoch, "other", 307)
                return redirect(routes.redirect_location(cleaned, head.raw_query), head.method)
            route = routes.match(head.raw_path or head.path, self.state.server_version)
            if route is None:
                await self.record(head, self.state.new_request_id(), self.state.epoch, "other", 404)
                return render(NOT_FOUND)
            if head.method not in route.methods:
                await self.record(head, self.state.new_request_id(), self.state.epoch, "other", 405)
                return method_not_allowed(route.methods)
            refused = self._refused(head, route) or self._unsupported_media(head, route)
            if (
                refused is None
                and route.push
                and not route.provenance
                and (head.content_length or 0) > self.state.max_push_bytes
            ):
                refused = too_large(self.state.max_push_bytes)
            if refused is None:
                return None
            request_id = self.state.new_request_id()
            await self.record(head, request_id, self.state.epoch, route.transport, refused.status)
            return render(refused)
        except Exception as error:
            self.record_error(f"{head.method} {head.path}", error)
            return _internal_error(error)

    def body_limit(self, head: RequestHead) -> int:
        """How much of a body to read: a push past max_push_bytes is answered 413 without the rest."""
        route = routes.match(head.raw_path or head.path, self.state.server_version)
        return self.state.max_push_bytes if route is not None and route.push else CONTROL_BODY_LIMIT

    async def handle(self, request: Request) -> Response | Drop:
        try:
            if request.path.startswith(control.PREFIX):
                return await control.handle(self, request)
            return await self._sync(request)
        except Exception as error:
            self.record_error(f"{request.method} {request.path}", error)
            return _internal_error(error)

    def _unsupported_media(self, request: Request | RequestHead, route: routes.SyncRoute) -> Reply | None:
        """v3 refuses a chunk push whose Content-Type it cannot read before it reads the body (415)."""
        if route is not routes.CHUNK_PUSH or self.state.server_version != "v3":
            return None
        try:
            envelope.names_envelope(request.headers.get("content-type", ""))
        except ValueError as error:
            return actionable(
                415, "repairable", "upgrade_repairable_payload_invalid", f"unsupported push payload: {error}"
            )
        return None

    def _refused(self, request: Request | RequestHead, route: routes.SyncRoute) -> Reply | None:
        if not route.needs_token:
            return None
        denied = self.state.check_bearer(request.headers.get("authorization"))
        return Reply(401, denied) if denied else None

    async def _sync(self, request: Request) -> Response | Drop:
        route = routes.match(request.raw_path or request.path, self.state.server_version)
        epoch = self.state.epoch
        request_id = self.state.new_request_id()
        if route is None:
            await self.record(request, request_id, epoch, "other", 404)
            return render(NOT_FOUND)
        if request.method not in route.methods:
            await self.record(request, request_id, epoch, "other", 405)
            return method_not_allowed(route.methods)
        refused = self._refused(request, route)
        if refused is not None:
            await self.record(request, request_id, epoch, route.transport, refused.status)
            return render(refused)
        if route is routes.HEALTH:
            await self.record(request, request_id, epoch, "other", 200)
            return json_response(200, {"service": "engram-cloud", "status": "ok"})
        if route.provenance:
            return await self._provenance(request, request_id, epoch, route)
        if route is routes.MUTATIONS_PUSH:
            return await self._mutation_push(request, request_id, epoch)
        if route is routes.CHUNK_PUSH:
            return await self._chunk_push(request, request_id, epoch)
        project = request.query.get("project") if route.transport == "chunk" else None
        return await self._simple(request, request_id, epoch, route, project)

    async def _provenance(
        self, request: Request, request_id: str, epoch: int, route: routes.SyncRoute
    ) -> Response | Drop:
        # Go's decoder reads the body as sent: no gzip here, and a read error is a decode error.
        too_large = request.body_too_large or len(request.body) > self.state.max_push_bytes
        body = b"\x00" if request.body_error is not None else request.body
        reply, project = provenance.HANDLERS[route.name](self.state, body, too_large)
        items = [JournalItem(project=project)] if project else []
        return await self._finish(request, request_id, epoch, route.transport, reply, items, None)

    async def _fault(
        self,
        request: Request,
        request_id: str,
        epoch: int,
        route: routes.SyncRoute,
        projects: list[str],
        items: list[JournalItem],
    ) -> tuple[Fault | None, Response | Drop | None]:
        """Apply a scheduled fault; returns the fault and, when it ends the request, what to answer."""
        assert route.fault_route is not None
        host = request_host(request.headers.get("host", ""))
        fault = self.state.take_fault(route.fault_route, projects, host)
        if fault is None:
            return None, None
        if fault.action is FaultAction.LATENCY:
            await asyncio.sleep(fault.latency_ms / 1000)
            if route.push and epoch != self.state.epoch:
                # A reset came while it waited: the push belongs to a cloud that no longer exists, so it
                # stores nothing and gets no answer, as from a server restarted under it.
                return fault, DROP
            return fault, None
        if fault.action is FaultAction.STATUS:
            await self.record(request, request_id, epoch, route.transport, fault.status, items)
            body = {"error": f"fake cloud fault: injected status {fault.status}", "error_code": "fake_fault"}
            return fault, json_response(fault.status, body)
        if fault.action is FaultAction.HANG:
            await self.record(request, request_id, epoch, route.transport, 0, items)
            await asyncio.sleep(fault.seconds)
            return fault, DROP
        return fault, None

    async def _simple(
        self, request: Request, request_id: str, epoch: int, route: routes.SyncRoute, project: str | None
    ) -> Response | Drop:
        projects = [project.strip()] if project else []
        items = [JournalItem(project=project.strip() or None)] if project else []
        fault, early = await self._fault(request, request_id, epoch, route, projects, items)
        if early is not None:
            return early
        if route is routes.MUTATIONS_PULL:
            reply = protocol.pull_mutations(
                self.state, request.query.get("since_seq"), request.query.get("limit")
            )
        elif route is routes.MANIFEST:
            reply = protocol.manifest(self.state, project)
        else:
            reply = protocol.read_chunk(
                self.state, project, routes.last_segment(request.raw_path or request.path)
            )
            if self.state.server_version == "v3" and reply.status == 200 and isinstance(reply.body, bytes):
                reply = _v3_chunk_answer(reply.body, request.headers.get("accept", ""))
        return await self._finish(request, request_id, epoch, route.transport, reply, items, fault)

    async def _finish(
        self,
        request: Request,
        request_id: str,
        epoch: int,
        transport: Transport,
        reply: Reply,
        items: list[JournalItem],
        fault: Fault | None,
    ) -> Response | Drop:
        if fault is not None and fault.action is FaultAction.RESET_AFTER_READ:
            await self.record(request, request_id, epoch, transport, 0, items)
            return DROP
        if (
            fault is not None
            and fault.action is FaultAction.SHORT_ACCEPTED
            and reply.status == 200
            and isinstance(reply.body, dict)
            and "accepted_seqs" in reply.body
        ):
            reply = Reply(200, {**reply.body, "accepted_seqs": reply.body["accepted_seqs"][: fault.keep]})
        if fault is not None and fault.action is FaultAction.DUPLICATE_ROWS and reply.status == 200:
            reply = _rows_twice(reply)
        cut = fault is not None and fault.action is FaultAction.TRUNCATE_BODY
        # A cut answer is journaled as 0, as a reset one is: whatever was stored, the client got no answer.
        await self.record(request, request_id, epoch, transport, 0 if cut else reply.status, items)
        response = render(reply)
        if cut:
            return replace(response, truncate_at=len(response.body) // 2)
        if fault is not None and fault.action is FaultAction.SLOW_BODY:
            return replace(response, trickle_seconds=fault.seconds)
        return response

    def _decoded_body(self, request: Request) -> tuple[bytes | None, str | None]:
        """The body, gunzipped when it is gzip (by header or by its 1f8b magic), or why it is unusable."""
        body = request.body
        is_gzip = request.headers.get("content-encoding", "").lower() == "gzip" or body[:2] == b"\x1f\x8b"
        if not is_gzip or self.state.server_version == "v1.20":  # v1.20 reads every body as sent
            return body, None
        try:
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = inflater.decompress(body, self.state.max_push_bytes + 1)
        except zlib.error as error:
            return None, f"gzip body: {error}"
        if len(data) > self.state.max_push_bytes:
            return None, "too large"
        if not inflater.eof:
            # No trailer: Go's gzip reader reports the cut stream as an unexpected EOF.
            return data, "gzip body: unexpected EOF"
        if inflater.unused_data:
            return None, "gzip body: gzip: invalid header"  # Go reads trailing bytes as a next member
        return data, None

    def _read_json(self, request: Request) -> tuple[Any, str | None, bool]:
        """(value, decode error, too large) like Go's json.Decoder over a MaxBytesReader."""
        if request.body_error is not None:
            return None, request.body_error, False
        if request.body_too_large or len(request.body) > self.state.max_push_bytes:
            return None, None, True
        body, problem = self._decoded_body(request)
        if problem == "too large":
            return None, None, True
        if body is None:
            return None, problem, False
        if problem is not None:
            # A cut gzip stream: whatever JSON it held ends early, which is how Go's decoder sees it.
            return None, "unexpected EOF" if _valid_prefix(body) else problem, False
        text = body.decode("utf-8", "replace")
        stripped = text.strip(" \t\r\n")
        if not stripped:
            return None, "EOF", False
        try:
            value = _decode_first_value(stripped)
        except ContractError as error:
            return None, str(error), False
        except json.JSONDecodeError as error:
            return None, _go_syntax_error(error, stripped, body, "unexpected EOF"), False
        return value, None, False

    async def _mutation_push(self, request: Request, request_id: str, epoch: int) -> Response | Drop:
        body, problem, over = self._read_json(request)
        # Only a body that may hold what Postgres refuses has its payloads read again as the bytes sent.
        raw_body = None
        if problem is None and not over and _may_hold_what_postgres_refuses(request.body):
            raw_body = self._decoded_body(request)[0]
        # Only a scheduled fault needs these before validation.
        projects = _pushed_projects(body) if self.state.faults else []
        items = _mutation_items(body) if self.state.faults else []
        fault, early = await self._fault(request, request_id, epoch, routes.MUTATIONS_PUSH, projects, items)
        if early is not None:
            return early
        if over:
            reply = too_large(self.state.max_push_bytes)
        elif problem:
            reply = Reply(400, f"invalid request body: {problem}")
        else:
            reply, parsed_items = protocol.push_mutations(
                self.state, body, store=_stores(fault), raw_body=raw_body
            )
            items = parsed_items or items
        if not items and reply.status != 200:
            items = _mutation_items(body)
        return await self._finish(request, request_id, epoch, "mutation", reply, items, fault)

    def _read_v3_chunk_push(self, request: Request) -> tuple[Any, str | None, str | None]:
        """(value, 400 reason, 413 reason) as v3's handlePushChunk reads a body: gunzipped by the envelope
        Content-Type or gzip's magic (never Content-Encoding), then json.Unmarshal of all of it."""
        limit = self.state.max_push_bytes
        if request.body_too_large or len(request.body) > limit:
            return None, None, too_large_reason(limit)
        if request.body_error is not None:
            return None, request.body_error, None
        body = request.body
        compressed = envelope.names_envelope(request.headers.get("content-type", ""))
        if compressed or body[:2] == envelope.GZIP_MAGIC:
            if body[:2] != envelope.GZIP_MAGIC or len(body) < 10:
                return None, "open compressed payload: gzip: invalid header", None
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            try:
                data = inflater.decompress(body, limit + 1)
            except zlib.error:
                return None, "decode compressed payload: gzip: invalid header", None
            if len(data) > limit:
                return None, None, f"decoded push payload too large (max {limit} bytes)"
            if not inflater.eof:
                return None, "decode compressed payload: unexpected EOF", None
            if inflater.unused_data:
                return None, "decode compressed payload: gzip: invalid header", None  # a next member
            body = data
        text = body.decode("utf-8", "replace").strip(" \t\r\n")
        if not text:
            return None, "unexpected end of JSON input", None
        try:
            return go_loads(text), None, None
        except ContractError as error:
            return None, str(error), None
        except json.JSONDecodeError as error:
            if error.msg == "Extra data":
                after = text[error.pos :].encode()[0]
                return None, f"invalid character {go_quote_char(after)} after top-level value", None
            return None, _go_syntax_error(error, text, body, "unexpected end of JSON input"), None

    async def _chunk_push(self, request: Request, request_id: str, epoch: int) -> Response | Drop:
        if self.state.server_version == "v3":
            unsupported = self._unsupported_media(request, routes.CHUNK_PUSH)
            if unsupported is not None:
                await self.record(request, request_id, epoch, "chunk", unsupported.status)
                return render(unsupported)
            body, problem, over_reason = self._read_v3_chunk_push(request)
            if problem is not None:
                problem = f"{problem} (content-type: {go_quote(request.headers.get('content-type', ''))})"
            over = over_reason is not None
        else:
            body, problem, over = self._read_json(request)
            over_reason = None
        project = ""
        if isinstance(body, dict) and isinstance(body.get("project"), str):
            project = body["project"].strip()
        project = project or request.query.get("project", "").strip()
        items = [JournalItem(project=project or None)] if project else []
        fault, early = await self._fault(
            request, request_id, epoch, routes.CHUNK_PUSH, [project] if project else [], items
        )
        if early is not None:
            return early
        if over:
            reply = too_large(self.state.max_push_bytes)
            if over_reason is not None:
                reply = actionable(413, "repairable", "upgrade_repairable_payload_too_large", over_reason)
        elif problem:
            reply = payload_invalid(f"invalid push payload: {problem}")
        else:
            reply, parsed_items = protocol.push_chunk(
                self.state,
                body,
                request.query.get("project"),
                store=_stores(fault),
                may_hold_nul=b"\\u0000" in request.body or request.body[:2] == b"\x1f\x8b",
            )
            items = parsed_items or items
        return await self._finish(request, request_id, epoch, "chunk", reply, items, fault)


def _v3_chunk_answer(chunk: bytes, accept: str) -> Reply:
    """handlePullChunk @d4397781: never cached, varies by Accept, the envelope when it is asked for."""
    headers = (("cache-control", "no-store"), ("vary", "Accept"))
    if envelope.accepts_envelope(accept) and len(chunk) <= envelope.MAX_DECODED_BYTES:
        return Reply(200, gzip.compress(chunk, mtime=0), headers, envelope.CONTENT_TYPE)
    return Reply(200, chunk, headers)


def _internal_error(error: BaseException) -> Response:
    return text_response(500, f"fake cloud internal error: {type(error).__name__} (see GET /_fake/errors)")


def _go_syntax_error(error: json.JSONDecodeError, text: str, body: bytes, end_of_input: str) -> str:
    """Go's words for a JSON syntax error in TEXT (BODY's stripped decoding); END_OF_INPUT when the input
    ends inside a value (json.Decoder says "unexpected EOF", json.Unmarshal "unexpected end of JSON input")."""
    if error.pos >= len(text) or error.msg.startswith("Unterminated string"):
        return end_of_input
    if error.pos == 0 and error.msg == "Expecting value":
        first = body.lstrip(b" \t\r\n")[0]  # Go names the byte, not what it decodes to
        return f"invalid character {go_quote_char(first)} looking for beginning of value"
    return f"invalid character at offset {error.pos}: {error.msg}"


def _decode_first_value(text: str) -> Any:
    """The first JSON value of the text; what follows it is ignored, as Go's json.Decoder ignores it."""
    try:
        return go_loads(text)
    except json.JSONDecodeError as error:
        if error.msg != "Extra data":
            raise
        return go_loads(text[: error.pos])


def _may_hold_what_postgres_refuses(body: bytes) -> bool:
    """A \\u0000 or surrogate escape, or bytes that are not UTF-8: what push_rules.insert_refusal reads."""
    if b"\\u0000" in body or b"\\ud" in body or b"\\uD" in body:
        return True
    if body.isascii():
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _valid_prefix(body: bytes) -> bool:
    """Whether a cut stream's text is (the start of) JSON rather than garbage."""
    text = body.decode("utf-8", "replace").strip()
    return not text or text[0] in '{["-0123456789tfn'


def _rows_twice(reply: Reply) -> Reply:
    """A pull answer with every row listed twice: a page's mutations, the manifest's chunks, a chunk's
    sessions, observations, prompts and mutations (its bytes are JSON)."""
    body: Any = reply.body
    if isinstance(body, bytes):
        try:
            body = go_loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, ContractError):
            return reply
        twice = _rows_twice(Reply(reply.status, body, reply.headers, reply.content_type))
        return replace(twice, body=json.dumps(twice.body, separators=(",", ":")).encode())
    if not isinstance(body, dict):
        return reply
    doubled = {key: value * 2 if isinstance(value, list) else value for key, value in body.items()}
    return replace(reply, body=doubled)


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
