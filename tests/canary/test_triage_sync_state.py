"""What `inbox drop --apply` does to the `cloud` lane's sync_state while engram's worker is failing, with
the real engram v1.20.0 worker (`engram serve`, autosync) against the fake cloud.

engram v1.20 (tag v1.20.0, commit ba9e46ced152c37a7cb9e576153c41995873e2fc) keeps the worker's failure
count and backoff in memory (internal/cloud/autosync/manager.go, recordFailureWithReason and cycle) and
writes them to sync_state only as the outcome of a cycle: MarkSyncFailure (consecutive_failures + 1,
backoff_until, last_error) and MarkSyncHealthy (internal/store/store.go). AckSyncMutationSeqs clears the
failure record, but the worker calls it only after the cloud accepted a push. A triage ack has no such
evidence, so it keeps the failure record: only the worker's next cycle changes it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from inbox_support import canary, engram_ok, engram_serve, query, save

from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, Route
from engram_sync_kit.fake_cloud.server import FakeCloudConfig, start_fake_cloud
from engram_sync_kit.harness.engram.env import EngramEnvironment
from engram_sync_kit.harness.polling import eventually

pytestmark = pytest.mark.engram

TOKEN = "t"
FAILURE_FIELDS = ("lifecycle", "consecutive_failures", "backoff_until", "reason_code", "last_error")


def lane(world: EngramEnvironment) -> dict[str, Any]:
    columns = ", ".join((*FAILURE_FIELDS, "last_acked_seq"))
    [row] = query(world.db_path, f"SELECT {columns} FROM sync_state WHERE target_key = 'cloud'")
    return dict(zip((*FAILURE_FIELDS, "last_acked_seq"), row, strict=True))


def failures(world: EngramEnvironment) -> int:
    return int(lane(world)["consecutive_failures"] or 0)


def test_drop_keeps_the_failure_record_of_a_failing_worker(engram_world: EngramEnvironment) -> None:
    world = engram_world
    engram_ok(world, "cloud", "enroll", "main-proj")
    save(world, "main-proj", "kept decision")
    for title in ("side one", "side two"):
        save(world, "side", title)  # not enrolled: inbox rows, dropped below
    config = FakeCloudConfig(token=TOKEN, allowed_projects=("main-proj",), server_version="v1.20")
    with start_fake_cloud(config) as cloud:
        cloud.client.add_faults(
            [Fault(route=Route.MUTATIONS_PUSH, action=FaultAction.STATUS, status=503, times=1000)]
        )
        with engram_serve(
            world, ENGRAM_CLOUD_AUTOSYNC="1", ENGRAM_CLOUD_TOKEN=TOKEN, ENGRAM_CLOUD_SERVER=cloud.base_url
        ) as server:

            def one_more_failed_cycle() -> int:
                before = failures(world)
                server.post(
                    "/sessions", {"id": f"s-{before}", "project": "main-proj", "directory": str(world.home)}
                )
                return eventually(
                    lambda: failures(world) if failures(world) > before else None,
                    timeout=60,
                    what="a failed cycle of engram's worker",
                    error=AssertionError,
                )

            for _ in range(2):  # several failed cycles (one a 30 s tick); each ends in MarkSyncFailure
                one_more_failed_cycle()
            before = lane(world)
            assert before["lifecycle"] == "degraded" and before["consecutive_failures"] >= 2
            assert before["last_error"]
            # The backoff has run out (not "actively degraded" in v1.20's terms): where the issue saw the reset.
            backoff_until = datetime.fromisoformat(str(before["backoff_until"]).replace("Z", "+00:00"))
            time.sleep(max(0.0, (backoff_until - datetime.now(UTC)).total_seconds()) + 0.5)
            before = lane(world)

            dropped = canary(world, "inbox", "drop", "--project", "side", "--apply")
            assert dropped.returncode == 0, dropped.stdout + dropped.stderr
            after = lane(world)
            [(side_max,)] = query(world.db_path, "SELECT max(seq) FROM sync_mutations WHERE project = 'side'")
            assert {name: after[name] for name in FAILURE_FIELDS} == {
                name: before[name] for name in FAILURE_FIELDS
            }
            assert after["last_acked_seq"] == max(int(before["last_acked_seq"] or 0), int(side_max))

            # The worker's next failure counts on from the same number it keeps in memory.
            assert one_more_failed_cycle() == int(before["consecutive_failures"]) + 1
            cloud.client.clear_faults()
            server.post("/sessions", {"id": "s-healed", "project": "main-proj", "directory": str(world.home)})
            eventually(
                lambda: True if lane(world)["lifecycle"] == "healthy" else None,
                timeout=90,
                what="the worker's next successful cycle",
                error=AssertionError,
            )
    healed = lane(world)
    assert (healed["consecutive_failures"], healed["last_error"], healed["backoff_until"]) == (0, None, None)
