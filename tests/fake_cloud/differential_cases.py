"""One table of contract cases, sent in order to a cloud server; each answer boiled down to what the
engram client sees: the status, the kind of body, and the fields it reads (error_class, error_code,
reason_code, the message, accepted_seqs length, pulled keys, manifest chunk ids).

Cases run in sequence on a fresh server, so the stateful ones (pull after push) see the same history.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

TOKEN = "differential-token"
ALLOWED = ("alpha", "beta", "frozen")
PAUSED = "frozen"
MAX_PUSH_BYTES = 64 * 1024
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=lambda: dict(AUTH))
    body: Any = None  # a JSON value, or raw bytes sent as-is


def session(session_id: str, project: str) -> dict[str, Any]:
    return {"id": session_id, "project": project, "directory": "/work", "started_at": "2026-11-29 10:00:00"}


def observation(sync_id: str, session_id: str, project: str) -> dict[str, Any]:
    return {
        "sync_id": sync_id,
        "session_id": session_id,
        "type": "manual",
        "title": f"title {sync_id}",
        "content": f"content {sync_id}",
        "project": project,
        "scope": "project",
        "created_at": "2026-11-29 10:00:01",
        "updated_at": "2026-11-29 10:00:01",
    }


def entry(project: str, entity: str, key: str, payload: Any, op: str = "upsert") -> dict[str, Any]:
    return {"project": project, "entity": entity, "entity_key": key, "op": op, "payload": payload}


def chunk(project: str, session_id: str, sync_id: str) -> dict[str, Any]:
    return {
        "sessions": [session(session_id, project)],
        "observations": [observation(sync_id, session_id, project)],
        "prompts": [],
    }


def raw_push(payload_text: str) -> bytes:
    return (
        '{"entries": [{"project": "alpha", "entity": "thing", "entity_key": "raw", "op": "upsert", '
        f'"payload": {payload_text}}}]}}'
    ).encode()


def chunk_push(project: str | None, data: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"created_by": "differential", "client_created_at": "2026-11-29T10:00:00Z"}
    if project is not None:
        body["project"] = project
    if data is not None:
        body["data"] = data
    return body


def build_cases(good_entries: list[dict[str, Any]]) -> list[Case]:
    """The table. ``good_entries`` are real engram mutations (project alpha) read from its journal."""
    alpha_batch = {"entries": good_entries}
    oversize_payload = {"pad": "x" * (MAX_PUSH_BYTES + 1024)}
    relation_missing_fields = entry("alpha", "relation", "rel-1", {"sync_id": "rel-1"})
    return [
        Case("health", "GET", "/health", headers={}),
        # auth: before everything else, even before a malformed body
        Case("push without token", "POST", "/sync/mutations/push", headers={}, body=alpha_batch),
        Case(
            "push wrong token", "POST", "/sync/mutations/push", {"Authorization": "Bearer nope"}, alpha_batch
        ),
        Case(
            "push non-bearer",
            "POST",
            "/sync/mutations/push",
            {"Authorization": f"Token {TOKEN}"},
            alpha_batch,
        ),
        Case("push no token, bad json", "POST", "/sync/mutations/push", headers={}, body=b'{"entries":'),
        Case("pull without token", "GET", "/sync/mutations/pull", headers={}),
        Case("manifest wrong token", "GET", "/sync/pull?project=alpha", {"Authorization": "Bearer nope"}),
        Case("chunk push without token", "POST", "/sync/push", headers={}, body=chunk_push("alpha", {})),
        Case("chunk pull without token", "GET", "/sync/pull/abcd1234?project=alpha", headers={}),
        # mutation push validation order: body, batch size, empty, empty project, policy, pause, payload
        Case("push malformed json", "POST", "/sync/mutations/push", body=b'{"entries":'),
        Case("push not an object", "POST", "/sync/mutations/push", body=b"[1,2]"),
        Case("push project is an array", "POST", "/sync/mutations/push", body={"entries": [{"project": []}]}),
        Case("push entries is an object", "POST", "/sync/mutations/push", body={"entries": {"a": 1}}),
        Case("push entry is a number", "POST", "/sync/mutations/push", body={"entries": [1]}),
        Case("push empty batch", "POST", "/sync/mutations/push", body={"entries": []}),
        Case("push no entries key", "POST", "/sync/mutations/push", body={}),
        Case(
            "push batch of 101",
            "POST",
            "/sync/mutations/push",
            body={
                "entries": [entry("alpha", "session", f"s{i}", session(f"s{i}", "alpha")) for i in range(101)]
            },
        ),
        Case(
            "push missing project",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("", "session", "s1", session("s1", ""))]},
        ),
        Case(
            "push empty project beside a forbidden one",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("gamma", "session", "s1", {}), entry(" ", "session", "s2", {})]},
        ),
        Case(
            "push forbidden project",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("gamma", "session", "s1", session("s1", "gamma"))]},
        ),
        Case(
            "push forbidden project beside an allowed one",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "session", "s1", {}), entry("gamma", "session", "s2", {})]},
        ),
        Case(
            "push paused project",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry(PAUSED, "session", "s1", session("s1", PAUSED))]},
        ),
        Case(
            "push invalid relation to paused project",
            "POST",
            "/sync/mutations/push",
            body={"entries": [{**relation_missing_fields, "project": PAUSED}]},
        ),
        Case(
            "push invalid relation",
            "POST",
            "/sync/mutations/push",
            body={"entries": [relation_missing_fields]},
        ),
        Case(
            "push oversize",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "session", "big", oversize_payload)]},
        ),
        # the good path: real engram mutations
        Case("push real engram batch", "POST", "/sync/mutations/push", body=alpha_batch),
        Case("pull since 0", "GET", "/sync/mutations/pull?since_seq=0"),
        Case("pull limit 1", "GET", "/sync/mutations/pull?since_seq=0&limit=1"),
        Case("pull since 1", "GET", "/sync/mutations/pull?since_seq=1"),
        Case("pull since garbage", "GET", "/sync/mutations/pull?since_seq=abc&limit=-3"),
        # payloads v1.20's handler passes and its batch insert cannot materialize: the real 500
        Case(
            "push session without directory",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "session", "d1", {**session("d1", "alpha"), "directory": " "})]},
        ),
        Case(
            "push observation without title after a good session",
            "POST",
            "/sync/mutations/push",
            body={
                "entries": [
                    entry("alpha", "session", "d2", session("d2", "alpha")),
                    entry("alpha", "observation", "o-t", {**observation("o-t", "d2", "alpha"), "title": ""}),
                ]
            },
        ),
        Case(
            # what engram's worker sends for a memory whose session the project never got (a claim's copy
            # before the canary carried the session along): the chunk path refuses it, the worker path?
            "push observation whose session the project never got",
            "POST",
            "/sync/mutations/push",
            body={
                "entries": [
                    entry("alpha", "observation", "o-orphan", observation("o-orphan", "never", "alpha"))
                ]
            },
        ),
        Case(
            "push entity_key not the payload's",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "session", "other", session("d3", "alpha"))]},
        ),
        Case(
            "push session payload is a JSON string",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "session", "d4", json.dumps(session("d4", "alpha")))]},
        ),
        Case(
            "push unknown entity",
            "POST",
            "/sync/mutations/push",
            body={"entries": [entry("alpha", "thing", "k1", {"a": 1})]},
        ),
        Case("pull after refused payloads", "GET", "/sync/mutations/pull?since_seq=6"),
        # values that parse but break later (issue 11), as raw bodies
        Case("push NaN", "POST", "/sync/mutations/push", body=raw_push('{"v": NaN}')),
        Case("push Infinity", "POST", "/sync/mutations/push", body=raw_push('{"v": Infinity}')),
        Case("push nested 300 deep", "POST", "/sync/mutations/push", body=raw_push("[" * 300 + "]" * 300)),
        Case(
            "push nested 10001 deep", "POST", "/sync/mutations/push", body=raw_push("[" * 10001 + "]" * 10001)
        ),
        Case(
            "push lone surrogate in payload",
            "POST",
            "/sync/mutations/push",
            body=raw_push('{"v": "\\ud800x"}'),
        ),
        Case("push trailing bytes", "POST", "/sync/mutations/push", body=raw_push('{"v": 1}') + b" junk"),
        Case("push 1e999", "POST", "/sync/mutations/push", body=raw_push('{"v": 1e999}')),
        Case(
            "push 5000-digit integer",
            "POST",
            "/sync/mutations/push",
            body=raw_push('{"v": ' + "9" * 5000 + "}"),
        ),
        # chunk protocol
        Case("manifest empty", "GET", "/sync/pull?project=beta"),
        Case("manifest missing project", "GET", "/sync/pull"),
        Case("manifest forbidden", "GET", "/sync/pull?project=gamma"),
        Case("chunk push", "POST", "/sync/push", body=chunk_push("beta", chunk("beta", "cs1", "co1"))),
        Case("chunk push again", "POST", "/sync/push", body=chunk_push("beta", chunk("beta", "cs1", "co1"))),
        Case(
            "chunk push project from query",
            "POST",
            "/sync/push?project=beta",
            body=chunk_push(None, chunk("beta", "cs2", "co2")),
        ),
        Case("manifest after push", "GET", "/sync/pull?project=beta"),
        Case("chunk pull", "GET", "/sync/pull/{chunk_id}?project=beta"),
        Case("chunk pull unknown", "GET", "/sync/pull/abcd1234?project=beta"),
        Case("chunk pull missing project", "GET", "/sync/pull/abcd1234"),
        Case("chunk pull forbidden", "GET", "/sync/pull/abcd1234?project=gamma"),
        Case(
            "chunk push missing project", "POST", "/sync/push", body=chunk_push(None, chunk("beta", "s", "o"))
        ),
        Case("chunk push no data", "POST", "/sync/push", body=chunk_push("beta", None)),
        Case("chunk push malformed json", "POST", "/sync/push", body=b'{"project":'),
        Case("chunk push project is an array", "POST", "/sync/push", body={"project": ["beta"], "data": {}}),
        Case("chunk push data is a string", "POST", "/sync/push", body=chunk_push("beta", "not a chunk")),
        Case(
            "chunk push observation without session",
            "POST",
            "/sync/push",
            body=chunk_push("beta", {"observations": [{"sync_id": "x"}]}),
        ),
        Case(
            "chunk push unknown session",
            "POST",
            "/sync/push",
            body=chunk_push("beta", {"observations": [observation("o9", "nope", "beta")]}),
        ),
        Case(
            "chunk push forbidden", "POST", "/sync/push", body=chunk_push("gamma", chunk("gamma", "s", "o"))
        ),
        Case("chunk push paused", "POST", "/sync/push", body=chunk_push(PAUSED, chunk(PAUSED, "s", "o"))),
        Case(
            "chunk push oversize",
            "POST",
            "/sync/push",
            body=chunk_push("beta", {**chunk("beta", "s", "o"), "pad": "x" * MAX_PUSH_BYTES}),
        ),
        Case(
            "chunk push gzip",
            "POST",
            "/sync/push",
            headers={**AUTH, "Content-Encoding": "gzip"},
            body=gzip.compress(json.dumps(chunk_push("beta", chunk("beta", "cs4", "co4"))).encode(), mtime=0),
        ),
        Case("unknown route", "GET", "/sync/nothing"),
        Case("wrong method on push", "GET", "/sync/mutations/push"),
        Case("wrong method on pull", "POST", "/sync/mutations/pull", body={}),
        Case(
            "chunk push bad client_created_at",
            "POST",
            "/sync/push",
            body={**chunk_push("beta", chunk("beta", "cs3", "co3")), "client_created_at": "yesterday"},
        ),
    ]


@dataclass(frozen=True)
class Outcome:
    status: int
    kind: str  # "json" or "text"
    fields: dict[str, Any]

    def describe(self) -> str:
        return f"{self.status} {self.kind} {json.dumps(self.fields, sort_keys=True)}"


# What the client reads from each kind of answer.
_ERROR_FIELDS = ("error_class", "error_code", "reason_code", "error", "project", "invalid")


def outcome(response: httpx.Response) -> Outcome:
    if not response.headers.get("content-type", "").startswith("application/json"):
        return Outcome(response.status_code, "text", {"text": response.text.strip()})
    body = response.json()
    fields: dict[str, Any] = {}
    if isinstance(body, dict):
        for name in _ERROR_FIELDS:
            if name in body:
                fields[name] = body[name]
        if "accepted_seqs" in body:
            fields["accepted_seqs"] = len(body["accepted_seqs"])
        if "mutations" in body:
            fields["pulled"] = [
                (m["project"], m["entity"], m["entity_key"], m["op"]) for m in body["mutations"]
            ]
            fields["has_more"] = body.get("has_more")
            fields["latest_seq"] = body.get("latest_seq")
        if "chunks" in body:
            fields["chunks"] = [(c["id"], c["sessions"], c["memories"], c["prompts"]) for c in body["chunks"]]
            fields["version"] = body.get("version")
        for name in ("status", "chunk_id", "service"):
            if name in body:
                fields[name] = body[name]
        if "sessions" in body and "chunks" not in body:
            fields["chunk"] = body
    return Outcome(response.status_code, "json", fields)


def run_cases(
    base_url: str, cases: list[Case], *, verify: Any = True, before: Callable[[Case], None] | None = None
) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    chunk_id = ""
    with httpx.Client(base_url=base_url, verify=verify, trust_env=False, timeout=30) as client:
        for case in cases:
            if before is not None:
                before(case)
            path = case.path.replace("{chunk_id}", chunk_id)
            if isinstance(case.body, bytes):
                headers = {"Content-Type": "application/json", **case.headers}
                response = client.request(case.method, path, content=case.body, headers=headers)
            elif case.body is not None:
                response = client.request(case.method, path, json=case.body, headers=case.headers)
            else:
                response = client.request(case.method, path, headers=case.headers)
            result = outcome(response)
            if case.name == "chunk push" and "chunk_id" in result.fields:
                chunk_id = str(result.fields["chunk_id"])
            results[case.name] = result
    return results
