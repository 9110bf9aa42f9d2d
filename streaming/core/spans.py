"""Key spans: which id ranges of a current table can hold the stored rows of a batch's keys.

Delta keeps each data file's minimum and maximum ``id``. A batch changes a set of keys; a file
whose range holds none of them has no row the batch reads or rewrites. A predicate on ``id``
that Delta's data skipping evaluates against those ranges lets the stored-row read and the MERGE
pass over such files; a list of the keys themselves does that only up to a few thousand keys
(the list becomes the cost), a join never (Delta skips files on predicates, not joins).

So the files' ranges are merged into disjoint, ordered **spans** (overlapping files share one),
the spans that hold a key are found, and the predicate is "id in one of those spans". It holds
every stored row of every key of the batch: a key's row lies in a file whose range holds the
key, and that file's span is one of them. A key outside every span has no stored row.

Plain functions over small inputs: the Spark side (the files' ranges from Delta's log, the keys'
spans by a join when the keys are not on the driver) is in ``streaming.apply.objects``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

__all__ = ["MAX_SPANS", "Span", "covering", "keys_spans", "span_of", "spans"]

Span = tuple[str, str]
"""An id range, both ends included."""

MAX_SPANS = 256
"""Spans kept at most: more (a table of many files in order) are grouped, neighbours together,
so that finding the spans of a batch's keys stays cheap; a group prunes as one."""


def spans(ranges: Iterable[Span], limit: int = MAX_SPANS) -> list[Span]:
    """The files' ``[min, max]`` id ranges merged where they overlap, in order, then grouped
    into at most ``limit`` spans (consecutive spans together)."""
    merged: list[Span] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    if len(merged) <= limit:
        return merged
    size = -(-len(merged) // limit)
    return [(group[0][0], group[-1][1]) for group in _chunks(merged, size)]


def _chunks(items: Sequence[Span], size: int) -> Iterable[Sequence[Span]]:
    return (items[i : i + size] for i in range(0, len(items), size))


def span_of(ordered: Sequence[Span], key: str) -> int | None:
    """The index of the span holding ``key``, None if none does."""
    at = bisect.bisect_right(ordered, (key, "\U0010ffff")) - 1
    return at if at >= 0 and key <= ordered[at][1] else None


def keys_spans(ordered: Sequence[Span], keys: Iterable[str]) -> set[int]:
    """The indexes of the spans that hold one of ``keys``."""
    found = (span_of(ordered, key) for key in keys)
    return {i for i in found if i is not None}


def covering(ordered: Sequence[Span], touched: Iterable[int]) -> list[Span] | None:
    """The spans at ``touched``, consecutive ones joined (no file lies between them); None when
    that would skip no file (every span touched), so the caller adds no predicate."""
    chosen = sorted(set(touched))
    if len(chosen) == len(ordered):
        return None
    out: list[Span] = []
    previous = -2
    for i in chosen:
        if i == previous + 1:
            out[-1] = (out[-1][0], ordered[i][1])
        else:
            out.append(ordered[i])
        previous = i
    return out
