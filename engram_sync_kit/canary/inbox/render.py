"""The inbox as text: `inbox list` and `inbox show`, rendered from the selection's snapshot and summaries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engram_sync_kit.canary.derive import UNSORTED
from engram_sync_kit.canary.inbox.selection import NO_PROJECT_KEY, InboxRow, KeySummary, payload_object
from engram_sync_kit.canary.text import printable, utc_iso


def undecodable_note(seqs: tuple[int, ...], shown: int = 20) -> str | None:
    """The line `inbox list` and `show` end with when inbox rows were left out for their bytes."""
    if not seqs:
        return None
    listed = ", ".join(str(seq) for seq in seqs[:shown]) + (", ..." if len(seqs) > shown else "")
    rows = "1 inbox row" if len(seqs) == 1 else f"{len(seqs)} inbox rows"
    its = "its payload is" if len(seqs) == 1 else "their payloads are"
    return (
        f"note: {rows} left out, {its} not valid UTF-8 (seq {listed}); "
        "`engram-canary check` reports it as undecodable_payload"
    )


@dataclass(frozen=True)
class WaitingMemory:
    """One waiting memory as `inbox show` lists it: enough to decide between claim and drop."""

    seq: int
    entity: str
    kind: str
    title: str
    date: str
    first_line: str
    cwd: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "entity": self.entity,
            "type": self.kind,
            "title": self.title,
            "date": self.date,
            "first_line": self.first_line,
            "cwd": self.cwd,
        }


FIRST_LINE_CHARS = 120


def waiting_memory(row: InboxRow) -> WaitingMemory:
    body = payload_object(row.payload)

    def text(name: str) -> str:
        value = body.get(name)
        return value.strip() if isinstance(value, str) else ""

    content = next((line.strip() for line in text("content").splitlines() if line.strip()), "")
    if len(content) > FIRST_LINE_CHARS:
        content = content[: FIRST_LINE_CHARS - 1] + "…"
    kind = text("type") or text("relation_type") or row.entity
    title = text("title") or row.entity_key
    if row.op == "delete":
        title += " (deleted)"
    return WaitingMemory(
        seq=row.seq,
        entity=row.entity,
        kind=kind,
        title=title,
        date=text("created_at") or row.occurred_at,
        first_line=content,
        cwd=row.cwd,
    )


def render_memories(key: str, memories: Sequence[WaitingMemory], telemetry: int) -> str:
    lines = [
        f"inbox key {key!r}: {len(memories)} memories waiting"
        + (f" (and {telemetry} telemetry rows, not listed)" if telemetry else "")
    ]
    for memory in memories:
        lines.append(f"{memory.seq:>8}  {memory.date:<19}  {memory.kind:<12} {memory.title}")
        if memory.first_line:
            lines.append(f"{'':>8}  {memory.first_line}")
        if key == UNSORTED and memory.cwd:
            lines.append(f"{'':>8}  cwd {memory.cwd}")
    return "\n".join(printable(line) for line in lines)


def render_text(summaries: Iterable[KeySummary], unattributed: KeySummary | None = None) -> str:
    summaries = list(summaries)
    if summaries:
        lines = [_render_keys(summaries)]
    elif unattributed is None:
        lines = ["inbox: empty (every unacked legacy-lane row belongs to an enrolled project)"]
    else:
        lines = ["inbox: empty (every unacked legacy-lane row with a project belongs to an enrolled project)"]
    if unattributed is not None:
        lines.append(
            f"{NO_PROJECT_KEY}: {unattributed.count} memories and {unattributed.telemetry} telemetry rows, oldest "
            f"{utc_iso(unattributed.oldest) or '-'} ({unattributed.oldest_age_days:.1f}d): {unattributed.hint}"
        )
    return "\n".join(lines)  # _render_keys escapes the keys and cwds; the rest is the canary's own text


def _render_keys(summaries: list[KeySummary]) -> str:
    memories = sum(summary.count for summary in summaries)
    telemetry = sum(summary.telemetry for summary in summaries)
    lines = [
        f"inbox: {memories} memories and {telemetry} telemetry rows in {len(summaries)} keys "
        "(not enrolled: engram's worker never delivers them)",
        f"{'KEY':<32} {'MEMORIES':>8} {'TELEMETRY':>9}  {'OLDEST':<20} {'AGE':>8}  ENTITIES",
    ]
    for summary in summaries:
        entities = " ".join(f"{name}={count}" for name, count in sorted(summary.entities.items()))
        lines.append(
            f"{summary.key:<32} {summary.count:>8} {summary.telemetry:>9}  {utc_iso(summary.oldest) or '-':<20} "
            f"{summary.oldest_age_days:>7.1f}d  {entities}"
        )
        for cwd, count in sorted(summary.cwds.items(), key=lambda item: (-item[1], item[0])):
            gone = " (no longer exists)" if cwd in summary.missing_cwds else ""
            lines.append(f"    cwd {cwd}: {count}{gone}")
            if cwd in summary.cwd_claim_commands:
                lines.append(f"      claim: {summary.cwd_claim_commands[cwd]}")
        if summary.key != UNSORTED:
            lines.extend(f"    cwd {cwd} no longer exists" for cwd in summary.missing_cwds)
        if summary.claim_command:
            lines.append(f"    claim: {summary.claim_command}")
        if summary.drop_command:
            lines.append(f"    drop: {summary.drop_command} (telemetry only: nothing to claim)")
        if summary.hint:
            lines.append(f"    note: {summary.hint}")
    return "\n".join(printable(line) for line in lines)
