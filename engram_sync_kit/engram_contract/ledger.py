"""The one ledger rule: which local journal rows the cloud holds a copy of.

A row and a copy match on (entity, entity_key, op, payload digest). Identical rows (engram v1.20 re-queues
the same session row on every `engram mcp` save) form a multiset: each needs its own copy, and a copy is
given once. A copy goes to the waiting row of its key that needs it most, then to the one of lowest seq:

1. OWED: acked where this copy could come from; without a copy it is lost.
2. PENDING: not acked yet; with a copy it was delivered, its ack still to come.
3. SETTLED: acked before the run (an earlier cloud holds its copy) or on purpose (the kit's triage); it
   needs no copy from this cloud, so it takes only a copy no identical OWED or PENDING row waits for.

Giving a copy to a row of a lower rank while one of a higher rank waits would show a loss that the cloud
disproves: the rank order is what makes the count of lost rows the least any assignment allows.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Hashable, Iterator, MutableSequence
from enum import IntEnum
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")
C = TypeVar("C")


class Need(IntEnum):
    OWED = 0
    PENDING = 1
    SETTLED = 2


def need_of(*, acked: bool, settled: bool) -> Need:
    """A row's need: SETTLED (acked before the run, or by triage) outranks its ack."""
    if settled:
        return Need.SETTLED
    return Need.OWED if acked else Need.PENDING


class Ledger(Generic[K, R]):
    """Rows waiting for their copy, by key; each copy taken is given to one row, in RANK order.

    RANK is (need, seq) of a row. One row per key is held bare, not in a list: a journal of a million
    mostly distinct rows holds no million lists.
    """

    def __init__(self, rank: Callable[[R], tuple[int, int]]) -> None:
        self._rank = rank
        self._waiting: dict[K, R | list[R]] = {}

    def add(self, key: K, row: R) -> None:
        present = self._waiting.setdefault(key, row)
        if present is row:
            return
        if isinstance(present, list):
            insort(present, row, key=self._rank)
        else:
            pair = [present]
            insort(pair, row, key=self._rank)
            self._waiting[key] = pair

    def take(self, key: K) -> R | None:
        """The row a copy of KEY goes to, no longer waiting; None when no row of KEY waits (a surplus copy)."""
        present = self._waiting.pop(key, None)
        if present is None or not isinstance(present, list):
            return present
        row = present.pop(0)
        self._waiting[key] = present[0] if len(present) == 1 else present
        return row

    def waits_for(self, key: K) -> bool:
        return key in self._waiting

    def __bool__(self) -> bool:
        return bool(self._waiting)  # a key stays only while a row of it waits

    def __len__(self) -> int:
        return sum(len(present) if isinstance(present, list) else 1 for present in self._waiting.values())

    def remaining(self) -> list[R]:
        """The rows no copy was given to, in rank order."""
        return sorted(self._rows(), key=self._rank)

    def _rows(self) -> Iterator[R]:
        for present in self._waiting.values():
            if isinstance(present, list):
                yield from present
            else:
                yield present

    def take_fitting(
        self, key_of: Callable[[R], K], copies: MutableSequence[C], fits: Callable[[R, C], bool]
    ) -> list[tuple[R, C]]:
        """A second door, for copies that carry a row without its digest (a chunk's current state): each
        remaining row, in rank order, takes the first copy it FITS; a copy is taken once."""
        given: list[tuple[R, C]] = []
        for row in self.remaining():
            index = next((i for i, copy in enumerate(copies) if fits(row, copy)), None)
            if index is None:
                continue
            given.append((row, copies.pop(index)))
            self._remove(key_of(row), row)
        return given

    def _remove(self, key: K, row: R) -> None:
        present = self._waiting[key]
        if isinstance(present, list):
            del present[next(i for i, held in enumerate(present) if held is row)]
            if len(present) == 1:
                self._waiting[key] = present[0]
        else:
            del self._waiting[key]
