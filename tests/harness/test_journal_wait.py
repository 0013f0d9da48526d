"""After a manual sync the harness waits on the fake's /_fake/wait, not on a loop over the journal."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.errors import StepFailed
from harness.steps import await_journal
from harness.world import CloudHandle


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[CloudHandle]:
    handle = CloudHandle("inprocess", None, ["*"], tmp_path / "cloud.log")
    try:
        yield handle
    finally:
        handle.close()


def test_the_wait_parks_on_the_fake_until_a_newer_entry_arrives(cloud: CloudHandle) -> None:
    with httpx.Client(base_url=cloud.base_url) as http:
        http.get("/health")
        mark = cloud.client.journal().entries[-1].id

        def request_once_parked() -> None:
            deadline = time.monotonic() + 20
            while cloud.client.stats()["waiting"] != 1:  # asleep in /_fake/wait, not polling
                assert time.monotonic() < deadline
                time.sleep(0.01)
            http.get("/health")

        requester = threading.Thread(target=request_once_parked)
        requester.start()
        try:
            await_journal(cloud.client, mark, timeout=20, what="the manual sync's requests")
        finally:
            requester.join()
    assert [entry.id > mark for entry in cloud.client.journal(since_id=mark).entries] == [True]


def test_nothing_new_fails_the_step_in_one_line_with_the_fakes_answer(cloud: CloudHandle) -> None:
    with pytest.raises(StepFailed) as caught:
        await_journal(
            cloud.client, 0, timeout=0.2, what="the fake cloud to journal the manual sync's requests"
        )
    message = str(caught.value)
    assert message.startswith(
        "timed out after 0s waiting for the fake cloud to journal the manual sync's requests (wait: 0 of 1 "
    )
    assert "\n" not in message
