"""Scheduled misbehaviour: which requests a fault matches, what it does, and how the control API
spells it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, TypeVar

from engram_sync_kit.fake_cloud.errors import FakeCloudError

BODILESS_STATUSES = frozenset({204, 304})  # and 1xx, below the fault API's range: no final answer
MAX_KEEP = 100  # short_accepted keeps at most a whole batch

E = TypeVar("E", bound=Enum)


class Route(str, Enum):
    MUTATIONS_PUSH = "mutations_push"
    MUTATIONS_PULL = "mutations_pull"
    CHUNK_PUSH = "chunk_push"
    CHUNK_PULL = "chunk_pull"
    ANY = "any"


class FaultAction(str, Enum):
    STATUS = "status"
    LATENCY = "latency"
    RESET_AFTER_READ = "reset_after_read"
    SHORT_ACCEPTED = "short_accepted"
    HANG = "hang"  # no answer for `seconds`, then the connection dropped: a client's timeout, not a status
    TRUNCATE_BODY = "truncate_body"  # the usual answer's head, half its body, then the connection closed
    SLOW_BODY = "slow_body"  # the usual answer, its body trickled over `seconds`
    # On a pull route: every row of a 200 answer twice (a pull page, the manifest's chunks, a chunk's rows).
    DUPLICATE_ROWS = "duplicate_rows"
    # Answer 200 exactly as normal, journal it, store nothing: the silent loss of engram #264/#298.
    ACK_WITHOUT_STORE = "ack_without_store"


class InvalidControlRequest(FakeCloudError):
    """A control API request the fake cannot act on; the message says what is allowed."""


@dataclass
class Fault:
    """One scheduled misbehaviour, consumed ``times`` times by the requests it matches."""

    route: Route = Route.ANY
    action: FaultAction = FaultAction.STATUS
    project: str | None = None
    times: int = 1
    status: int = 503
    latency_ms: int = 200
    keep: int = 0
    seconds: float = 5.0
    host: str | None = None  # only requests whose Host header names this host: one machine partitioned

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "fault") -> Fault:
        if not isinstance(raw, Mapping):
            raise InvalidControlRequest(f"{where}: expected an object, got {type(raw).__name__}")
        known = {"route", "action", "project", "times", "status", "latency_ms", "keep", "seconds", "host"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidControlRequest(f"{where}: unknown field(s) {unknown}; allowed: {sorted(known)}")
        route = _member(Route, raw.get("route", "any"), f"{where}.route")
        action = _member(FaultAction, raw.get("action", "status"), f"{where}.action")
        project = raw.get("project")
        if project is not None and not isinstance(project, str):
            raise InvalidControlRequest(f"{where}.project: expected a string or null")
        host = raw.get("host")
        if host is not None and (not isinstance(host, str) or not host.strip()):
            raise InvalidControlRequest(f"{where}.host: expected a host name or null")
        fault = cls(route=route, action=action, project=project, host=host.strip().lower() if host else None)
        for name, low, high in (("times", 1, 1_000_000), ("status", 200, 599), ("latency_ms", 0, 600_000)):
            if name in raw:
                setattr(fault, name, _int_in(raw[name], low, high, f"{where}.{name}"))
        if fault.status in BODILESS_STATUSES:
            raise InvalidControlRequest(
                f"{where}.status: {fault.status} cannot carry the fault's error body; use 200 or 205-599 "
                "except 304"
            )
        if "keep" in raw:
            fault.keep = _int_in(raw["keep"], 0, MAX_KEEP, f"{where}.keep")
        if "seconds" in raw:
            value = raw["seconds"]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 600:
                raise InvalidControlRequest(
                    f"{where}.seconds: expected a number from 0 to 600, got {value!r}"
                )
            fault.seconds = float(value)
        return fault

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["route"], out["action"] = self.route.value, self.action.value
        return out

    def matches(self, route: Route, projects: Sequence[str], host: str = "") -> bool:
        if self.route not in (Route.ANY, route):
            return False
        if self.host is not None and self.host != host:
            return False
        return self.project is None or self.project in projects


def request_host(header: str) -> str:
    """The host name of a Host header, without its port, lowercased ("[::1]:80" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _member(kind: type[E], value: Any, where: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise InvalidControlRequest(f"{where}: {value!r} is not one of {[m.value for m in kind]}") from None


def _int_in(value: Any, low: int, high: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidControlRequest(f"{where}: expected an integer from {low} to {high}, got {value!r}")
    return int(value)
