"""The reserved control API under /_fake/: readiness, reset, journal, wait, switches and faults.

Control requests are not journaled and need no token: they are the test's side channel.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from fake_cloud.httpserver import Request, Response
from fake_cloud.models import MATCH_FIELDS, Fault, InvalidControlRequest, JournalEntry

if TYPE_CHECKING:
    from fake_cloud.app import FakeCloudApp

PREFIX = "/_fake/"
MAX_WAIT_SECONDS = 600.0

ROUTES: dict[str, tuple[str, ...]] = {
    "ready": ("GET",),
    "reset": ("POST",),
    "journal": ("GET",),
    "wait": ("POST",),
    "received": ("GET",),
    "allowlist": ("GET", "PUT"),
    "pause": ("PUT",),
    "faults": ("GET", "POST", "DELETE"),
}


def _json(status: int, body: Any) -> Response:
    # The control API is ours, not engram's: plain compact JSON is enough and much faster than Go's form.
    return Response(status, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


def _bad(message: str) -> Response:
    return _json(400, {"error": message})


def _body(request: Request) -> Any:
    if request.body_too_large:
        raise InvalidControlRequest(f"{request.path}: body is larger than the push limit")
    if not request.body.strip():
        return {}
    try:
        return json.loads(request.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidControlRequest(f"{request.path}: body is not JSON ({error})") from None


def _object(request: Request) -> dict[str, Any]:
    body = _body(request)
    if not isinstance(body, dict):
        raise InvalidControlRequest(f"{request.path}: expected a JSON object, got {type(body).__name__}")
    return body


async def handle(app: FakeCloudApp, request: Request) -> Response:
    name = request.path[len(PREFIX) :]
    if name not in ROUTES:
        return _json(404, {"error": f"unknown control route {request.path!r}; known: {sorted(ROUTES)}"})
    if request.method not in ROUTES[name]:
        return _json(
            405, {"error": f"{request.path} accepts {', '.join(ROUTES[name])}, not {request.method}"}
        )
    try:
        return await _dispatch(app, name, request)
    except InvalidControlRequest as error:
        return _bad(str(error))


async def _dispatch(app: FakeCloudApp, name: str, request: Request) -> Response:
    state = app.state
    if name == "ready":
        return _json(200, {"ready": True})
    if name == "reset":
        garbage = state.reset()
        # Freeing a full journal at once blocks for ~100 ms; freeing it in slices keeps reset instant.
        task = asyncio.create_task(_free_in_slices(garbage))
        app.background.add(task)
        task.add_done_callback(app.background.discard)
        return _json(200, {"reset": True})
    if name == "journal":
        since_id = _int_param(request.query.get("since_id", "0"), "since_id")
        entries = [entry.to_dict() for entry in state.journal_since(since_id)]
        return _json(200, {"entries": entries, "overflow": state.overflow})
    if name == "received":
        since_seq = _int_param(request.query.get("since_seq", "0"), "since_seq")
        items = state.received[since_seq:] if since_seq >= 0 else state.received
        return _json(200, {"count": len(state.received), "received": [item.to_dict() for item in items]})
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
    return await _wait(app, _object(request))


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
        return int(raw)
    except ValueError:
        raise InvalidControlRequest(f"{name} must be an integer, got {raw!r}") from None


async def _wait(app: FakeCloudApp, body: dict[str, Any]) -> Response:
    count, timeout = body.get("count", 1), body.get("timeout", 10.0)
    match, since_id = body.get("match") or {}, body.get("since_id", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
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
        raise InvalidControlRequest('/_fake/wait: "match" must be an object of journal fields')
    unknown = sorted(set(match) - MATCH_FIELDS)
    if unknown:
        raise InvalidControlRequest(
            f"/_fake/wait: unknown match field(s) {unknown}; allowed: {sorted(MATCH_FIELDS)}"
        )
    if isinstance(since_id, bool) or not isinstance(since_id, int):
        raise InvalidControlRequest('/_fake/wait: "since_id" must be an integer')
    deadline = time.monotonic() + float(timeout)
    found: list[JournalEntry] = []
    scanned = since_id
    async with app.journal_grew:
        while True:
            newest = app.state.journal[-1].id if app.state.journal else 0
            if newest < scanned:  # a reset restarted the ids
                found, scanned = [], since_id
            # Only entries that arrived since the last look: a busy fake must not rescan its whole journal.
            found += app.state.matching(match, scanned)
            scanned = max(scanned, newest)
            if len(found) >= count:
                return _json(200, {"entries": [entry.to_dict() for entry in found[:count]]})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(app.journal_grew.wait(), remaining)
            except TimeoutError:
                break
    found = app.state.matching(match, since_id)
    return _json(
        408,
        {
            "error": f"wait: {len(found)} of {count} matching journal entries after {timeout:g} s (match {match})",
            "found": [entry.to_dict() for entry in found],
            "closest": app.state.closest(match, since_id),
        },
    )
