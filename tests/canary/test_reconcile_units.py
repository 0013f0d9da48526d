"""reconcile's pure parts: the --since binary search over the cloud's seq space, --since parsing, where
the cloud settings come from, and the matcher's doors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram_sync_kit.canary.cloud_client import (
    CloudMutation,
    CloudReader,
    CloudSettings,
    CloudSettingsError,
    PullPage,
    resolve_settings,
)
from engram_sync_kit.canary.reconcile import Journal, LocalRow, Matcher, ReconcileError, parse_since
from engram_sync_kit.engram_contract import payload_digest

T0 = datetime(2026, 11, 1, tzinfo=UTC)


class LogReader(CloudReader):
    """A CloudReader whose pull answers from a list, like ListMutationsSince: seq > since, in seq order."""

    def __init__(self, log: list[CloudMutation]) -> None:
        self.log = log
        self.requests = 0

    def pull_page(self, since_seq: int, limit: int = 100) -> PullPage:
        self.requests += 1
        after = [m for m in self.log if m.seq > since_seq]
        return PullPage(after[:limit], len(after) > limit)


def stored(seq: int, minutes: int) -> CloudMutation:
    at = (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")
    return CloudMutation(seq, "alpha", "observation", f"obs-{seq}", "upsert", {}, at)


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[CloudMutation], datetime]:
    """Seqs with gaps (other tenants' rows the allowlist hides), times that never go backwards."""
    gaps = draw(st.lists(st.integers(1, 50), max_size=300))
    steps = draw(st.lists(st.integers(0, 3), min_size=len(gaps), max_size=len(gaps)))
    seq, minute, log = 0, 0, []
    for gap, step in zip(gaps, steps, strict=True):
        seq, minute = seq + gap, minute + step
        log.append(stored(seq, minute))
    cutoff = T0 + timedelta(minutes=draw(st.integers(-5, minute + 5)))
    return log, cutoff


@settings(max_examples=300, deadline=None)
@given(logs())
def test_start_seq_pulls_exactly_the_rows_at_or_after_the_cutoff(
    case: tuple[list[CloudMutation], datetime],
) -> None:
    log, cutoff = case
    reader = LogReader(log)

    since = reader.start_seq_for(cutoff)

    wanted = [m.seq for m in log if datetime.fromisoformat(m.occurred_at.replace("Z", "+00:00")) >= cutoff]
    assert [m.seq for m in log if m.seq > since] == wanted
    assert reader.requests <= 4 + 2 * max(1, (log[-1].seq if log else 1)).bit_length()


def test_start_seq_is_logarithmic_on_a_big_log() -> None:
    reader = LogReader([stored(seq, seq // 100) for seq in range(1, 100_001)])

    since = reader.start_seq_for(T0 + timedelta(minutes=900))

    assert since == 89_999
    assert reader.requests <= 40


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", T0 - timedelta(hours=24)),
        ("7d", T0 - timedelta(days=7)),
        ("90m", T0 - timedelta(minutes=90)),
        ("1d12h", T0 - timedelta(hours=36)),
        ("2026-10-01T00:00:00Z", datetime(2026, 10, 1, tzinfo=UTC)),
        ("2026-10-01 00:00:00", datetime(2026, 10, 1, tzinfo=UTC)),
    ],
)
def test_parse_since(text: str, expected: datetime) -> None:
    assert parse_since(text, T0) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "24", "h", "-1h", "1y"])
def test_parse_since_refuses(text: str) -> None:
    with pytest.raises(ReconcileError, match="expected a duration like 24h"):
        parse_since(text, T0)


def test_settings_flags_win_over_environment_over_cloud_json(tmp_path: Path) -> None:
    (tmp_path / "cloud.json").write_text(
        json.dumps({"server_url": "https://stored:1", "token": "stored-token"})
    )
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    environment = {"ENGRAM_CLOUD_SERVER": "https://env:2", "ENGRAM_CLOUD_TOKEN": "env-token"}

    stored_only = resolve_settings(tmp_path, environ={})
    from_env = resolve_settings(tmp_path, environ=environment)
    from_flags = resolve_settings(tmp_path, url="https://flag:3/", token_file=token_file, environ=environment)

    assert (stored_only.url, stored_only.token, stored_only.url_source) == (
        "https://stored:1",
        "stored-token",
        str(tmp_path / "cloud.json"),
    )
    assert (from_env.url, from_env.token, from_env.token_source) == (
        "https://env:2",
        "env-token",
        "ENGRAM_CLOUD_TOKEN",
    )
    assert (from_flags.url, from_flags.token, from_flags.token_source) == (
        "https://flag:3",
        "file-token",
        "--cloud-token-file",
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host", "is not an http\\(s\\) URL with a host"),
        ("https://", "is not an http\\(s\\) URL with a host"),
        ("https://host/?x=1", "query and fragment are not allowed"),
        ("http://127.0.0.1:8080", "refusing to send the cloud token over plain http"),
    ],
)
def test_settings_refuse(tmp_path: Path, url: str, message: str) -> None:
    with pytest.raises(CloudSettingsError, match=message):
        resolve_settings(tmp_path, url=url, environ={"ENGRAM_CLOUD_TOKEN": "t"})


def test_no_token_allows_plain_http_and_ssl_cert_file_is_the_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not used here")

    chosen = resolve_settings(tmp_path, url="http://127.0.0.1:8080", environ={"SSL_CERT_FILE": str(ca)})

    assert chosen == CloudSettings("http://127.0.0.1:8080", None, ca, "--cloud-url", None)


def local(seq: int, entity: str, key: str, payload: Mapping[str, object]) -> LocalRow:
    digest = bytes.fromhex(payload_digest(payload))
    return LocalRow(seq, "cloud", "alpha", (entity, key, "upsert", digest), "2026-11-30 10:00:00")


def test_matcher_doors_and_identical_rows() -> None:
    """Two byte-identical rows need two copies; a chunk's current row carries an older payload's fields."""
    session = {"id": "s1", "project": "alpha", "directory": "/w"}
    observation = {"sync_id": "obs-1", "title": "t", "content": "c", "project": "Alpha"}
    rows = [
        local(1, "session", "s1", session),
        local(2, "session", "s1", session),
        local(3, "observation", "obs-1", observation),
    ]
    matcher = Matcher(Journal(rows, {}, {"s1", "obs-1"}, frozenset({"alpha"})))

    matcher.pulled(CloudMutation(10, "alpha", "session", "s1", "upsert", session, ""))
    matcher.chunk({"observations": [{**observation, "project": "alpha", "type": "manual"}]})
    matcher.pulled(CloudMutation(11, "beta", "observation", "obs-other", "upsert", {}, ""))
    missing = matcher.settle({3: observation})

    assert [row.seq for row in missing] == [2]
    assert matcher.via == {"mutation": 1, "current_state": 1}
    assert dict(matcher.cloud_only) == {"beta": 1}
