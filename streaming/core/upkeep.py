"""What table upkeep is due after a micro-batch: plain functions over small inputs.

The job keeps its own tables in shape (``upkeep:``; ``streaming.runtime.upkeep`` runs it).
Every micro-batch adds a file or a few to each table it writes; upkeep, after the batch's
outcomes, compacts a table once enough of its files are small, keeps each current table ordered
by ``id`` (each file a narrow id range, so that a batch's keys fall in few files), and removes
the files no version within the retention needs (VACUUM). One table at a time, most pressing
first, while the batch's upkeep budget lasts; a task the budget leaves out waits for the next
batch.

What a table holds is read from Delta's checksum of the version this process last wrote (no
Spark job, no log listing): its live files and Delta's file-size histogram, which tells how
many are small.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Action", "Policy", "TableFiles", "Task", "due", "overlap_depth", "small_files"]

Action = Literal["compact", "order", "check", "vacuum", "retention"]
"""``compact``: OPTIMIZE (bin-packing) of an append-only table; ``order``: a current table's
compaction — clustered by id when its files' ranges overlap, else bin-packed; ``check``: a
current table clustered by id if its files' ranges overlap, else left as it is; ``vacuum``:
VACUUM; ``retention``: the table's retention properties set where they differ."""


@dataclass(frozen=True)
class Policy:
    """The thresholds of ``upkeep:`` (``core.config.UpkeepConfig``)."""

    compact_files: int
    """A table is compacted once this many of its files are small."""
    small_bytes: int
    """A file under this size is small."""
    order_depth: int
    """A current table is clustered by id once this many of its files can hold one same id."""
    vacuum_every: float
    """Seconds between two VACUUMs of a table (the first: after the job's first batch)."""


@dataclass(frozen=True)
class TableFiles:
    """A table's files at the version this process holds."""

    path: str
    current: bool
    """A current table (MERGEd by id); else append-only (history, tombstones, system)."""
    files: int
    small: int
    """Files under ``Policy.small_bytes``."""


@dataclass(frozen=True)
class Task:
    path: str
    action: Action
    reason: str


def small_files(boundaries: Sequence[int], counts: Sequence[int], small_bytes: int) -> int:
    """Files under ``small_bytes`` in Delta's file-size histogram (bin ``i`` holds the files of
    ``boundaries[i] <= size < boundaries[i + 1]``): the bins that end at or below it. A bin that
    straddles the threshold is not counted (its files may be larger)."""
    if len(boundaries) != len(counts):
        raise ValueError(f"{len(boundaries)} boundaries for {len(counts)} counts")
    ends = [*boundaries[1:], None]
    return sum(
        count
        for count, end in zip(counts, ends, strict=True)
        if end is not None and end <= small_bytes
    )


def overlap_depth(ranges: Iterable[tuple[str, str]]) -> int:
    """The most files whose ``[min, max]`` id ranges hold one same id: what a key's lookup or
    a MERGE of it may have to open. 1 for a table clustered by id; every file for one whose
    rows came in random id order."""
    starts: list[str] = []
    ends: list[str] = []
    for low, high in ranges:
        starts.append(low)
        ends.append(high)
    starts.sort()
    ends.sort()
    depth = 0
    for i, low in enumerate(starts):
        # files open at ``low``: started at or before it (i + 1) minus ended before it
        depth = max(depth, i + 1 - bisect.bisect_left(ends, low))
    return depth


def due(
    tables: Iterable[TableFiles],
    *,
    policy: Policy,
    now: float,
    vacuumed: Mapping[str, float],
    unchecked: Iterable[str] = (),
) -> list[Task]:
    """The upkeep tasks due, most pressing first: compactions (most small files first), then
    the order checks of current tables not looked at since the job started (``unchecked``: a
    table loaded in random id order is clustered before its MERGEs pay for it; one with fewer
    files than ``order_depth`` waits until it has that many), then VACUUMs
    (longest unvacuumed first; ``vacuumed``: path → when it last ran, or when the job first saw
    the table)."""
    compact: list[tuple[int, Task]] = []
    vacuum: list[tuple[float, Task]] = []
    files: dict[str, int] = {}
    for table in tables:
        files[table.path] = table.files
        if table.small >= policy.compact_files:
            action: Action = "order" if table.current else "compact"
            reason = f"{table.small} small files of {table.files}"
            compact.append((table.small, Task(table.path, action, reason)))
        last = vacuumed.get(table.path)
        if last is not None and now - last >= policy.vacuum_every:
            vacuum.append((last, Task(table.path, "vacuum", f"last {now - last:.0f}s ago")))
    compacted = {task.path for _, task in compact}
    checks = [
        Task(path, "check", "first write since the job started")
        for path in sorted(set(unchecked) - compacted)
        if files.get(path, 0) >= policy.order_depth  # fewer files cannot overlap that deep
    ]
    return [
        *(task for _, task in sorted(compact, key=lambda c: -c[0])),
        *checks,
        *(task for _, task in sorted(vacuum, key=lambda v: v[0])),
    ]
