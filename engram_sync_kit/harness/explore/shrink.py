"""Shrinking a history: first whole operations dropped at once (every `nemesis` step, every manual sync,
...), then delta debugging (Zeller's ddmin) over what is left: the smallest sub-list that still shows the
violation. Candidates of one round are played side by side (they mostly wait on engram)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _batches(
    candidates: list[list[T]],
    test: Callable[[list[T]], bool],
    jobs: int,
    deadline: float | None,
    *,
    first_only: bool,
) -> list[bool]:
    """Each candidate's answer, JOBS at a time; once one holds (FIRST_ONLY) or DEADLINE passes, the rest
    are not played and count as not reproducing."""
    answers: list[bool] = []
    width = max(1, jobs)
    for start in range(0, len(candidates), width):
        batch = candidates[start : start + width]
        if _passed(deadline) or (first_only and any(answers)):
            answers.extend(False for _ in batch)
            continue
        if width > 1 and len(batch) > 1:
            with ThreadPoolExecutor(max_workers=width) as pool:
                answers.extend(pool.map(test, batch))
        else:
            answers.extend(test(candidate) for candidate in batch)
    return answers


def drop_groups(
    items: Sequence[T],
    group_of: Callable[[T], str],
    reproduces: Callable[[list[T]], bool],
    *,
    jobs: int = 1,
    deadline: float | None = None,
) -> list[T]:
    """ITEMS less every group (e.g. every step of one operation) whose removal still reproduces.

    Each round plays ITEMS less one group, for every group not yet known to be needed, side by side; the
    groups that could go are then dropped together when that still reproduces, else the one whose removal
    left the fewest items. A history is mostly steps the violation does not need, in a few operations, so
    this leaves ddmin a short list in two or three rounds where ddmin alone needs many more.
    """
    current = list(items)
    needed: set[str] = set()
    while not _passed(deadline):
        groups = sorted({group_of(item) for item in current} - needed)
        candidates = [[item for item in current if group_of(item) != group] for group in groups]
        answers = _batches(candidates, reproduces, jobs, deadline, first_only=False)
        if _passed(deadline):
            break  # an answer cut short by the deadline says nothing about its group
        needed.update(group for group, answer in zip(groups, answers, strict=True) if not answer)
        droppable = {group for group, answer in zip(groups, answers, strict=True) if answer}
        if not droppable:
            break
        together = [item for item in current if group_of(item) not in droppable]
        if len(droppable) > 1 and reproduces(together):
            current = together
            continue
        current = min(
            (candidate for candidate, answer in zip(candidates, answers, strict=True) if answer), key=len
        )
    return current


def _chunks(items: Sequence[T], parts: int) -> list[list[T]]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return [chunk for chunk in out if chunk]


def ddmin(
    items: Sequence[T],
    reproduces: Callable[[list[T]], bool],
    *,
    jobs: int = 1,
    deadline: float | None = None,
) -> list[T]:
    """A 1-minimal sub-list of ITEMS (order kept) for which REPRODUCES holds; ITEMS itself must reproduce.

    Stops early, with the smallest reproducing list found so far, once DEADLINE (time.monotonic) passes.
    """
    current = list(items)
    cache: dict[tuple[int, ...], bool] = {}
    index = {id(item): position for position, item in enumerate(current)}

    def test(candidate: list[T]) -> bool:
        key = tuple(index[id(item)] for item in candidate)
        if key not in cache:
            cache[key] = reproduces(candidate)
        return cache[key]

    def first_reproducing(candidates: list[list[T]]) -> list[T] | None:
        answers = _batches(candidates, test, jobs, deadline, first_only=True)
        return next(
            (candidate for candidate, answer in zip(candidates, answers, strict=True) if answer), None
        )

    parts = 2
    while len(current) >= 2:
        if _passed(deadline):
            break
        chunks = _chunks(current, parts)
        found = first_reproducing(chunks)
        if found is not None:
            current, parts = found, 2
            continue
        complements = [
            [item for other, chunk in enumerate(chunks) if other != skipped for item in chunk]
            for skipped in range(len(chunks))
        ]
        found = first_reproducing(complements) if len(chunks) > 2 else None
        if found is not None:
            current, parts = found, max(parts - 1, 2)
            continue
        if parts >= len(current):
            break
        parts = min(len(current), parts * 2)
    return current
