"""The batch's segments applied (``core.steps``): wave by wave, each table once per wave, the
object tables side by side; a transaction found wrong rejected, a failing one isolated."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession

from streaming.apply import records
from streaming.apply.objects import TableResult, apply_to_object_table
from streaming.core.errors import CdcError, FailedError, RejectedError, StorageUnavailable
from streaming.core.failures import memory_failure, store_trouble
from streaming.core.fold import EFFECTS, Effect
from streaming.core.layout import ObjectTable
from streaming.core.plan import Load, PlannedTransaction
from streaming.core.requests import Operation
from streaming.core.steps import waves
from streaming.inputs.loads import Loaded, changes_only, load_wave
from streaming.inputs.reader import Reader
from streaming.platform.exceptions import java_text
from streaming.runtime.batch.context import BatchContext
from streaming.runtime.batch.plan import object_table, written
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring, log
from streaming.runtime.stopping import interruption
from streaming.storage.commits import BatchCommit
from streaming.storage.timeline import Timeline

__all__ = [
    "Applied",
    "HistoryItem",
    "apply_segment",
    "apply_wave",
    "load_rows",
    "reader",
    "union",
]

HistoryItem = tuple[TableResult, ObjectTable, BatchCommit]
"""An object table's history rows of the batch, its tables and the step they are appended at."""


@dataclass
class Applied:
    """What a batch's segments did: per load ordinal its counts and the table version after it;
    the transactions that failed, with the error."""

    loads: dict[int, tuple[dict[Effect, int], int]] = field(default_factory=dict)
    failed: dict[str, CdcError] = field(default_factory=dict)
    history: list[HistoryItem] = field(default_factory=list)
    """The history rows of the segments applied, appended with the SCD2 MERGEs or the ledger
    (``batch.scd2``, ``batch.record``)."""


def apply_segment(
    wiring: SinkWiring,
    state: SinkState,
    ctx: BatchContext,
    segment: Sequence[PlannedTransaction],
    timeline: Timeline,
    applied: Applied,
    rejected: dict[str, RejectedError],
) -> None:
    """Apply one segment (``core.steps``) wave by wave, each table once per wave.

    Data that is wrong in the first wave rejects its transaction before anything is written.
    A transaction found wrong later (a later wave, a view's rows) is rejected after the
    segment's tables are restored, and the rest of the segment is applied again without it.
    Any other failure restores the segment and applies each of its transactions alone, so
    only the one that fails is FAILED. Steps keep counting up, so a retry never collides
    with the idempotency keys of what was restored, and a replay retries the same way."""
    live = [p for p in segment if p.request.transaction_id not in rejected]
    start: dict[str, int] = {}
    history: list[HistoryItem] = []
    done: dict[int, tuple[dict[Effect, int], int]] = {}
    held = len(state.held)  # a failed attempt's cached rows: released before the retry
    try:
        for number, planned_wave in enumerate(waves([ld for p in live for ld in p.loads])):
            wave = [load for load in planned_wave if load.transaction_id not in rejected]
            with load_rows(wiring, state, ctx, wave, timeline) as (loaded, bad):
                if bad and number > 0:  # a later wave of a transaction that is alone
                    tid, error = next(iter(bad.items()))
                    raise _Rejected(tid, error)
                rejected.update(bad)
                wave = [load for load in wave if load.transaction_id not in bad]
                for path in {p for load in wave for p in written(wiring.layout, load)}:
                    start.setdefault(path, timeline.version(path))
                apply_wave(wiring, state, wave, loaded, timeline, done, history)
    except _Rejected as e:
        log.warning("batch %s: %s rejected while applying: %s", timeline.batch_id, e.tid, e)
        state.release(held)
        timeline.restore(start)
        rejected[e.tid] = e.error
        rest = [p for p in live if p.request.transaction_id not in rejected]
        if rest:
            apply_segment(wiring, state, ctx, rest, timeline, applied, rejected)
        return
    except Exception as e:
        if interruption(e) is not None or _store_trouble(e):
            # The query is stopping, or a store failed (``core.failures.store_trouble``: not
            # the transactions' fault, the batch is retried): the batch ends here as a crash
            # would, its commits kept for the replay to find and go on from (a restore would
            # undo a commit whose idempotency key the replay then skips: its changes would be
            # lost).
            state.release(held)
            raise
        memory = memory_failure(java_text(e))
        if memory is not None:
            # A JVM out of memory: not the transactions' fault (isolating them one by one
            # would meet it again, each marked FAILED). The batch fails as a crash would, its
            # commits kept for the replay; the job stops with OUT_OF_MEMORY.
            state.release(held)
            raise memory from e
        log.exception("batch %s: a segment failed; restoring %s", timeline.batch_id, start)
        state.release(held)
        timeline.restore(start)
        if len(live) > 1:  # isolate the failing transaction
            for plan in live:
                apply_segment(wiring, state, ctx, [plan], timeline, applied, rejected)
            return
        failure = e if isinstance(e, CdcError) else FailedError(f"{type(e).__name__}: {e}")
        for plan in live:
            applied.failed[plan.request.transaction_id] = failure
        return
    # History is append-only, never restored: its rows are appended once the batch's tables
    # are all written (``batch.scd2``, ``batch.record``). A failure there fails the batch; its
    # replay appends them.
    applied.history.extend(history)
    applied.loads.update(done)


