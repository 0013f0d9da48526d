"""What the fake puts on the wire: engram v1.20's replies and error bodies, and how they are encoded.

Protocol code returns a ``Reply`` (status and body); ``render`` turns it into bytes the way Go's
handlers do (json.Encoder for JSON, http.Error for text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_sync_kit.engram_contract.gojson import go_json
from engram_sync_kit.engram_contract.push_rules import too_large_reason
from engram_sync_kit.fake_cloud.httpserver import Response

TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # dict or list: JSON; str: text/plain like Go's http.Error; bytes: raw JSON
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"  # of a bytes body


def actionable(status: int, error_class: str, code: str, message: str) -> Reply:
    return Reply(status, {"error_class": error_class, "error_code": code, "error": message})


PROJECT_REQUIRED = actionable(400, "blocked", "upgrade_blocked_project_required", "project is required")
FORBIDDEN = actionable(403, "policy", "policy_forbidden", "forbidden: project is not allowed")
NO_PRINCIPAL = actionable(403, "policy", "policy_forbidden", "forbidden: principal is required")
NOT_FOUND = Reply(404, "404 page not found")


def paused_reply(paused_project: str, primary: str) -> Reply:
    return Reply(
        409,
        {
            "error_class": "policy",
            "error_code": "sync-paused",
            "error": f'sync is paused for project "{paused_project}"',
            "project": primary,
            "project_source": "request_body",
            "project_path": "",
        },
    )


def payload_invalid(message: str) -> Reply:
    return actionable(400, "repairable", "upgrade_repairable_payload_invalid", message)


def too_large(limit: int) -> Reply:
    return actionable(
        413,
        "repairable",
        "upgrade_repairable_payload_too_large",
        too_large_reason(limit),
    )


def method_not_allowed(allowed: tuple[str, ...]) -> Response:
    return text_response(405, "Method Not Allowed", [("allow", ", ".join(allowed))])


def redirect(location: str, method: str) -> Response:
    """Go's http.Redirect with 307: a small HTML body for GET, none for other methods."""
    html = method in ("GET", "HEAD")
    escaped = "".join(_HTML_ESCAPES.get(char, char) for char in location)
    body = f'<a href="{escaped}">Temporary Redirect</a>.\n\n'.encode() if method == "GET" else b""
    content_type = "text/html; charset=utf-8" if html else ""
    return Response(307, body, content_type, [("location", location)])


_HTML_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "'": "&#39;"}
_GO_RUNE_ESCAPES = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r", 0x5C: "\\\\"}


def go_quote_char(byte: int) -> str:
    """Go's quoteChar for a byte in a JSON syntax error: the byte as a rune, quoted like strconv.Quote."""
    if byte == 0x27:
        return "'\\''"
    if byte == 0x22:
        return "'\"'"
    if byte in _GO_RUNE_ESCAPES:
        return f"'{_GO_RUNE_ESCAPES[byte]}'"
    if byte < 0x20 or byte == 0x7F:
        return f"'\\x{byte:02x}'"
    if 0x80 <= byte <= 0xA0 or byte == 0xAD:  # not printable for Go's unicode.IsPrint
        return f"'\\u{byte:04x}'"
    return f"'{chr(byte)}'"


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
        return Response(reply.status, reply.body, reply.content_type, list(reply.headers))
    if isinstance(reply.body, str):
        return text_response(reply.status, reply.body)
    return json_response(reply.status, reply.body)
