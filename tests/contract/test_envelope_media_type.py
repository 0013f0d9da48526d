"""engram_contract.envelope's reading of a Content-Type, as Go's mime.ParseMediaType reads it (stdlib
mime/mediatype.go: checkMediaTypeDisposition, consumeToken, isTokenChar), which v3's
IsCompressedEnvelopeContentType calls (internal/cloud/chunkcodec/envelope.go@7a823197; predicted).
The subtype is optional there (a Content-Disposition has none), and the first token is the longest
run of token characters, so each error names the first place the text stops being a media type."""

from __future__ import annotations

import pytest

from engram_sync_kit.engram_contract.envelope import (
    CONTENT_TYPE,
    accepts_envelope,
    names_envelope,
    parse_media_type,
)


@pytest.mark.parametrize(
    ("value", "media", "params"),
    [
        ("garbage", "garbage", {}),  # no subtype: valid, and not the envelope
        ("Attachment; filename=x.txt", "attachment", {"filename": "x.txt"}),
        (" Text/Plain ", "text/plain", {}),
        ("a/b;;version=1;", "a/b", {"version": "1"}),  # empty parameters are skipped, not the end
        ('a/b; q=""; version=1', "a/b", {"q": "", "version": "1"}),  # a quoted empty value
        ('a/b; title="say \\"hi\\" now"', "a/b", {"title": 'say "hi" now'}),
        ("a/b; Version=1", "a/b", {"version": "1"}),
        ("a~!#$%&'*+-.^_`|/b", "a~!#$%&'*+-.^_`|/b", {}),  # every token character that is not a letter
    ],
)
def test_what_go_parses(value: str, media: str, params: dict[str, str]) -> None:
    assert parse_media_type(value) == (media, params)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("", "mime: no media type"),
        ("@", "mime: no media type"),
        ("@/plain", "mime: no media type"),
        ("te@xt/plain", "mime: expected slash after first token"),
        ("text plain", "mime: expected slash after first token"),
        ("text\x7f/plain", "mime: expected slash after first token"),  # DEL is a control, not a token char
        ("application/", "mime: expected token after slash"),
        ("text/ plain", "mime: expected token after slash"),
        ("text/plain x", "mime: unexpected content after media subtype"),
        ("text/pl(ain", "mime: unexpected content after media subtype"),
        ("text/plain\x7f", "mime: unexpected content after media subtype"),
        ("a/b; charset", "mime: invalid media parameter"),
        ("a/b; @=1", "mime: invalid media parameter"),
        ("a/b; k=@", "mime: invalid media parameter"),
        ('a/b; k="', "mime: invalid media parameter"),  # one quote is not a quoted string
        ("a/b; k=1; K=2", "mime: duplicate parameter name"),
    ],
)
def test_what_go_refuses_in_its_words(value: str, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_media_type(value)
    assert str(caught.value) == error


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        ("garbage", False),
        ("attachment", False),
        ("  ", False),
        (CONTENT_TYPE, True),
        ("te@xt/plain", "parse content type: mime: expected slash after first token"),
        ("application/vnd.engram.sync+gzip; version=2", "unsupported compressed envelope version"),
    ],
)
def test_names_envelope(value: str, answer: bool | str) -> None:
    if isinstance(answer, bool):
        assert names_envelope(value) is answer
        return
    with pytest.raises(ValueError) as caught:
        names_envelope(value)
    assert str(caught.value) == answer


def test_accept_reads_past_a_value_that_does_not_parse() -> None:
    assert accepts_envelope(f"te@xt/plain, {CONTENT_TYPE}")
    assert accepts_envelope(f"application/vnd.engram.sync+gzip; version=2, {CONTENT_TYPE}")
    assert not accepts_envelope("te@xt/plain, garbage")
