"""The fake's copies of Go's own rules (issue 35, item 18), pinned without a server: ServeMux's path
cleaning and segment routing, http.Redirect's Location, and encoding/json's quoting of a bad byte. The
raw differential (test_review_raw_differential.py) holds the same cases against the real v1.20."""

from __future__ import annotations

import pytest

from engram_sync_kit.fake_cloud import routes
from engram_sync_kit.fake_cloud.wire import go_quote_char


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("/", "/"),
        ("/health", "/health"),
        ("//health", "/health"),
        ("/sync//mutations/push", "/sync/mutations/push"),
        ("/sync/./mutations/push", "/sync/mutations/push"),
        ("/sync/x/../mutations/push", "/sync/mutations/push"),
        ("/a/../health/", "/health/"),
        ("/../..", "/"),
        ("/.", "/"),
        ("/sync/pull/", "/sync/pull/"),
        ("/%3Cx%3E//", "/%3Cx%3E/"),
    ],
)
def test_paths_are_cleaned_as_go_cleans_them(raw: str, clean: str) -> None:
    assert routes.clean_path(raw) == clean


def test_the_redirect_escapes_the_clean_path_again_and_keeps_the_query() -> None:
    assert routes.redirect_location("/%3Cx%3E/", "") == "/%253Cx%253E/"
    assert routes.redirect_location("/x", "q=1&r=2") == "/x?q=1&r=2"


@pytest.mark.parametrize(
    ("raw", "route"),
    [
        ("/sync/mutations/push", routes.MUTATIONS_PUSH),
        ("/%73ync/mutations/push", routes.MUTATIONS_PUSH),  # each segment is unescaped on its own
        ("/sync%2Fmutations/push", None),  # %2F stays inside its segment
        ("/sync/mutations%2Fpush", None),
        ("/sync/pull/a%2Fb", routes.CHUNK_READ),
        ("/sync/pull/", None),
        ("/sync/pull/a/b", None),
    ],
)
def test_routes_match_escaped_segments(raw: str, route: routes.SyncRoute | None) -> None:
    assert routes.match(raw, "v1.20") is route


def test_a_chunk_id_is_its_unescaped_segment() -> None:
    assert routes.last_segment("/sync/pull/a%2Fb") == "a/b"


@pytest.mark.parametrize(
    ("byte", "quoted"),
    [
        (0x01, "'\\x01'"),
        (0x09, "'\\t'"),
        (0x1F, "'\\x1f'"),
        (0x27, "'\\''"),
        (0x22, "'\"'"),
        (0x5C, "'\\\\'"),
        (0x78, "'x'"),
        (0x7F, "'\\x7f'"),
        (0x80, "'\\u0080'"),
        (0xA0, "'\\u00a0'"),
        (0xA1, "'¡'"),
        (0xAD, "'\\u00ad'"),
        (0xFF, "'ÿ'"),
    ],
)
def test_a_bad_first_byte_is_quoted_as_go_quotes_it(byte: int, quoted: str) -> None:
    assert go_quote_char(byte) == quoted
