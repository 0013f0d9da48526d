"""engram v3's compressed chunk envelope, written once (predicted from source: no v3 binary builds here).

internal/cloud/chunkcodec/envelope.go @7a823197 (the file imports nothing of engram's, so its module is not
established) and its use in internal/cloud/cloudserver/cloudserver.go @d4397781 (module /v3):

- a chunk push whose Content-Type does not parse, or names the envelope with a version other than 1, is
  refused 415 before the body is read (handlePushChunk, IsCompressedEnvelopeContentType);
- a push body is gunzipped when its Content-Type is the envelope or it starts with gzip's magic bytes;
  Content-Encoding is never read; the decoded body may not pass the push limit (ErrPayloadTooLarge);
- a chunk read answers the envelope when Accept names it (AcceptsCompressedEnvelope) and the chunk is at
  most DefaultMaxDecodedBytes, and always sets Cache-Control: no-store and Vary: Accept (handlePullChunk).

The chunk manifest (GET /sync/pull) says version 2 on v3: ReadManifest in cloudstore.go, module /v3, read
in the fork wahh-22/engram @9c52018c (upstream's index stores no /v3 cloudstore.go); v1.20 says 1.
"""

from __future__ import annotations

from typing import Final

MEDIA_TYPE: Final = "application/vnd.engram.sync+gzip"
VERSION: Final = "1"
CONTENT_TYPE: Final = f"{MEDIA_TYPE}; version={VERSION}"
MAX_DECODED_BYTES: Final = 8 * 1024 * 1024
UNSUPPORTED_VERSION: Final = "unsupported compressed envelope version"
GZIP_MAGIC: Final = b"\x1f\x8b"
MANIFEST_VERSIONS: Final = {"v3": 2}


def manifest_version(server_version: str) -> int:
    """The `version` of the chunk manifest a server of `server_version` answers."""
    return MANIFEST_VERSIONS.get(server_version, 1)


# RFC 2045 token characters, as Go's mime package checks them (isTokenChar).
_TSPECIALS = frozenset('()<>@,;:\\"/[]?=')


def _is_token_char(char: str) -> bool:
    return 0x20 < ord(char) < 0x7F and char not in _TSPECIALS


def _is_token(text: str) -> bool:
    return bool(text) and all(_is_token_char(char) for char in text)


def _consume_token(text: str) -> tuple[str, str]:
    """Go's consumeToken: the leading run of token characters, and the rest."""
    end = next((index for index, char in enumerate(text) if not _is_token_char(char)), len(text))
    return text[:end], text[end:]


def parse_media_type(value: str) -> tuple[str, dict[str, str]]:
    """Go's mime.ParseMediaType for the shapes a Content-Type takes: the lower-cased type and its
    parameters; ValueError with Go's text for the rest (a subset: no RFC 2231 continuations)."""
    head, _, rest = value.partition(";")
    media = head.strip().lower()
    # checkMediaTypeDisposition: the subtype is optional (a Content-Disposition has none)
    kind, after = _consume_token(media)
    if not kind:
        raise ValueError("mime: no media type")
    if after:
        if not after.startswith("/"):
            raise ValueError("mime: expected slash after first token")
        subtype, after = _consume_token(after[1:])
        if not subtype:
            raise ValueError("mime: expected token after slash")
        if after:
            raise ValueError("mime: unexpected content after media subtype")
    params: dict[str, str] = {}
    for part in rest.split(";"):
        part = part.strip()
        if not part:
            continue
        key, equals, raw = part.partition("=")
        key = key.strip().lower()
        raw = raw.strip()
        quoted = len(raw) >= 2 and raw[0] == raw[-1] == '"'
        if not equals or not _is_token(key) or not (quoted or _is_token(raw)):
            raise ValueError("mime: invalid media parameter")
        if key in params:
            raise ValueError("mime: duplicate parameter name")
        params[key] = raw[1:-1].replace('\\"', '"') if quoted else raw
    return media, params


def names_envelope(content_type: str) -> bool:
    """IsCompressedEnvelopeContentType: True for the envelope, False for anything else that parses;
    ValueError (Go's words) for a type that does not parse or an envelope of another version."""
    if not content_type.strip():
        return False
    try:
        media, params = parse_media_type(content_type)
    except ValueError as error:
        raise ValueError(f"parse content type: {error}") from None
    if media != MEDIA_TYPE:
        return False
    if params.get("version") != VERSION:
        raise ValueError(UNSUPPORTED_VERSION)
    return True


def accepts_envelope(accept: str) -> bool:
    """AcceptsCompressedEnvelope: one comma-separated value of Accept names the envelope, version 1."""
    for value in accept.split(","):
        try:
            if names_envelope(value.strip()):
                return True
        except ValueError:
            continue
    return False
