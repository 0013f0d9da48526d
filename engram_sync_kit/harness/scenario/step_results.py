"""What a step recorded for the checks (`as: NAME`): one frozen, typed result per step kind, in one store.

A check names the result it judges (`of: NAME`); `StepResults.get` hands it over only when the step
that recorded it is of a kind the check can read, and otherwise raises a LookupError whose text the
check reports in one line. The JSON evidence (results.json) is each result's `as_json()`, unchanged
from the days of the untyped dict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypeVar

SAVE_RESULT_PREFIX = "save:"


@dataclass(frozen=True)
class StatusInboxLine:
    """The inbox line of `engram cloud status` (design section 'surfaces')."""

    memories: int
    keys: int
    oldest_days: int | None


def save_result_name(label: str) -> str:
    """The name a labelled save's answer is kept under (`save_answer` and `inbox_row` checks read it)."""
    return SAVE_RESULT_PREFIX + label


@dataclass(frozen=True)
class StepResult:
    step: ClassVar[str]

    def as_json(self) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class CommandOutput(StepResult):
    """A command that ran: its exit code and what it printed."""

    step: ClassVar[str] = "run"
    exit: int
    stdout: str
    stderr: str

    def as_json(self) -> dict[str, Any]:
        return {"exit": self.exit, "stdout": self.stdout, "stderr": self.stderr}


@dataclass(frozen=True)
class RunResult(CommandOutput):
    step: ClassVar[str] = "run"


@dataclass(frozen=True)
class EnrollResult(CommandOutput):
    step: ClassVar[str] = "enroll"


@dataclass(frozen=True)
class EngramInboxResult(CommandOutput):
    step: ClassVar[str] = "engram_inbox"


@dataclass(frozen=True)
class CloudStatusResult(CommandOutput):
    step: ClassVar[str] = "cloud_status"
    inbox: StatusInboxLine | None = None

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "inbox": None if self.inbox is None else asdict(self.inbox)}


@dataclass(frozen=True)
class UnsupportedResult(StepResult):
    """A step this engram version has no interface for: a check on it says why it has no output."""

    step: ClassVar[str] = "unsupported"
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"unsupported": self.reason}


@dataclass(frozen=True)
class SaveResult(StepResult):
    """What a labelled save answered: the MCP/HTTP answer, or the CLI's exit and output."""

    step: ClassVar[str] = "save"
    via: str
    cwd: str
    answer: Mapping[str, Any] | None = None
    command: CommandOutput | None = None
    sync_id: str | None = None

    @property
    def stderr(self) -> str:
        return self.command.stderr if self.command is not None else ""

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"via": self.via, "cwd": self.cwd}
        if self.answer is not None:
            shown["answer"] = self.answer
        if self.command is not None:
            shown.update(self.command.as_json())
        if self.sync_id is not None:
            shown["sync_id"] = self.sync_id
        return shown


@dataclass(frozen=True)
class CanaryResult(StepResult):
    step: ClassVar[str] = "canary"
    exit: int
    report: Mapping[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"exit": self.exit, "report": self.report}


@dataclass(frozen=True)
class InboxListResult(StepResult):
    step: ClassVar[str] = "inbox"
    exit: int
    keys: tuple[Mapping[str, Any], ...]

    def as_json(self) -> dict[str, Any]:
        return {"exit": self.exit, "keys": list(self.keys)}


@dataclass(frozen=True)
class DoctorResult(StepResult):
    """`engram doctor --json`, as it printed it."""

    step: ClassVar[str] = "doctor"
    report: Mapping[str, Any]

    @property
    def checks(self) -> list[Mapping[str, Any]]:
        listed = self.report.get("checks")
        return [check for check in listed if isinstance(check, Mapping)] if isinstance(listed, list) else []

    def as_json(self) -> Mapping[str, Any]:
        return self.report


@dataclass(frozen=True)
class HttpResult(StepResult):
    step: ClassVar[str] = "http"
    status: int
    body: Any

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "body": self.body}


ResultT = TypeVar("ResultT", bound=StepResult)


@dataclass
class StepResults:
    """The results of a scenario's labelled steps, by name; every device of the scenario shares one."""

    by_name: dict[str, StepResult] = field(default_factory=dict)
    #: the labels the scenario's steps keep their results under (`as:`), each with its step's line: a
    #: label that is declared but missing belongs to a step that never ran
    declared: dict[str, int] = field(default_factory=dict)

    def record(self, name: str, result: StepResult) -> None:
        self.by_name[name] = result

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_name)

    def __len__(self) -> int:
        return len(self.by_name)

    def get(self, name: str, kind: type[ResultT], step: str, *, key: str | None = None) -> ResultT:
        """The result NAME (stored under KEY if given) as KIND; a LookupError in one line otherwise."""
        found = self.by_name.get(key or name)
        if found is None and name in self.declared:
            raise LookupError(
                f"no {step} result named {name!r}: its step (line {self.declared[name]}) did not run, "
                "because an earlier step failed or the scenario stopped before it"
            )
        if found is None:
            raise LookupError(
                f"no {step} result named {name!r}: add a `{step}:` step (as: {name}) before the checks"
            )
        if isinstance(found, UnsupportedResult):
            raise LookupError(f"{name}: the step did not run: {found.reason}")
        if not isinstance(found, kind):
            raise LookupError(
                f"{name!r} was recorded by a `{found.step}` step; this check reads what `{step}` records"
            )
        return found

    def as_json(self) -> dict[str, Any]:
        return {name: result.as_json() for name, result in self.by_name.items()}
