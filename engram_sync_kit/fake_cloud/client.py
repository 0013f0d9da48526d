"""A typed client for the fake cloud's control API (/_fake/), the same for every way of running it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx

from engram_sync_kit.fake_cloud.errors import FakeCloudError
from engram_sync_kit.fake_cloud.faults import Fault, FaultAction, Route
from engram_sync_kit.fake_cloud.state import JournalEntry, ReceivedMutation


class FakeCloudWaitTimeout(FakeCloudError):
    """wait() saw fewer matching journal entries than asked for before its timeout."""

    def __init__(
        self, message: str, closest: list[dict[str, Any]], found: list[JournalEntry] | list[ReceivedMutation]
    ) -> None:
        super().__init__(message)
        self.closest = closest
        self.found = found


class FakeCloudControlError(FakeCloudError):
    """The control API refused a request, or could not be reached."""


class FakeCloudInternalError(FakeCloudError):
    """The fake recorded a bug of its own: what a test saw is the fake's fault, not engram's."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(
            f"the fake cloud hit an internal error on {first.get('where')}: {first.get('error')}{more}; "
            "this is a bug in the fake, not an engram delivery failure"
        )
        self.errors = errors


@dataclass(frozen=True)
class Journal:
    entries: list[JournalEntry]
    overflow: int


_ENTRY_FIELDS = {f.name for f in fields(JournalEntry)}
_RECEIVED_FIELDS = {f.name for f in fields(ReceivedMutation)}


def _entry(raw: dict[str, Any]) -> JournalEntry:
    return JournalEntry(**{key: value for key, value in raw.items() if key in _ENTRY_FIELDS})


def _received(raw: dict[str, Any]) -> ReceivedMutation:
    return ReceivedMutation(**{key: value for key, value in raw.items() if key in _RECEIVED_FIELDS})


class FakeCloudClient:
    """Control a running fake cloud over HTTP(S); usable as a context manager."""

    def __init__(
        self,
        base_url: str,
        ca_file: Path | str | None = None,
        *,
        timeout: float = 10.0,
        control_token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        verify: Any = str(ca_file) if ca_file is not None else True
        # UTF-8 bytes: the token as the fake compares it (httpx would refuse a non-ASCII str)
        headers = {b"Authorization": f"Bearer {control_token}".encode()} if control_token else {}
        self._http = httpx.Client(
            base_url=self.base_url, verify=verify, timeout=timeout, trust_env=False, headers=headers
        )

    def __enter__(self) -> FakeCloudClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            if timeout is not None:
                kwargs["timeout"] = timeout
            return self._http.request(method, f"/_fake/{path}", **kwargs)
        except httpx.HTTPError as error:
            raise FakeCloudControlError(
                f"fake cloud at {self.base_url} did not answer {path}: {error}"
            ) from None

    def _ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        if response.status_code != 200:
            raise FakeCloudControlError(
                f"/_fake/{path} answered {response.status_code}: {response.text.strip()}"
            )
        return response.json()

    def ready(self) -> bool:
        try:
            return self._http.get("/_fake/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def reset(self) -> None:
        self._ok("POST", "reset")

    def journal(self, since_id: int = 0) -> Journal:
        raw = self._ok("GET", "journal", params={"since_id": since_id})
        return Journal(entries=[_entry(item) for item in raw["entries"]], overflow=int(raw["overflow"]))

    def wait(
        self, count: int = 1, timeout: float = 10.0, *, since_id: int = 0, **match: Any
    ) -> list[JournalEntry]:
        """Block until ``count`` journal entries match every ``match`` field; raise FakeCloudWaitTimeout."""
        body = {"count": count, "timeout": timeout, "match": match, "since_id": since_id}
        return [_entry(item) for item in self._wait(body, timeout)]

    def wait_received(
        self,
        count: int = 1,
        timeout: float = 10.0,
        *,
        since_seq: int = 0,
        match: Mapping[str, Any] | None = None,
    ) -> list[ReceivedMutation]:
        """Block until the fake has stored ``count`` mutations matching every ``match`` field (payload
        aside); raise FakeCloudWaitTimeout, whose ``closest`` are stored mutations without payloads."""
        body = {
            "of": "received",
            "count": count,
            "timeout": timeout,
            "match": dict(match or {}),
            "since_seq": since_seq,
        }
        return [_received(item) for item in self._wait(body, timeout)]

    def _wait(self, body: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        response = self._call("POST", "wait", json=body, timeout=timeout + 10.0)
        if response.status_code == 408:
            raw = response.json()
            read = _received if body.get("of") == "received" else _entry
            found: Any = [read(item) for item in raw.get("found", [])]
            raise FakeCloudWaitTimeout(raw["error"], raw.get("closest", []), found)
        if response.status_code != 200:
            raise FakeCloudControlError(
                f"/_fake/wait answered {response.status_code}: {response.text.strip()}"
            )
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    def received(self, since_seq: int = 0) -> list[ReceivedMutation]:
        """Accepted mutations with seq > since_seq, in the order of receipt."""
        raw = self._ok("GET", "received", params={"since_seq": since_seq})["received"]
        return [_received(item) for item in raw]

    def set_allowlist(self, projects: Sequence[str]) -> list[str]:
        return list(self._ok("PUT", "allowlist", json={"projects": list(projects)})["projects"])

    def pause(self, project: str, paused: bool = True) -> None:
        self._ok("PUT", "pause", json={"project": project, "paused": paused})

    def add_faults(self, faults: Iterable[Fault | dict[str, Any]]) -> None:
        payload = [fault.to_dict() if isinstance(fault, Fault) else fault for fault in faults]
        self._ok("POST", "faults", json={"faults": payload})

    def ack_without_store(
        self, *, route: Route = Route.MUTATIONS_PUSH, project: str | None = None, times: int = 1
    ) -> None:
        """The next ``times`` matching pushes answer 200 as usual but nothing reaches pull or the manifest."""
        self.add_faults(
            [Fault(route=route, action=FaultAction.ACK_WITHOUT_STORE, project=project, times=times)]
        )

    def errors(self) -> list[dict[str, Any]]:
        """The fake's own internal errors since start (or the last check), oldest first."""
        return list(self._ok("GET", "errors")["errors"])

    def check(self) -> None:
        """Raise FakeCloudInternalError if the fake recorded internal errors, and forget them (like
        pytest-httpserver's check_assertions): call it when a test or a run is done with the fake."""
        errors = self.errors()
        if errors:
            self._ok("DELETE", "errors")
            raise FakeCloudInternalError(errors)

    def stats(self) -> dict[str, Any]:
        """Each bounded store's size and dropped count, the reset epoch and the internal error count."""
        return dict(self._ok("GET", "stats"))

    def clear_faults(self) -> None:
        self._ok("DELETE", "faults")
