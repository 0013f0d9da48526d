"""The reserved control API under /_fake/: readiness, reset, journal, wait, switches, faults and errors.

Control requests are not journaled. They need no token on loopback; a fake started with a control token
(required for any non-loopback bind) answers 401 to a control request without ``Authorization: Bearer
<control token>``, before reading its body. Control sees the app only through ``ControlHost``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, Protocol

from engram_sync_kit.engram_contract.errors import ContractError
from engram_sync_kit.engram_contract.gojson import go_loads
from engram_sync_kit.fake_cloud.faults import Fault, InvalidControlRequest
from engram_sync_kit.fake_cloud.httpserver import Request, RequestHead, Response, bearer_matches
from engram_sync_kit.fake_cloud.state import (
    MATCH_FIELDS,
    RECEIVED_MATCH_FIELDS,
    FakeCloudState,
    JournalEntry,
    ReceivedMutation,
)

PREFIX = "/_fake/"
MAX_WAIT_SECONDS = 600.0

# what a /_fake/wait counts, and what its "match" names, by its "of"
_WHAT = {"journal": ("journal entries", "journal"), "received": ("received mutations", "stored mutation")}

ROUTES: dict[str, tuple[str, ...]] = {
    "ready": ("GET",),
    "reset": ("POST",),
    "journal": ("GET",),
    "wait": ("POST",),
    "received": ("GET",),
    "allowlist": ("GET", "PUT"),
    "pause": ("PUT",),
    "faults": ("GET", "POST", "DELETE"),
    "errors": ("GET", "DELETE"),
    "stats": ("GET",),
}


class ControlHost(Protocol):
    """The narrow view of the app that control needs."""

    state: FakeCloudState
    journal_grew: asyncio.Condition
    errors: deque[dict[str, Any]]
    errors_total: int
    parked_waits: int

    def spawn(self, work: Coroutine[Any, Any, None]) -> None: ...

    def clear_errors(self) -> None: ...


def _json(status: int, body: Any) -> Response:
    # The control API is ours, not engram's: plain compact JSON is enough and much faster than Go's form.
    return Response(status, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


def _bad(message: str) -> Response:
    return _json(400, {"error": message})


def refuse_unauthorized(control_token: str | None, head: RequestHead) -> Response | None:
    """401 for a control request without the control token, when the fake has one."""
    if control_token is None:
        return None
    sent = head.headers.get("authorization", "").strip()
    if bearer_matches(sent, f"Bearer {control_token}"):
        return None
    return _json(401, {"error": "the control API needs 'Authorization: Bearer <control token>'"})


def _body(request: Request) -> Any:
    if request.body_too_large:
        raise InvalidControlRequest(f"{request.path}: body is larger than the push limit")
    if request.body_error is not None:
        raise InvalidControlRequest(f"{request.path}: body cannot be read ({request.body_error})")
    text = request.body.decode("utf-8", "replace").strip()
    if not text:
        return {}
    try:
        return go_loads(text)
    except (json.JSONDecodeError, ContractError) as error:
        raise InvalidControlRequest(f"{request.path}: body is not JSON ({error})") from None


def _object(request: Request) -> dict[str, Any]:
    body = _body(request)
    if not isinstance(body, dict):
        raise InvalidControlRequest(f"{request.path}: expected a JSON object, got {type(body).__name__}")
    return body


async def handle(host: ControlHost, request: Request) -> Response:
    name = request.path[len(PREFIX) :]
    if name not in ROUTES:
        return _json(404, {"error": f"unknown control route {request.path!r}; known: {sorted(ROUTES)}"})
    if request.method not in ROUTES[name]:
        return _json(
            405, {"error": f"{request.path} accepts {', '.join(ROUTES[name])}, not {request.method}"}
        )
    try:
        return await _dispatch(host, name, request)
    except InvalidControlRequest as error:
        return _bad(str(error))


async def _dispatch(host: ControlHost, name: str, request: Request) -> Response:
    state = host.state
    if name == "ready":
        return _json(200, {"ready": True})
    if name == "reset":
        garbage = state.reset()
        # Freeing a full journal at once blocks for ~100 ms; freeing it in slices keeps reset instant.
        host.spawn(_free_in_slices(garbage))
        async with host.journal_grew:  # waiters must see the new epoch at once
            host.journal_grew.notify_all()
        return _json(200, {"reset": True, "epoch": state.epoch})
    if name == "journal":
        since_id = _int_param(request.query.get("since_id", "0"), "since_id")
        entries = [entry.to_dict() for entry in state.journal_since(since_id)]
        return _json(200, {"entries": entries, "overflow": state.overflow, "epoch": state.epoch})
    if name == "received":
        since_seq = _int_param(request.query.get("since_seq", "0"), "since_seq")
        items = state.received_since(since_seq)
        count = state.received_count()
        return _json(
            200,
            {
                "count": count,
                "overflow": state.received_dropped,
                "received": [item.to_dict() for item in items],
            },
        )
    if name == "stats":
        return _json(200, {**state.stats(), "errors": host.errors_total, "waiting": host.parked_waits})
    if name == "errors":
        if request.method == "DELETE":
            host.clear_errors()
        return _json(200, {"errors": list(host.errors), "total": host.errors_total})
    if name == "allowlist":
        if request.method == "PUT":
            projects = _object(request).get("projects")
            if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
                raise InvalidControlRequest(
                    '/_fake/allowlist: "projects" must be a list of strings, e.g. ["p", "q"] or ["*"]'
                )
            state.set_allowlist(projects)
        return _json(200, {"projects": state.allowlist()})
    if name == "pause":
        body = _object(request)
        project, paused = body.get("project"), body.get("paused", True)
        if not isinstance(project, str) or not project.strip():
            raise InvalidControlRequest('/_fake/pause: "project" must be a non-empty string')
        if not isinstance(paused, bool):
            raise InvalidControlRequest('/_fake/pause: "paused" must be true or false')
        state.set_paused(project, paused)
        return _json(200, {"paused": sorted(state.paused)})
    if name == "faults":
        if request.method == "DELETE":
            state.faults.clear()
        elif request.method == "POST":
            raw = _object(request).get("faults")
            if not isinstance(raw, list):
                raise InvalidControlRequest('/_fake/faults: "faults" must be a list of fault objects')
            state.add_faults([Fault.from_dict(item, f"faults[{index}]") for index, item in enumerate(raw)])
        return _json(200, {"faults": [fault.to_dict() for fault in state.faults]})
    return await _wait(host, _object(request))


async def _free_in_slices(garbage: list[Any], slice_size: int = 2000) -> None:
    for container in garbage:
        while container:
            for _ in range(min(slice_size, len(container))):
                if isinstance(container, dict):
                    container.popitem()
                else:
                    container.pop()
            await asyncio.sleep(0)


def _int_param(raw: str, name: str) -> int:
    try:
        return int(raw.strip()[:30])
    except ValueError:
        raise InvalidControlRequest(f"{name} must be an integer, got {raw[:40]!r}") from None


WAIT_OF = ("journal", "received")


async def _wait(host: ControlHost, body: dict[str, Any]) -> Response:
    """Park until COUNT journal entries (of: journal) or stored mutations (of: received) match."""
    count, timeout = body.get("count", 1), body.get("timeout", 10.0)
    of = body.get("of", "journal")
    match = body.get("match") or {}
    since_name = "since_seq" if of == "received" else "since_id"
    since = body.get(since_name, 0)
    if of not in WAIT_OF:
        raise InvalidControlRequest(f'/_fake/wait: "of" must be "journal" or "received", got {of!r}')
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000_000:
        raise InvalidControlRequest(f'/_fake/wait: "count" must be a positive integer, got {count!r}')
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout <= MAX_WAIT_SECONDS
    ):
        raise InvalidControlRequest(
            f'/_fake/wait: "timeout" must be 0 to {MAX_WAIT_SECONDS:g} seconds, got {timeout!r}'
        )
    if not isinstance(match, dict):
        raise InvalidControlRequest(f'/_fake/wait: "match" must be an object of {_WHAT[of][1]} fields')
    allowed = MATCH_FIELDS if of == "journal" else RECEIVED_MATCH_FIELDS
    unknown = sorted(set(match) - allowed)
    if unknown:
        raise InvalidControlRequest(
            f"/_fake/wait: unknown match field(s) {unknown}; allowed: {sorted(allowed)}"
        )
    if isinstance(since, bool) or not isinstance(since, int):
        raise InvalidControlRequest(f'/_fake/wait: "{since_name}" must be an integer')
    state = host.state
    search: Callable[[int], Sequence[JournalEntry | ReceivedMutation]]
    newest: Callable[[], int]
    closest: Callable[[int], list[dict[str, Any]]]
    if of == "journal":
        search = partial(state.matching, match)
        newest = state.newest_journal_id
        closest = partial(state.closest, match)
    else:
        search = partial(state.received_matching, match)
        newest = state.received_count
        closest = partial(state.received_closest, match)
    deadline = time.monotonic() + float(timeout)
    found: list[JournalEntry | ReceivedMutation] = []
    scanned = since
    epoch = state.epoch
    async with host.journal_grew:  # a stored mutation is journaled too, so the journal's growth wakes both
        while True:
            if state.epoch != epoch:
                # A reset: nothing found before it counts, and since named a place in the old journal.
                epoch, found, scanned, since = state.epoch, [], 0, 0
            latest = newest()
            # Only what arrived since the last look: a busy fake must not rescan its whole journal.
            found += search(scanned)
            scanned = max(scanned, latest)
            if len(found) >= count:
                return _json(200, {"entries": [item.to_dict() for item in found[:count]]})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            # Counted while parked, so a test can push only once the waiter is asleep (stats: waiting).
            host.parked_waits += 1
            try:
                await asyncio.wait_for(host.journal_grew.wait(), remaining)
            except TimeoutError:
                break
            finally:
                host.parked_waits -= 1
    found = list(search(since))
    what, _ = _WHAT[of]
    return _json(
        408,
        {
            "error": f"wait: {len(found)} of {count} matching {what} after {timeout:g} s (match {match})",
            "found": [item.to_dict() for item in found],
            "closest": closest(since),
        },
    )
