"""The two proofs of `engram-canary reconcile`, with real parts:

- the real v1.20 client pushes, by chunk and by autosync, to the REAL `engram cloud serve` v1.20 on
  Postgres: reconcile reports zero lost; a row the real cloud then loses is reported, and only it;
- the same client against the fake cloud with the ack_without_store fault (answers 200 with
  accepted_seqs, stores nothing: the engram #264/#298 silent loss): reconcile reports exactly the rows
  the fault swallowed, no more and no fewer.

The real server speaks plain http and its no-auth mode refuses every project route (403), so it runs
with a token behind fake_cloud.tls_front: reconcile reads it over https, as it must when sending a token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_parts import missing
from reconcile_support import TOKEN, Ran, journal, run_reconcile, sync_both_ways
from schema_under_test import copies_opened_as_v2_v3

from engram_sync_kit.fake_cloud.real_server import RealCloudError, psql, real_cloud_server, throwaway_postgres
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.fake_cloud.tls_front import tls_front

pytestmark = [pytest.mark.engram]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    try:
        with throwaway_postgres() as url:
            yield url
    except RealCloudError as error:
        reason = f"no PostgreSQL for the real cloud server: {error}"
        missing(reason)


def verdict(ran: Ran) -> tuple[int, object, object, object]:
    document = json.loads(ran.stdout)
    summary = {key: value for key, value in document["summary"].items() if key != "seconds"}
    return ran.returncode, summary, document["lanes"], document["lost"]


def same_verdict_on_v2_v3(db: Path, env: dict[str, str], on_v120: Ran, directory: Path) -> None:
    """The home is too costly to sync three times (tests/engram_schemas/per_version.py): the v2/v3 runs read
    copies of it opened as v2 and v3 (predicted from source), against the same cloud."""
    for version, copy in copies_opened_as_v2_v3(db, directory):
        assert verdict(run_reconcile(copy, env, "--format", "json")) == verdict(on_v120), version


def expected_rows(db: Path) -> dict[str, list[int]]:
    """Local seqs per project, from the journal."""
    out: dict[str, list[int]] = {}
    for seq, project, _, _, _ in journal(db):
        out.setdefault(project, []).append(seq)
    return out


@pytest.mark.xdist_group("reconcile-real-cloud")
def test_real_client_to_real_cloud_loses_nothing(engram_bin: Path, postgres_url: str, tmp_path: Path) -> None:
    with (
        real_cloud_server(engram_bin, postgres_url, token=TOKEN, allowed_projects=["alpha", "beta"]) as real,
        tls_front(real.base_url, tmp_path / "ca.pem") as front,
    ):
        env = {
            "ENGRAM_CLOUD_SERVER": front.base_url,
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "SSL_CERT_FILE": str(front.ca_file),
        }
        synced = sync_both_ways(engram_bin, tmp_path / "world", env)
        rows = journal(synced.db)
        acked = [seq for seq, project, _, _, at in rows if at is not None]
        relation = [
            seq for seq, _, entity, key, _ in rows if entity == "relation" and key == synced.relation_key
        ]

        ran = run_reconcile(synced.db, env, "--format", "json")
        text = run_reconcile(synced.db, env)
        same_verdict_on_v2_v3(synced.db, env, ran, tmp_path / "versions")

        psql(real.database_url, f"DELETE FROM cloud_mutations WHERE entity_key = '{synced.relation_key}'")
        after_loss = run_reconcile(synced.db, env, "--format", "json")
        same_verdict_on_v2_v3(synced.db, env, after_loss, tmp_path / "versions-after-loss")

    document = json.loads(ran.stdout)
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stdout
    summary = document["summary"]
    assert summary["acked"] == len(acked) == len([r for r in rows if r[1] in ("alpha", "beta")])
    assert (summary["lost"], summary["delivered"]) == (0, len(acked))
    assert summary["delivered_via"]["chunk"] > 0  # the chunk path's rows
    assert summary["delivered_via"]["mutation"] > 0  # autosync's rows
    assert summary["not_expected"] == 2  # gamma: never enrolled, never expected
    assert {lane["project"]: lane["lost"] for lane in document["lanes"]} == {
        "alpha": 0,
        "beta": 0,
        "gamma": 0,
    }
    assert len(relation) == 1
    assert text.returncode == 0
    assert text.stdout.splitlines()[0].startswith(
        f"ENGRAM-CANARY-RECONCILE OK - all {len(acked)} acked rows are in the cloud https://127.0.0.1:"
    )

    lost = json.loads(after_loss.stdout)
    assert after_loss.returncode == 2
    assert [row["seq"] for row in lost["lost"]] == relation
    assert lost["lost"][0]["entity"] == "relation"
    assert lost["summary"]["lost"] == 1


def test_ack_without_store_is_found_exactly(engram_bin: Path, tmp_path: Path) -> None:
    with start_fake_cloud(FakeCloudConfig(token=TOKEN, tls=True, server_version="v1.20")) as cloud:
        env = {
            "ENGRAM_CLOUD_SERVER": cloud.base_url,
            "ENGRAM_CLOUD_TOKEN": TOKEN,
            "SSL_CERT_FILE": str(cloud.ca_file),
        }
        cloud.client.add_faults(
            [{"route": "mutations_push", "action": "ack_without_store", "project": "beta"}]
        )
        synced = sync_both_ways(engram_bin, tmp_path / "world", env)
        swallowed = [
            entry
            for entry in cloud.client.journal().entries
            if entry.path == "/sync/mutations/push" and entry.project == "beta"
        ]
        stored_beta = [item for item in cloud.client.received() if item.project == "beta"]

        ran = run_reconcile(synced.db, env, "--format", "json")
        text = run_reconcile(synced.db, env)
        same_verdict_on_v2_v3(synced.db, env, ran, tmp_path / "versions")

    rows = journal(synced.db)
    beta = [(seq, entity, key) for seq, project, entity, key, at in rows if project == "beta"]
    assert all(at is not None for _, project, _, _, at in rows if project == "beta")  # the client acked them
    assert stored_beta == []  # and the cloud kept none
    assert sorted((e.entity, e.entity_key) for e in swallowed) == sorted(
        (entity, key) for _, entity, key in beta
    )

    document = json.loads(ran.stdout)
    assert ran.returncode == 2
    assert [(row["seq"], row["entity"], row["entity_key"]) for row in document["lost"]] == beta
    assert {lane["project"]: lane["lost"] for lane in document["lanes"]} == {
        "alpha": 0,
        "beta": len(beta),
        "gamma": 0,
    }
    assert document["summary"]["lost"] == len(beta)
    assert text.stdout.splitlines()[0].startswith(
        f"ENGRAM-CANARY-RECONCILE CRITICAL - {len(beta)} of {document['summary']['acked']} acked rows are not in the cloud"
    )
