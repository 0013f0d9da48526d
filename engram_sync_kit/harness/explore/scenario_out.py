"""A history as a scenario document in the harness's own format (docs/scenarios.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from engram_sync_kit.harness.explore.operations import WORKSPACES, RawStep

SCENARIO_TIMEOUT = 120.0  # seconds for the steps that do not wait on the worker
CYCLE_ALLOWANCE = 50.0  # seconds per worker cycle a step waits for


def _worker_wait(raw: RawStep) -> float:
    """Seconds a step may wait on the worker: CYCLE_ALLOWANCE a cycle, or its own longer `timeout:` (a
    cycle after `daemon: kill` waits out the dead worker's lease)."""
    sync = raw.get("sync")
    if isinstance(sync, dict) and sync.get("via") == "autosync":
        return max(CYCLE_ALLOWANCE * int(sync.get("cycles", 1)), float(sync.get("timeout", 0)))
    return 0


def scenario_document(
    name: str,
    steps: Sequence[RawStep],
    *,
    autosync: bool,
    description: str = "",
    expectations: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "tags": ["explore"],
        "timeout": SCENARIO_TIMEOUT + sum(_worker_wait(raw) for raw in steps),
        "cloud": {"autosync": autosync},
        "workspaces": WORKSPACES,
        "steps": list(steps),
        "expect": list(expectations),
    }


def scenario_yaml(document: dict[str, Any], header_comment: str = "") -> str:
    comment = "".join(f"# {line}\n" for line in header_comment.splitlines())
    return comment + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=110)


_EXITED = re.compile(r"^(.*? exited \d+)")
_ANSWERED = re.compile(r"^(.*? answered \d+)")


def expected_error(error: str) -> str:
    """The stable head of a step's error, for `expect_error:` (`engram save exited 1`, `... answered 500`)."""
    for pattern in (_EXITED, _ANSWERED):
        match = pattern.match(error)
        if match:
            return match.group(1)
    return ""  # any error: "" is in every message


def inner_step_path(record_index: str) -> tuple[int, ...]:
    """Where in a history step the failed step sits: explore plays step N as `N.1`, a nested one as `N.1.k`."""
    return tuple(int(part) for part in record_index.split(".")[2:])


def with_expected_error(raw: RawStep, error: str, inner: tuple[int, ...] = ()) -> RawStep:
    """RAW, marked to fail as it failed when explore played it (a failed step ends a replay otherwise).

    A `device:` step takes no `expect_error`: its step at INNER is marked, and the steps after
    it, which explore never played, are cut."""
    ((name, body),) = raw.items()
    if name == "device":
        if not inner:
            return raw
        children = list(body["steps"])
        position = inner[0] - 1
        children[position + 1 :] = []
        children[position] = with_expected_error(children[position], error, inner[1:])
        return {name: {**body, "steps": children}}
    if not isinstance(body, dict):
        shorthand = {"enroll": "project", "unenroll": "project", "daemon": "action", "end_session": "id"}
        body = {shorthand[name]: body}
    return {name: {**body, "expect_error": expected_error(error)}}