def load_rows(
    wiring: SinkWiring,
    state: SinkState,
    ctx: BatchContext,
    loads: Sequence[Load],
    timeline: Timeline,
) -> AbstractContextManager[tuple[list[Loaded], dict[str, RejectedError]]]:
    """Change rows of ``loads`` read at the timeline's versions, checked by one Spark job,
    cached until the batch ends (``SinkState.held``); the transactions whose data is wrong,
    with their error."""
    return load_wave(
        wiring.spark,
        loads,
        reader(wiring, state, timeline),
        held=state.held,
        staged=ctx.feeds,
    )


def reader(wiring: SinkWiring, state: SinkState, timeline: Timeline) -> Reader:
    return Reader(wiring.spark, wiring.layout, state.datasets, wiring.base_dir, timeline.version)


def apply_wave(
    wiring: SinkWiring,
    state: SinkState,
    wave: Sequence[Load],
    loaded: Sequence[Loaded],
    timeline: Timeline,
    done: dict[int, tuple[dict[Effect, int], int]],
    history: list[HistoryItem],
) -> None:
    """Write each table of the wave once (in path order), one step each."""

    def rows(loads: Sequence[Load]) -> DataFrame:
        wanted = {load.ordinal for load in loads}
        return union(
            [
                changes_only(part.frame)
                for part in loaded
                if any(load.ordinal in wanted for load in part.loads)
            ]
        )

    known = next((part.counts for part in loaded if part.counts is not None), None)

    def count(loads: Sequence[Load]) -> int | None:
        if known is None or any(load.ordinal not in known for load in loads):
            return None
        return sum(known[load.ordinal].rows for load in loads)

    def unique(loads: Sequence[Load]) -> bool:
        """No key has two changes: one load, none of its ids repeated."""
        return len(loads) == 1 and known is not None and known[loads[0].ordinal].repeated == 0

    by_table: dict[str, list[Load]] = defaultdict(list)
    for load in wave:
        by_table[load.writes].append(load)
    # Object tables first, side by side: each its own step (numbered in path order, so a
    # replay numbers them alike), folded and written in a session of its own.
    objects = [
        _TableWrite(
            loads,
            paths := object_table(wiring.layout, loads[0].dataset, loads[0].schema),
            {p: timeline.version(p) for p in paths.restorable},
            step := timeline.next_step(),
            step.inserts(),
            rows(loads),
            count(loads),
            unique(loads),
        )
        for _, loads in sorted(by_table.items())
        if loads[0].schema.is_object
    ]

    def apply(spark: SparkSession, write: _TableWrite) -> TableResult:
        return apply_to_object_table(
            spark,
            changes=write.changes,
            schema=write.loads[0].schema,
            paths=write.paths,
            before=write.before,
            commit=write.commit,
            inserts=write.inserts,
            partitions=wiring.shuffle_partitions,
            count=write.count,
            unique=write.unique,
            deleted=state.deleted,
        )

    for write, result in zip(objects, wiring.sessions.map(apply, objects), strict=True):
        timeline.wrote(write.paths.tombstones, write.commit)
        timeline.wrote(write.paths.current, write.commit)
        version = timeline.wrote(write.paths.current, write.inserts)
        history.append((result, write.paths, write.commit))
        _count(done, write.loads, result.counts, version)
    read = reader(wiring, state, timeline)
    for path, loads in sorted(by_table.items()):
        if loads[0].schema.is_object:
            continue
        for load in loads:  # record and view tables: one commit per operation
            if load.operation is Operation.INSERT_RECORD:
                continue
            commit = timeline.next_step()
            try:
                if load.operation is Operation.DELETE_RECORD:
                    counts = records.delete_records(wiring.spark, load, read, commit)
                else:
                    counts = records.refresh_view(wiring.spark, load, read, commit)
            except RejectedError as e:
                raise _Rejected(load.transaction_id, e) from e
            _count(done, [load], counts, timeline.wrote(path, commit))
        inserts = [load for load in loads if load.operation is Operation.INSERT_RECORD]
        if inserts:
            commit = timeline.next_step()
            changes = rows(inserts)
            counts = records.insert_records(wiring.spark, changes, path, commit)
            _count(done, inserts, counts, timeline.wrote(path, commit))


class _Rejected(Exception):
    """A transaction found wrong while its segment was being applied."""

    def __init__(self, tid: str, error: RejectedError) -> None:
        super().__init__(error.message)
        self.tid, self.error = tid, error


@dataclass(frozen=True)
class _TableWrite:
    """One object table's share of a wave: its loads, tables, versions before, steps, rows."""

    loads: list[Load]
    paths: ObjectTable
    before: dict[str, int]
    commit: BatchCommit
    """The step of its MERGE, its tombstones and (later) its history."""
    inserts: BatchCommit
    """The step of the append of its new keys to the current table (``apply``)."""
    changes: DataFrame
    count: int | None
    """Its number of change rows (the check job's count), None if unknown."""
    unique: bool
    """No key has two changes (the check job's count of repeated ids)."""


def _count(
    done: dict[int, tuple[dict[Effect, int], int]],
    loads: Sequence[Load],
    counts: Mapping[tuple[int, Effect], int],
    version: int,
) -> None:
    for load in loads:
        done[load.ordinal] = ({e: counts.get((load.ordinal, e), 0) for e in EFFECTS}, version)


def union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _store_trouble(error: BaseException) -> bool:
    """Whether ``error`` says a store did not answer or refused a request (its Java causes
    included): the batch fails and is retried (``Sink._run_retrying``)."""
    if isinstance(error, StorageUnavailable):
        return True
    if isinstance(error, CdcError):
        return False
    return store_trouble(java_text(error)) is not None
