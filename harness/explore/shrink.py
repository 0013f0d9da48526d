"""Delta debugging (Zeller's ddmin) over a history's steps: the smallest sub-list that still shows the
violation. Candidates of one granularity are played side by side (they mostly wait on engram)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


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
        for start in range(0, len(candidates), max(1, jobs)):
            if deadline is not None and time.monotonic() > deadline:
                return None
            batch = candidates[start : start + max(1, jobs)]
            if jobs > 1 and len(batch) > 1:
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    answers = list(pool.map(test, batch))
            else:
                answers = [test(candidate) for candidate in batch]
            for candidate, answer in zip(batch, answers, strict=True):
                if answer:
                    return candidate
        return None

    parts = 2
    while len(current) >= 2:
        if deadline is not None and time.monotonic() > deadline:
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
