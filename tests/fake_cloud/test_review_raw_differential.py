"""Differential at the HTTP layer (issue 11, item 1): raw requests that no HTTP client library sends (chunk
lines, oversize heads, Content-Length edges, Expect), against the REAL `engram cloud serve` v1.20.0 and the
fake; the status and body must match. The differences the fake keeps on purpose are listed with both
answers, as observed on v1.20, and are not compared.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_parts import missing

from engram_sync_kit.fake_cloud.real_server import RealCloudError, real_cloud_server, throwaway_postgres
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud

pytestmark = [pytest.mark.engram, pytest.mark.xdist_group("differential")]

TOKEN = "raw-diff-token"
AUTH_LINE = f"Authorization: Bearer {TOKEN}\r\n".encode()
MAX_PUSH = 64 * 1024
ENTRY = b'{"entries":[{"project":"alpha","entity":"thing","entity_key":"k","op":"delete","payload":{}}]}'
MAX_HEAD = (1 << 20) + 4096


def push(framing: bytes, extra: bytes = b"") -> bytes:
    return b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\n" + AUTH_LINE + extra + framing + b"\r\n"


def chunked(size_line: bytes, rest: bytes = b"\r\n0\r\n\r\n") -> bytes:
    return push(b"Transfer-Encoding: chunked\r\n") + size_line + b"\r\n" + ENTRY + rest


HEX = b"%x" % len(ENTRY)


def push_entry(entity: str, op: str, payload: bytes) -> bytes:
    body = b'{"entries":[{"project":"alpha","entity":"%s","entity_key":"k","op":"%s","payload":%s}]}' % (
        entity.encode(),
        op.encode(),
        payload,
    )
    return push(b"Content-Length: %d\r\n" % len(body)) + body


def authorized_as(value: bytes) -> bytes:
    """A push whose Authorization header is `value`, as the bytes on the wire."""
    head = b"POST /sync/mutations/push HTTP/1.1\r\nHost: f\r\nAuthorization: " + value + b"\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(ENTRY) + ENTRY


def push_fields(
    payload: bytes = b"{}", *, entity: bytes = b"thing", key: bytes = b"k", op: bytes = b"delete"
) -> bytes:
    """A one-entry push whose fields are these bytes as sent (escapes and invalid UTF-8 included)."""
    body = b'{"entries":[{"project":"alpha","entity":"%s","entity_key":"%s","op":"%s","payload":%s}]}' % (
        entity,
        key,
        op,
        payload,
    )
    return push(b"Content-Length: %d\r\n" % len(body)) + body


def session_push(directory: bytes, key: bytes = b"s1", extra: bytes = b"") -> bytes:
    payload = b'{"id":"%s","directory":"/w%s"%s}' % (key, directory, extra)
    return push_fields(payload, entity=b"session", key=key, op=b"upsert")


def chunk_push(title: bytes = b"t", extra: bytes = b"") -> bytes:
    """A chunk push (POST /sync/push) of one session and one observation titled ``title``."""
    session = b'{"id":"cs1","project":"alpha","directory":"/w","started_at":"2026-11-29 10:00:00"}'
    observation = (
        b'{"sync_id":"co1","session_id":"cs1","type":"manual","title":"%s","content":"c",'
        b'"project":"alpha","scope":"project"}' % title
    )
    body = b'{"project":"alpha","created_by":"raw","data":{"sessions":[%s],"observations":[%s]%s}}' % (
        session,
        observation,
        extra,
    )
    head = b"POST /sync/push HTTP/1.1\r\nHost: f\r\n" + AUTH_LINE
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def push_to(path: bytes, body: bytes = ENTRY, extra: bytes = b"") -> bytes:
    head = b"POST " + path + b" HTTP/1.1\r\nHost: f\r\n" + AUTH_LINE + extra
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


GOOD_PAYLOADS: dict[str, dict[str, object]] = {
    "session": {"id": "s1", "directory": "/d"},
    "observation": {
        "sync_id": "o1",
        "session_id": "s",
        "type": "t",
        "title": "x",
        "content": "c",
        "scope": "project",
    },
    "prompt": {"sync_id": "p1", "session_id": "s", "content": "c"},
    "relation": {
        "sync_id": "r1",
        "source_id": "a",
        "target_id": "b",
        "relation": "x",
        "judgment_status": "j",
        "marked_by_actor": "a",
        "marked_by_kind": "k",
    },
}


def typed_push(entity: str, op: str, fields: dict[str, object]) -> bytes:
    """A one-entry push of a good payload of `entity` with `fields` set over it."""
    payload = {**GOOD_PAYLOADS[entity], **fields}
    key = str(payload.get("id") or payload["sync_id"])
    return push_fields(json.dumps(payload).encode(), entity=entity.encode(), key=key.encode(), op=op.encode())


# A payload that is a JSON string whose text opens 1,000 or more arrays (issue 24, item 11).
DEEP_STRING = b'"' + b"[" * 1000 + b'"'
CASES: dict[str, bytes] = {
    "chunked": chunked(HEX),
    "chunk line of 4087 bytes": chunked(HEX + b";x=" + b"a" * 4082),
    "chunk line of 5000 bytes": chunked(HEX + b";x=" + b"a" * 5000),
    "chunk line ending in a bare LF": push(b"Transfer-Encoding: chunked\r\n")
    + HEX
    + b"\n"
    + ENTRY
    + b"\n0\n\n",
    "chunk line with a CR inside": chunked(HEX + b"\r;x"),
    "chunk length of 17 hex digits": chunked(b"%017x" % len(ENTRY)),
    "chunk length missing": chunked(b";x"),
    "chunk length after a space": chunked(b" " + HEX),
    "trailer of 3000 bytes": chunked(HEX, b"\r\n0\r\nX: " + b"a" * 3000 + b"\r\n\r\n"),
    "head padded past 1 MiB": b"GET /health HTTP/1.1\r\nHost: f\r\nX: a"
    + b" " * (MAX_HEAD + 100)
    + b"\r\n\r\n",
    "obs-fold": b"GET /health HTTP/1.1\r\nHost: f\r\nX: a\r\n b\r\n\r\n",
    "a megabyte of short headers": (
        b"GET /health HTTP/1.1\r\nHost: f\r\nConnection: close\r\n" + b"a:b\r\n" * 200_000 + b"\r\n"
    ),
    "Content-Length 2^63": push(b"Content-Length: 9223372036854775808\r\n") + b"{}",
    "Content-Length 2^64-1": push(b"Content-Length: 18446744073709551615\r\n") + b"{}",
    "target abc": b"GET abc HTTP/1.1\r\nHost: f\r\n\r\n",
    "target *": b"GET * HTTP/1.1\r\nHost: f\r\n\r\n",
    "OPTIONS *": b"OPTIONS * HTTP/1.0\r\n\r\n",
    "HTTP/2.0 request line": b"GET /health HTTP/2.0\r\nHost: f\r\n\r\n",
    "HTTP/1.9 request line": b"GET /health HTTP/1.9\r\nHost: f\r\nConnection: close\r\n\r\n",
    "HTTP/0.9 request line": b"GET /health HTTP/0.9\r\nHost: f\r\n\r\n",
    "h2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "Transfer-Encoding gzip, chunked": push(b"Transfer-Encoding: gzip, chunked\r\n") + b"0\r\n\r\n",
    "Transfer-Encoding identity": push(b"Transfer-Encoding: identity\r\n") + b"{}",
    "GET declaring 300 kB": b"GET /health HTTP/1.1\r\nHost: f\r\nContent-Length: 300000\r\n\r\n",
    "Expect 100-continue": push(b"Content-Length: %d\r\n" % len(ENTRY), b"Expect: 100-continue\r\n"),
    "payload a string of 1000 [ (delete)": push_entry("thing", "delete", DEEP_STRING),
    "payload a string of 5000 [ (delete)": push_entry("thing", "delete", b'"' + b"[" * 5000 + b'"'),
    "session payload a string of 1000 [": push_entry("session", "upsert", DEEP_STRING),
    "observation payload a string of 1000 [": push_entry("observation", "upsert", DEEP_STRING),
    "relation payload a string of 1000 [": push_entry("relation", "upsert", DEEP_STRING),
    # Go splits the header with strings.Fields: on UTF-8 white space only, never inside a token's bytes.
    "bearer after a UTF-8 no-break space": authorized_as(b"Bearer\xc2\xa0" + TOKEN.encode()),
    "bearer after a lone 0xA0 byte": authorized_as(b"Bearer\xa0" + TOKEN.encode()),
    "bearer after a NEL (U+0085)": authorized_as(b"Bearer\xc2\x85" + TOKEN.encode()),
    "bearer after an ideographic space": authorized_as(b"Bearer\xe3\x80\x80" + TOKEN.encode()),
    "bearer after a tab, token with a trailing no-break space": authorized_as(
        b"Bearer\t" + TOKEN.encode() + b"\xc2\xa0"
    ),
    "bearer token with a lone 0x85 byte": authorized_as(b"Bearer " + TOKEN.encode() + b"\x85"),
    # Issue 35, item 15: what Postgres refuses in v1.20's INSERT is a 500, and the batch stores nothing.
    "payload holding \\u0000": push_fields(b'{"a":"x\\u0000y"}'),
    "payload key holding \\u0000": push_fields(b'{"a\\u0000":"x"}'),
    "payload a string holding \\u0000": push_fields(b'"x\\u0000"'),
    "payload holding an escaped backslash before u0000": push_fields(b'{"a":"x\\\\u0000"}'),
    "session directory holding \\u0000": session_push(b"\\u0000"),
    "session summary holding \\u0000": session_push(b"", extra=b',"summary":"a\\u0000b"'),
    "entity_key holding \\u0000": push_fields(key=b"k\\u0000"),
    "entity holding \\u0000": push_fields(entity=b"thi\\u0000ng"),
    "op holding \\u0000": push_fields(op=b"del\\u0000ete"),
    "session id and key holding \\u0000": session_push(b"", key=b"s1\\u0000"),
    "payload holding a raw 0xff": push_fields(b'{"a":"x\xffy"}'),
    "payload holding an overlong NUL": push_fields(b'{"a":"x\xc0\x80y"}'),
    "payload holding an overlong slash": push_fields(b'{"a":"x\xc0\xafy"}'),
    "payload holding an encoded surrogate": push_fields(b'{"a":"x\xed\xa0\x80y"}'),
    "payload holding a cut 3-byte sequence": push_fields(b'{"a":"x\xe2\x82"}'),
    "payload holding a raw 0xff after \\u0000": push_fields(b'{"a":"\\u0000","b":"\xff"}'),
    "payload holding a lone surrogate before \\u0000": push_fields(b'{"a":"\\ud800","b":"\\u0000"}'),
    "session directory holding an overlong NUL": session_push(b"\xc0\x80"),
    "entity_key holding a raw 0xff": push_fields(key=b"k\xff"),  # Go's decoder makes it U+FFFD: stored
    "chunk push": chunk_push(),
    "chunk push with a title holding \\u0000": chunk_push(b"t\\u0000"),
    "chunk push with an unknown field holding \\u0000": chunk_push(b"t2", b',"x":"a\\u0000"'),
    "chunk push with a title holding a raw 0xff": chunk_push(b"t\xff"),
    # Issue 35, item 18: Go's ServeMux cleans paths (307 to the clean one) and routes on escaped segments.
    "push to //sync/mutations/push": push_to(b"//sync/mutations/push"),
    "push to /sync//mutations/push": push_to(b"/sync//mutations/push"),
    "push to /sync/./mutations/push": push_to(b"/sync/./mutations/push"),
    "push to /sync/x/../mutations/push": push_to(b"/sync/x/../mutations/push"),
    "push to /sync%2Fmutations/push": push_to(b"/sync%2Fmutations/push"),
    "push to /sync/mutations%2Fpush": push_to(b"/sync/mutations%2Fpush"),
    "push to /%73ync/mutations/push": push_to(b"/%73ync/mutations/push"),
    "GET //health": b"GET //health HTTP/1.1\r\nHost: f\r\n\r\n",
    "HEAD //health": b"HEAD //health HTTP/1.1\r\nHost: f\r\n\r\n",
    "GET //x?q=1": b"GET //x?q=1 HTTP/1.1\r\nHost: f\r\n\r\n",
    "GET /a/../health/": b"GET /a/../health/ HTTP/1.1\r\nHost: f\r\n\r\n",
    "GET /%3Cx%3E//": b"GET /%3Cx%3E// HTTP/1.1\r\nHost: f\r\n\r\n",
    "GET http://f//health": b"GET http://f//health HTTP/1.1\r\nHost: f\r\n\r\n",
    "GET //sync/mutations/pull": b"GET //sync/mutations/pull HTTP/1.1\r\nHost: f\r\n" + AUTH_LINE + b"\r\n",
    "chunk id holding %2F": b"GET /sync/pull/a%2Fb?project=alpha HTTP/1.1\r\nHost: f\r\n"
    + AUTH_LINE
    + b"\r\n",
    "Content-Length: N, N": push(b"Content-Length: %d, %d\r\n" % (len(ENTRY), len(ENTRY))) + ENTRY,
    "Content-Length: N,N": push(b"Content-Length: %d,%d\r\n" % (len(ENTRY), len(ENTRY))) + ENTRY,
    "Content-Length twice, the same": push(b"Content-Length: %d\r\n" % len(ENTRY) * 2) + ENTRY,
    # v1.20 reads a body as sent: gzip is not JSON, and a Content-Encoding header changes nothing.
    "gzip push": push_to(
        b"/sync/mutations/push", gzip.compress(ENTRY, mtime=0), b"Content-Encoding: gzip\r\n"
    ),
    "gzip push without the header": push_to(b"/sync/mutations/push", gzip.compress(ENTRY, mtime=0)),
    "plain push saying gzip": push_to(b"/sync/mutations/push", ENTRY, b"Content-Encoding: gzip\r\n"),
    "gzip chunk push": push_to(b"/sync/push", gzip.compress(b'{"project":"alpha","data":{}}', mtime=0)),
    **{
        f"push body starting with byte {byte:#04x}": push_to(b"/sync/mutations/push", bytes([byte]) + b"{}")
        for byte in (0x01, 0x27, 0x5C, 0x78, 0x7F, 0x80, 0xA0, 0xAD, 0xC2, 0xFF)
    },
    # Go's decoder names JSON kinds (number, string, array, object, bool), and its own structs.
    "push body a number": push_to(b"/sync/mutations/push", b"5"),
    "push body an array": push_to(b"/sync/mutations/push", b"[]"),
    "entries a string": push_to(b"/sync/mutations/push", b'{"entries":"x"}'),
    "entries an object": push_to(b"/sync/mutations/push", b'{"entries":{}}'),
    "an entry a number": push_to(b"/sync/mutations/push", b'{"entries":[5]}'),
    "an entry an array": push_to(b"/sync/mutations/push", b'{"entries":[[]]}'),
    "an entry's project a float": push_to(b"/sync/mutations/push", b'{"entries":[{"project":5.5}]}'),
    "an entry's op an object": push_to(b"/sync/mutations/push", b'{"entries":[{"project":"alpha","op":{}}]}'),
    "chunk push body a number": push_to(b"/sync/push", b"5"),
    "chunk push project a number": push_to(b"/sync/push", b'{"project":5,"data":{}}'),
    "chunk push created_by an array": push_to(
        b"/sync/push", b'{"project":"alpha","created_by":[],"data":{}}'
    ),
    "chunk push data an array": push_to(b"/sync/push", b'{"project":"alpha","data":[]}'),
    "chunk push session id a number": push_to(
        b"/sync/push", b'{"project":"alpha","data":{"sessions":[{"id":5,"directory":"/d"}]}}'
    ),
    "chunk push prompt content an array": push_to(
        b"/sync/push",
        b'{"project":"alpha","data":{"sessions":[{"id":"s","directory":"/d"}],'
        b'"prompts":[{"sync_id":"o","session_id":"s","content":[]}]}}',
    ),
    "session upsert directory a number": typed_push("session", "upsert", {"directory": 5}),
    "session upsert deleted a string": typed_push("session", "upsert", {"deleted": "x"}),
    "session upsert project an array": typed_push("session", "upsert", {"project": []}),
    "observation upsert project a number": typed_push("observation", "upsert", {"project": 5}),
    "session delete directory a number": typed_push("session", "delete", {"directory": 5}),
    "session delete payload an array": push_fields(b"[1]", entity=b"session", key=b"s1"),
    "session delete payload a string holding a number": push_fields(b'"5"', entity=b"session", key=b"s1"),
    "observation upsert title a number": typed_push("observation", "upsert", {"title": 5}),
    "observation upsert revision_count a string": typed_push(
        "observation", "upsert", {"revision_count": "x"}
    ),
    "observation upsert hard_delete a string": typed_push("observation", "upsert", {"hard_delete": "x"}),
    "observation delete title a number": typed_push("observation", "delete", {"title": 5}),
    "prompt upsert content a number": typed_push("prompt", "upsert", {"content": 5}),
    "prompt upsert deleted_at an array": typed_push("prompt", "upsert", {"deleted_at": []}),
    "relation reason a number": typed_push("relation", "upsert", {"reason": 5}),
    "relation confidence a string": typed_push("relation", "upsert", {"confidence": "x"}),
}
# Kept on purpose (observed on v1.20.0): v1.20's answer, then the fake's.
KNOWN_DIFFERENCES = {
    # v1.20 waits for the data of a chunk of 2^63 bytes or more, and for a small declared GET body (to
    # discard it) before answering; the fake answers at once.
    "chunk length 2^63": ("no answer", "400 invalid request body: http chunk length too large"),
    "GET declaring 100 bytes": ("no answer", "200"),
    # v1.20 decodes what fits and answers the JSON; the fake refuses the declared size from the head.
    "Content-Length 2^63-1": ("400 empty_batch", "413 upgrade_repairable_payload_too_large"),
    # v1.20 keeps the connection open after OPTIONS * (HTTP/1.1); the fake closes it.
    "OPTIONS * keep-alive": ("200, open", "200, closed"),
}


def exchange(base_url: str, data: bytes) -> tuple[list[int], bytes]:
    """Every status answered and the last answer's body; stops after a 100 Continue (the body is not
    sent) or when the server closes or goes quiet (an upper bound: a server that answers is not waited
    for)."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while not _complete(received):
            try:
                piece = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not piece:
                break
            received += piece
    statuses = [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", received)]
    return statuses, received.rsplit(b"\r\n\r\n", 1)[-1] if statuses else received


def _complete(received: bytes) -> bool:
    if received.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"):
        return True
    head, separator, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    return bool(separator) and length is not None and len(body) >= int(length.group(1))


@pytest.fixture(scope="module")
def real_base_url(engram_bin: Path) -> Iterator[str]:
    try:
        with (
            throwaway_postgres() as url,
            real_cloud_server(
                engram_bin, url, token=TOKEN, allowed_projects=["alpha"], max_push_bytes=MAX_PUSH
            ) as real,
        ):
            yield real.base_url
    except RealCloudError as error:
        reason = f"no real cloud server: {error}"
        missing(reason)


@pytest.fixture(scope="module")
def fake_base_url() -> Iterator[str]:
    config = FakeCloudConfig(
        token=TOKEN, allowed_projects=("alpha",), max_push_bytes=MAX_PUSH, server_version="v1.20"
    )
    with start_fake_cloud(config) as fake:
        yield fake.base_url


@pytest.mark.parametrize("name", list(CASES))
def test_the_fake_answers_raw_requests_as_the_real_server(
    real_base_url: str, fake_base_url: str, name: str
) -> None:
    real = exchange(real_base_url, CASES[name])
    fake = exchange(fake_base_url, CASES[name])
    assert real[0], f"{name}: the real server gave no answer"
    assert fake == real


def test_a_known_difference_is_not_also_compared() -> None:
    assert not set(KNOWN_DIFFERENCES) & set(CASES)
