"""The filed engram bugs a refusal or a loss belongs to, so a finding can name the class it rediscovers.

From the upstream issues themselves: #742 (autosync pushes a row with an empty project and the cloud
answers 400 "mutation entries must specify a project"), #1224 (a session upsert without `directory`,
refused on every retry), #264/#298 (the cloud answered 200 and never stored the rows), #1273 (while rows of
an unenrolled project wait, v1.20's autosync cycle ends before its pull: replication to the machine stops).
"""

from __future__ import annotations

from typing import Final

from engram_sync_kit.engram_contract.push_rules import PushRefusal

ISSUES_URL: Final = "https://github.com/Gentleman-Programming/engram/issues/"
#: the payload field a refusal names (PushRefusal.field) -> the upstream issue of that class
ISSUE_BY_REFUSED_FIELD: Final = {"project": 742, "directory": 1224}
#: a push answered as stored whose rows the cloud does not hold
SILENT_LOSS_ISSUE: Final = 264
#: a worker cycle that never pulls because unrelated local rows wait
WORKER_PULL_BLOCKED_ISSUE: Final = 1273


def issue_for_refusal(refusal: PushRefusal | None) -> int | None:
    """The upstream issue whose class a refusal of one of engram's own rows is, or None."""
    if refusal is None or refusal.field is None:
        return None
    return ISSUE_BY_REFUSED_FIELD.get(refusal.field)


def issue_name(issue: int) -> str:
    return f"engram#{issue}"
