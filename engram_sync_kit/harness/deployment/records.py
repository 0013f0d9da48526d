"""The simulated rows before they reach SQLite: engram's time text, Go's JSON, and the sync journal."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from engram_sync_kit.engram_contract import go_json

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def to_text(moment: datetime) -> str:
    return moment.strftime(TIME_FORMAT)


_DAYS: dict[int, str] = {}
_CLOCK = tuple(f" {s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" for s in range(86400))
quote = json.encoder.encode_basestring


def stamp(epoch: int) -> str:
    """engram's TEXT time ('YYYY-MM-DD HH:MM:SS', UTC); day and clock tables keep a million rows cheap."""
    day, second = divmod(epoch, 86400)
    text = _DAYS.get(day)
    if text is None:
        text = _DAYS[day] = time.strftime("%Y-%m-%d", time.gmtime(day * 86400))
    return text + _CLOCK[second]


def epoch_of(moment: datetime) -> int:
    return int(moment.replace(tzinfo=UTC).timestamp())


@dataclass
class Session:
    id: str
    project: str
    directory: str
    started: int


@dataclass
class Observation:
    sync_id: str
    session: Session
    type: str
    title: str
    content: str
    tool_name: str | None
    topic_key: str | None
    created: int
    updated: int
    revisions: int = 1

    def payload(self) -> str:
        """syncObservationPayload of the observation's current state."""
        body: dict[str, Any] = {
            "sync_id": self.sync_id,
            "session_id": self.session.id,
            "type": self.type,
            "title": self.title,
            "content": self.content,
        }
        if self.tool_name is not None:
            body["tool_name"] = self.tool_name
        body["project"] = self.session.project
        body["scope"] = "project"
        if self.topic_key is not None:
            body["topic_key"] = self.topic_key
        body["revision_count"] = self.revisions
        body["duplicate_count"] = 1
        body["created_at"] = stamp(self.created)
        body["updated_at"] = stamp(self.updated)
        return go_json(body, sort_keys=False)


class Prompt(NamedTuple):
    created: int
    sync_id: str
    session: Session
    content: str


class Relation(NamedTuple):
    sync_id: str
    source_id: str
    target_id: str
    verb: str
    reason: str
    confidence: float
    session_id: str
    created: int


# One mutation before it gets its seq: (when, order, target, entity, key, op, payload, project, acked).
# A plain tuple typed position by position: a million are built, and a named tuple costs about a
# tenth more time per deployment. Events sort by (when, order): time, then creation order.
JournalEvent = tuple[int, int, str, str, str, str, str, str, bool]


@dataclass
class Journal:
    events: list[JournalEvent] = field(default_factory=list)

    def add(
        self, when: int, target: str, entity: str, key: str, op: str, payload: str, project: str, acked: bool
    ) -> None:
        self.events.append((when, len(self.events), target, entity, key, op, payload, project, acked))
