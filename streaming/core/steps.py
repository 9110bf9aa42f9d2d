"""How a micro-batch is cut into steps so that grouped = sequential (docs/architecture.md,
"Grouped = sequential"). Pure.

Most actions only *write* their target: their changes fold per key, so any number of them share
one write per table. An action that *reads* a table (a source schema, a MERGE/REPLACE scope, a
REFRESH) must see every earlier change to that table, so it cannot share a write with an earlier
action that writes what it reads:

- **segments** cut the batch between transactions: a transaction that reads a table written by an
  earlier transaction of the segment starts a new segment. Each segment is validated, applied
  and, on failure, rolled back on its own, so one bad transaction never harms another.
- **waves** cut a segment between actions, when an action reads what an earlier action of the
  same transaction wrote. Such a transaction is a segment of its own.

Each wave writes each of its tables once; a batch without read-after-write (the common case:
requests that load files) is one segment of one wave.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["Step", "Transaction", "segments", "waves"]


class Step(Protocol):
    """What the cutting needs to know of a load: the tables it reads and the one it writes."""

    @property
    def reads(self) -> frozenset[str]: ...

    @property
    def writes(self) -> str: ...


L = TypeVar("L", bound=Step)


def waves(loads: Sequence[L]) -> list[list[L]]:
    """Cut ``loads`` (in order) before every load that reads a table written in the current wave."""
    out: list[list[L]] = []
    written: set[str] = set()
    for load in loads:
        if not out or load.reads & written:
            out.append([])
            written = set()
        out[-1].append(load)
        written.add(load.writes)
    return out


class Transaction(Protocol):
    """A transaction as the cutting sees it: its loads in order."""

    @property
    def loads(self) -> Sequence[Step]: ...


T = TypeVar("T", bound=Transaction)


def segments(transactions: Sequence[T]) -> list[list[T]]:
    """Cut ``transactions`` (in order) into segments: see the module docstring."""
    out: list[list[T]] = []
    written: set[str] = set()
    solo = False
    for tx in transactions:
        reads = frozenset().union(*(load.reads for load in tx.loads))
        alone = len(waves(tx.loads)) > 1
        if not out or solo or alone or reads & written:
            out.append([])
            written = set()
        out[-1].append(tx)
        written.update(load.writes for load in tx.loads)
        solo = alone
    return out
