"""`engram-canary reconcile` on a world where the real engram v1.20 synced through `engram sync --cloud`
(the chunk path) to the fake cloud over HTTPS with a token: delivered, lost, the window, the three
output formats, and a one-line UNKNOWN for every bad answer a cloud can give.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from canary_support import rows_digest
from engram_schemas.builder import V120
from engram_schemas.open_as import open_as
from reconcile_support import (
    TOKEN,
    Ran,
    canned,
    closed_port,
    engram,
    http_answer,
    journal,
    reconcile_here,
    run_reconcile,
    save_memories,
)

from engram_sync_kit.canary.report import RECONCILE_TEXTFILE_PREFIX, textfile_name
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, RunningFakeCloud, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment

pytestmark = pytest.mark.engram

PREFIX = "ENGRAM-CANARY-RECONCILE"


@dataclass
class Synced:
    world: EngramEnvironment
    cloud: RunningFakeCloud
    env: dict[str, str]

    @property
    def db(self) -> Path:
        return self.world.db_path


def cloud_env(cloud: RunningFakeCloud, token: str = TOKEN) -> dict[str, str]:
    return {
        "ENGRAM_CLOUD_SERVER": cloud.base_url,
        "ENGRAM_CLOUD_TOKEN": token,
        "SSL_CERT_FILE": str(cloud.ca_file),
    }


@pytest.fixture(scope="module")
def synced_home(engram_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    """alpha (enrolled): 3 memories pushed by `engram sync --cloud`; beta: 1 memory, never enrolled."""
    world = EngramEnvironment(binary=engram_bin, root=tmp_path_factory.mktemp("reconcile")).prepare()
    save_memories(world, "alpha", 3)
    save_memories(world, "beta", 1)
    engram(world, "cloud", "enroll", "alpha")
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as cloud:
        env = cloud_env(cloud)
        engram(world, "sync", "--cloud", "--project", "alpha", env=env)
        yield Synced(world, cloud, env)


@pytest.fixture(scope="module")
def synced_per_version() -> dict[str, Synced]:
    return {}


@pytest.fixture
def synced(synced_home: Synced, engram_schema: str, synced_per_version: dict[str, Synced]) -> Synced:
    """The module's one synced home, read as the test's engram version: on v2/v3 a copy of it opened as
    that version (predicted from source; tests/engram_schemas/per_version.py), made once per module."""
    if engram_schema == V120:
        return synced_home
    if engram_schema not in synced_per_version:
        home = synced_home.world
        world = EngramEnvironment(
            binary=home.binary, root=home.root.with_name(f"{home.root.name}-{engram_schema}")
        )
        world.prepare()
        with (
            contextlib.closing(sqlite3.connect(f"file:{home.db_path}?mode=ro", uri=True)) as source,
            contextlib.closing(sqlite3.connect(world.db_path)) as target,
        ):
            source.backup(target)
        open_as(engram_schema, world.db_path)
        synced_per_version[engram_schema] = Synced(world, synced_home.cloud, synced_home.env)
    return synced_per_version[engram_schema]


@pytest.fixture
def empty_cloud() -> Iterator[RunningFakeCloud]:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as cloud:
        yield cloud


def acked_seqs(db: Path) -> list[int]:
    return [seq for seq, _, _, _, acked in journal(db) if acked is not None]


def test_rows_the_chunk_path_acked_are_delivered(synced: Synced) -> None:
    assert acked_seqs(synced.db) == [1, 2, 3, 4, 5, 6]

    ran = run_reconcile(synced.db, synced.env)

    assert (ran.returncode, ran.stderr) == (0, "")
    lines = ran.stdout.splitlines()
    assert lines[0] == (
        f"{PREFIX} OK - all 6 acked rows are in the cloud {synced.cloud.base_url} | lost=0;;1;0 "
        "delivered=6;;;0 pending=0;;;0 cloud_only=0;;;0 not_expected=2;;;0"
    )
    assert lines[1:3] == [
        "lane cloud project alpha: acked 6, delivered 6, lost 0, pending 0",
        "lane cloud project beta: not enrolled, 2 rows never expected in the cloud",
    ]
    assert re.fullmatch(
        r"delivered via mutation pull \d, chunk \d, current state 0; cloud-only rows \(other devices\) 0; "
        r"read 4 cloud rows and 1 chunks in 3 requests",
        lines[3],
    )


def test_json_document(synced: Synced) -> None:
    ran = reconcile_here(synced.db, synced.env, "--format", "json")

    assert ran.returncode == 0
    document = json.loads(ran.stdout)
    assert document["schema"] == "engram-canary/reconcile/v1"
    assert document["status"] == "ok"
    assert document["error"] is None
    assert document["lost"] == []
    assert document["lanes"] == [
        {
            "lane": "cloud",
            "project": "alpha",
            "enrolled": True,
            "acked": 6,
            "delivered": 6,
            "lost": 0,
            "pending": 0,
            "not_expected": 0,
            "triaged": 0,
        },
        {
            "lane": "cloud",
            "project": "beta",
            "enrolled": False,
            "acked": 0,
            "delivered": 0,
            "lost": 0,
            "pending": 0,
            "not_expected": 2,
            "triaged": 0,
        },
    ]
    summary = document["summary"]
    assert summary["delivered_via"]["chunk"] + summary["delivered_via"]["mutation"] == 6
    assert summary["delivered_via"]["chunk"] >= 3  # observations arrive as chunk payloads, not as pull rows
    assert (summary["acked"], summary["lost"], summary["pending"], summary["cloud_only"]) == (6, 0, 0, 0)
    assert summary["enrolled_projects"] == ["alpha"]


def test_an_empty_cloud_loses_every_acked_row_with_evidence(
    synced: Synced, empty_cloud: RunningFakeCloud
) -> None:
    rows = {seq: (entity, key, acked) for seq, _, entity, key, acked in journal(synced.db)}

    ran = reconcile_here(synced.db, cloud_env(empty_cloud))
    as_json = json.loads(reconcile_here(synced.db, cloud_env(empty_cloud), "--format", "json").stdout)

    assert (ran.returncode, ran.stderr) == (2, "")
    lines = ran.stdout.splitlines()
    assert lines[0].startswith(
        f"{PREFIX} CRITICAL - 6 of 6 acked rows are not in the cloud {empty_cloud.base_url} | lost=6;;1;0"
    )
    assert lines[1] == "lane cloud project alpha: acked 6, delivered 0, lost 6, pending 0"
    lost_lines = [line for line in lines if line.startswith("[LOST]")]
    assert lost_lines == [
        f"[LOST] seq={seq} lane=cloud project=alpha {rows[seq][0]} {rows[seq][1]} op=upsert acked_at={rows[seq][2]}"
        for seq in range(1, 7)
    ]
    assert as_json["status"] == "critical"
    assert [row["seq"] for row in as_json["lost"]] == [1, 2, 3, 4, 5, 6]
    assert as_json["lost"][1] == {
        "seq": 2,
        "lane": "cloud",
        "project": "alpha",
        "entity": "observation",
        "entity_key": rows[2][1],
        "op": "upsert",
        "acked_at": rows[2][2],
    }


def test_prometheus_gauges_on_stdout_and_in_a_textfile(
    synced: Synced, empty_cloud: RunningFakeCloud, tmp_path: Path
) -> None:
    db = str(synced.db)

    ran = reconcile_here(
        synced.db, cloud_env(empty_cloud), "--format", "prometheus", "--textfile-dir", str(tmp_path)
    )

    assert ran.returncode == 2
    assert f'engram_canary_lost_rows{{db="{db}",project="alpha"}} 6.0' in ran.stdout.splitlines()
    assert f'engram_canary_reconcile_status{{db="{db}"}} 2.0' in ran.stdout.splitlines()
    written = (tmp_path / textfile_name(RECONCILE_TEXTFILE_PREFIX, db)).read_text()
    assert f'engram_canary_lost_rows{{db="{db}",project="alpha"}} 6.0' in written
    assert f'engram_canary_delivered_rows{{db="{db}",project="alpha"}} 0.0' in written


def test_since_window(synced: Synced) -> None:
    recent = json.loads(reconcile_here(synced.db, synced.env, "--since", "2h", "--format", "json").stdout)
    future = json.loads(
        reconcile_here(synced.db, synced.env, "--since", "2999-01-01T00:00:00Z", "--format", "json").stdout
    )

    assert recent["status"] == "ok"
    assert (recent["summary"]["acked"], recent["summary"]["delivered"]) == (6, 6)
    assert recent["since"] is not None
    assert future["status"] == "ok"
    assert (future["summary"]["acked"], future["summary"]["acked_before_window"]) == (0, 6)
    assert future["summary"]["cloud_rows_read"] == 0  # nothing acked in the window: the cloud is not read


def test_reconcile_only_reads(synced: Synced) -> None:
    before = rows_digest(synced.db)
    since_id = max((entry.id for entry in synced.cloud.client.journal().entries), default=0)

    assert reconcile_here(synced.db, synced.env).returncode == 0

    assert rows_digest(synced.db) == before
    requests = synced.cloud.client.journal(since_id).entries
    assert requests
    assert {entry.method for entry in requests} == {"GET"}
    assert {entry.path.split("?")[0].rsplit("/", 1)[0] for entry in requests} <= {
        "/sync/mutations",
        "/sync",
        "/sync/pull",
    }


def test_engram_cloud_json_supplies_url_and_token(synced: Synced, tmp_path: Path) -> None:
    """v1.20 reads <data dir>/cloud.json (server_url, token); the CA still comes from SSL_CERT_FILE."""
    data_dir = tmp_path / "engram-data"
    data_dir.mkdir()
    copy = data_dir / "engram.db"
    source = sqlite3.connect(f"file:{synced.db}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    with source, target:
        source.backup(target)
    source.close()
    target.close()
    (data_dir / "cloud.json").write_text(json.dumps({"server_url": synced.cloud.base_url, "token": TOKEN}))

    ran = reconcile_here(copy, {"SSL_CERT_FILE": synced.env["SSL_CERT_FILE"]})

    assert ran.returncode == 0, ran.stdout
    assert ran.stdout.startswith(f"{PREFIX} OK - all 6 acked rows are in the cloud {synced.cloud.base_url}")


# ----- every bad answer: one line, UNKNOWN (3), nothing on stderr -----


def assert_unknown(ran: Ran, pattern: str) -> None:
    assert ran.returncode == 3, ran
    assert ran.stderr == ""
    assert ran.stdout.count("\n") == 1, ran.stdout
    assert re.fullmatch(f"{PREFIX} UNKNOWN - {pattern}\n", ran.stdout), ran.stdout


def test_wrong_token_401(synced: Synced) -> None:
    ran = run_reconcile(synced.db, {**synced.env, "ENGRAM_CLOUD_TOKEN": "not-the-token"})

    assert_unknown(
        ran,
        r"GET /sync/mutations/pull: the cloud refused the token \(401 [^)]*\); token from ENGRAM_CLOUD_TOKEN",
    )


def test_forbidden_403(synced: Synced) -> None:
    synced.cloud.client.add_faults([{"route": "mutations_pull", "status": 403}])

    ran = reconcile_here(synced.db, synced.env)

    assert_unknown(
        ran,
        r"GET /sync/mutations/pull: the cloud forbids this read \(403 fake cloud fault: injected status 403\)",
    )


def test_forbidden_manifest_403(synced: Synced) -> None:
    synced.cloud.client.add_faults([{"route": "chunk_pull", "status": 403}])

    ran = reconcile_here(synced.db, synced.env)

    assert_unknown(
        ran, r"GET /sync/pull: the cloud forbids this read \(403 fake cloud fault: injected status 403\)"
    )


def test_server_error_500(synced: Synced) -> None:
    synced.cloud.client.add_faults([{"route": "mutations_pull", "status": 500}])

    assert_unknown(
        reconcile_here(synced.db, synced.env),
        r"GET /sync/mutations/pull: HTTP 500 fake cloud fault: injected status 500",
    )


def test_untrusted_certificate(synced: Synced) -> None:
    env = {k: v for k, v in synced.env.items() if k != "SSL_CERT_FILE"}

    ran = reconcile_here(synced.db, env)

    assert_unknown(
        ran,
        rf"GET /sync/mutations/pull on {re.escape(synced.cloud.base_url)}: TLS certificate not trusted "
        r"\(unable to get local issuer certificate; pass --cloud-ca or set SSL_CERT_FILE\)",
    )


def test_tls_handshake_with_a_plain_http_server(synced: Synced) -> None:
    with canned(http_answer("200 OK", b"{}")) as plain:
        url = f"https://127.0.0.1:{plain.port}"
        ran = reconcile_here(synced.db, {**synced.env, "ENGRAM_CLOUD_SERVER": url})

    assert_unknown(ran, rf"GET /sync/mutations/pull on {re.escape(url)}: TLS failure \(.+\)")


def test_connection_reset_after_the_request(synced: Synced) -> None:
    synced.cloud.client.add_faults([{"route": "mutations_pull", "action": "reset_after_read"}])

    ran = reconcile_here(synced.db, synced.env)

    assert_unknown(
        ran, rf"GET /sync/mutations/pull on {re.escape(synced.cloud.base_url)}: truncated answer \(.+\)"
    )


def test_a_cloud_that_never_answers(synced: Synced) -> None:
    synced.cloud.client.add_faults([{"route": "mutations_pull", "action": "hang", "seconds": 3}])

    ran = reconcile_here(synced.db, synced.env, "--timeout", "0.5")

    assert_unknown(
        ran,
        rf"GET /sync/mutations/pull on {re.escape(synced.cloud.base_url)}: not done within --timeout 0.5 s "
        r"\(1 requests\)",
    )


def test_server_down(synced: Synced) -> None:
    url = f"https://127.0.0.1:{closed_port()}"

    ran = reconcile_here(synced.db, {**synced.env, "ENGRAM_CLOUD_SERVER": url})

    assert_unknown(ran, rf"GET /sync/mutations/pull on {re.escape(url)}: cannot connect \(.+\)")


NO_TOKEN_PAGES = {
    # body cut short of its Content-Length: the connection closes mid-body
    "truncated body": (
        http_answer("200 OK", b'{"mutations": [{"seq": 1, "entity"', length=4096),
        r"GET /sync/mutations/pull on http://127\.0\.0\.1:\d+: truncated answer \(.+\)",
    ),
    # a complete HTTP answer whose JSON stops early
    "truncated JSON": (
        http_answer("200 OK", b'{"mutations": [{"seq": 1, "entity"'),
        r"GET /sync/mutations/pull: truncated or malformed JSON \(.+; 34 bytes\)",
    ),
    "has_more without rows": (
        http_answer("200 OK", b'{"mutations": [], "has_more": true, "latest_seq": 0}'),
        r"GET /sync/mutations/pull\?since_seq=0: truncated page \(has_more but no mutations\)",
    ),
    "seq going backwards": (
        http_answer(
            "200 OK",
            b'{"mutations": [{"seq": 0, "entity": "session", "entity_key": "s", "op": "upsert", "payload": {}}]}',
        ),
        r"GET /sync/mutations/pull\?since_seq=0: seq 0 does not increase past 0",
    ),
    "not an object": (
        http_answer("200 OK", b"[1, 2, 3]"),
        r"GET /sync/mutations/pull: answer has no 'mutations' list",
    ),
    "html error page": (
        http_answer("502 Bad Gateway", b"<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>"),
        r"GET /sync/mutations/pull: HTTP 502 <html><body> <h1>502 Bad Gateway</h1> </body></html>",
    ),
}


@pytest.mark.parametrize("case", sorted(NO_TOKEN_PAGES))
def test_bad_pages_without_a_token(synced: Synced, case: str) -> None:
    """Without a token plain http is allowed, so a raw socket can answer exactly these bytes."""
    answer, pattern = NO_TOKEN_PAGES[case]
    with canned(answer) as server:
        ran = reconcile_here(synced.db, {"ENGRAM_CLOUD_SERVER": server.url})

    assert_unknown(ran, pattern)


def test_a_cloud_that_drips_its_answer_byte_by_byte(synced: Synced) -> None:
    """Each read gets a byte in time, so only a deadline for the whole answer ends it."""
    body = json.dumps({"mutations": [], "has_more": False}).encode()
    with canned(http_answer("200 OK", body), drip_seconds=0.2) as server:
        ran = reconcile_here(synced.db, {"ENGRAM_CLOUD_SERVER": server.url}, "--timeout", "1")

    assert_unknown(
        ran,
        r"GET /sync/mutations/pull on http://127\.0\.0\.1:\d+: not done within --timeout 1 s \(1 requests\)",
    )


def test_a_huge_answer_is_cut_off(synced: Synced) -> None:
    size = 65 * 1024 * 1024
    with canned(http_answer("200 OK", b"[" + b" " * (size - 2) + b"]")) as server:
        ran = reconcile_here(synced.db, {"ENGRAM_CLOUD_SERVER": server.url})

    assert_unknown(ran, r"GET /sync/mutations/pull: answer larger than 64 MiB")


def test_deeply_nested_json(synced: Synced) -> None:
    depth = 100_000
    with canned(http_answer("200 OK", b"[" * depth + b"]" * depth)) as server:
        ran = reconcile_here(synced.db, {"ENGRAM_CLOUD_SERVER": server.url})

    assert_unknown(ran, r"GET /sync/mutations/pull: truncated or malformed JSON \(.+; 200000 bytes\)")


def test_a_token_is_never_sent_over_plain_http(synced: Synced) -> None:
    with canned(http_answer("200 OK", b"{}")) as server:
        ran = reconcile_here(synced.db, {"ENGRAM_CLOUD_SERVER": server.url, "ENGRAM_CLOUD_TOKEN": TOKEN})
        assert server.requests == []

    assert_unknown(
        ran,
        rf"refusing to send the cloud token over plain http to {re.escape(server.url)} \(from ENGRAM_CLOUD_SERVER\); "
        "use an https URL",
    )


def test_no_cloud_configured(synced: Synced) -> None:
    assert_unknown(
        reconcile_here(synced.db, {}),
        r"no cloud URL: pass --cloud-url, set ENGRAM_CLOUD_SERVER, or run `engram cloud config --server URL`",
    )


def test_bad_since(synced: Synced) -> None:
    assert_unknown(
        reconcile_here(synced.db, synced.env, "--since", "yesterday"),
        r"--since 'yesterday': expected a duration like 24h, 7d, 90m or an ISO time like 2026-11-30T12:00:00Z",
    )


def test_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "engram.db"

    ran = reconcile_here(missing, {"ENGRAM_CLOUD_SERVER": "https://127.0.0.1:9"})

    assert_unknown(ran, re.escape(f"{missing}: no such file (pass --db or set ENGRAM_DATA_DIR)"))


def test_broken_cloud_json(synced: Synced, tmp_path: Path) -> None:
    copy = tmp_path / "engram.db"
    shutil.copy(synced.db, copy)
    (tmp_path / "cloud.json").write_text('{"server_url": ')

    ran = reconcile_here(copy, {})

    assert_unknown(ran, rf"{re.escape(str(tmp_path / 'cloud.json'))}: not valid JSON \(.+\)")
