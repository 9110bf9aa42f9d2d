"""Where the time of our path goes: timers wrapped around the sink's steps, in-process.

Nothing in ``streaming/`` changes: while a ``Profiler`` is active it replaces a few attributes
(the sink's entry, its steps in ``streaming.runtime.batch``, the functions those steps and
``streaming.apply.objects`` call, and ``DataFrame.localCheckpoint``, which is where the fold
runs) with timing wrappers, and puts
them back on exit. Each region records its wall time (inclusive of nested regions), how often
it ran, and how many Spark jobs started inside it (job ids are sequential: the scheduler's
next job id before and after; the UI is off). The sink's own "batch N: ... s" log lines are
captured too.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

BATCH_LINE = re.compile(r"^batch (\d+): (\d+) transactions .* ([0-9.]+)s$")


@dataclass
class Region:
    seconds: float = 0.0
    calls: int = 0
    jobs: int = 0


@dataclass
class Profiler:
    spark: SparkSession
    count_jobs: bool = True
    regions: dict[tuple[str, ...], Region] = field(default_factory=dict)
    batch_lines: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Attributes ``wrap`` was asked for that the code measured does not have."""
    _stacks: dict[int, list[str]] = field(default_factory=dict)
    """The open regions per thread. A thread's first region nests under the regions open in
    the first thread that entered one (the foreachBatch thread) at that moment: work the sink
    hands to threads is shown under the step that started it, its seconds summed over threads
    (and Spark jobs counted by job ids overlap between regions running at the same time)."""
    _bases: dict[int, int] = field(default_factory=dict)
    _owner: int | None = None
    _patched: list[tuple[Any, str, Any]] = field(default_factory=list)

    def last_job(self) -> int:
        """Spark's next job id (the status tracker only lists jobs by group, and a streaming
        query runs its batches' jobs in a group of its own)."""
        scheduler = self.spark.sparkContext._jsc.sc().dagScheduler()
        return int(scheduler.nextJobId())

    @contextmanager
    def region(self, name: str, *, jobs: bool = True) -> Iterator[None]:
        stack = self._stack()
        stack.append(name)
        path = tuple(stack)
        entry = self.regions.setdefault(path, Region())  # parents are listed before children
        count = jobs and self.count_jobs
        first = self.last_job() if count else 0
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            entry.seconds += spent
            entry.calls += 1
            if count:
                entry.jobs += self.last_job() - first
            stack.pop()

    def _stack(self) -> list[str]:
        """This thread's open regions; another thread's starts, whenever it has none open of
        its own, from what the owner thread has open."""
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        if me == self._owner:
            return self._stacks.setdefault(me, [])
        stack = self._stacks.get(me)
        if stack is None or len(stack) == self._bases.get(me, 0):
            stack = list(self._stacks.get(self._owner, []))
            self._stacks[me] = stack
            self._bases[me] = len(stack)
        return stack

    def wrap(
        self, owner: Any, attr: str, name: str, *, jobs: bool = True, entered: bool = False
    ) -> None:
        """Time calls of ``owner.attr`` as region ``name``; ``entered``: the function returns a
        context manager, and the region is the call plus entering it (not the ``with`` body)."""
        found = owner.__dict__ if isinstance(owner, type) else vars(owner)
        if attr not in found:  # renamed or gone in the code measured: that region is not shown
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{attr}")
            return
        original = found[attr]
        if entered:

            @functools.wraps(original)
            @contextmanager
            def timed_enter(*args: Any, **kwargs: Any) -> Iterator[Any]:
                with ExitStack() as stack:
                    with self.region(name, jobs=jobs):
                        value = stack.enter_context(original(*args, **kwargs))
                    yield value

            setattr(owner, attr, timed_enter)
        elif isinstance(original, classmethod):
            func = original.__func__

            @functools.wraps(func)
            def cls_timed(*args: Any, **kwargs: Any) -> Any:
                with self.region(name, jobs=jobs):
                    return func(*args, **kwargs)

            setattr(owner, attr, classmethod(cls_timed))
        else:

            @functools.wraps(original)
            def timed(*args: Any, **kwargs: Any) -> Any:
                with self.region(name, jobs=jobs):
                    return original(*args, **kwargs)

            setattr(owner, attr, timed)
        self._patched.append((owner, attr, original))

    def __enter__(self) -> Profiler:
        from streaming.apply import objects as apply
        from streaming.apply import scd2
        from streaming.inputs import changefeeds as feeds
        from streaming.inputs import loads
        from streaming.runtime import metering, sink
        from streaming.runtime.batch import apply as apply_step
        from streaming.runtime.batch import plan as plan_step
        from streaming.runtime.batch import progress, record, state, triage
        from streaming.runtime.batch import scd2 as scd2_step
        from streaming.storage import ledger, system, timeline

        sink_cls = sink.Sink
        self.wrap(sink_cls, "__call__", "sink (foreachBatch)")
        self.wrap(triage, "open_feeds", "change feeds: decode, summarise, decide, stage")
        self.wrap(feeds, "_summaries", "change feeds: summaries (decode: 3 jobs)")
        self.wrap(feeds, "decide", "change feeds: decide (driver)")
        self.wrap(feeds, "_choose", "change feeds: staged events, counts, shapes")
        self.wrap(feeds.FeedBatch, "verdicts", "change feeds: verdicts")
        self.wrap(feeds.FeedBatch, "stage", "change feeds: number the staged rows")
        self.wrap(feeds.FeedBatch, "quarantine", "change feeds: quarantine rows")
        self.wrap(feeds.FeedBatch, "write_pending", "change feeds: pending write")
        self.wrap(triage, "triage_batch", "triage: parse + ledger lookup")
        self.wrap(plan_step, "plan_batch", "plan + validate")
        self.wrap(timeline.Timeline, "open", "timeline: versions of the tables")
        self.wrap(apply_step, "load_rows", "load: read data + checks", entered=True)
        self.wrap(loads, "read_json_loads", "JSON loads: list files + keys (1 job)")
        self.wrap(loads, "load_changes", "other loads: read + infer schema, per load", jobs=False)
        self.wrap(loads, "check_loads", "check rows (1 job)")
        self.wrap(apply_step, "apply_wave", "apply: fold + MERGE per table")
        self.wrap(apply_step, "apply_to_object_table", "apply to one object table")
        self.wrap(apply, "_stored_rows", "read the keys' stored rows (driver fold)")
        self.wrap(_dataframe_class(), "localCheckpoint", "join stored state + fold, materialised")
        self.wrap(apply, "_apply_large", "the fold in Spark (large batch)")
        self.wrap(apply, "_apply_small", "the fold on the driver (small batch)")
        self.wrap(apply, "_spans", "id spans of the stored keys")
        self.wrap(apply, "holds_no_rows", "table log: holds no rows?")
        self.wrap(apply, "memory_bytes", "size of the fold (plan statistics)")
        self.wrap(apply, "_write_current", "write current table (MERGE, new keys)")
        self.wrap(apply, "_merge", "MERGE current table")
        self.wrap(apply, "append", "append new keys / tombstones / history")
        self.wrap(apply, "latest_version", "table log: latest version")
        self.wrap(apply, "_append_tombstones", "append tombstones")
        self.wrap(scd2_step, "merge_scd2_tables", "SCD2 MERGEs (and history appends beside them)")
        self.wrap(scd2_step, "merge_scd2", "one SCD2 table")
        self.wrap(scd2, "batch_commits", "SCD2: done in a replayed batch?")
        self.wrap(scd2, "_keys", "SCD2: the batch's ids")
        self.wrap(scd2, "_driver_source", "SCD2: seeds read, intervals on the driver")
        self.wrap(scd2, "on_conflict_retry", "SCD2: seeds, intervals, MERGE")
        self.wrap(scd2, "latest_version", "SCD2: table log, latest version")
        self.wrap(record, "batch_outcomes", "build outcomes")
        self.wrap(progress, "report_progress", "progress: log line, metrics")
        self.wrap(state.SinkState, "release", "release the batch's cached frames")
        self.wrap(feeds.FeedBatch, "release", "change feeds: release cached frames")
        self.wrap(feeds.ChangeFeeds, "finished", "change feeds: finished")
        self.wrap(progress, "snapshots_applied", "change feeds: snapshots applied")
        self.wrap(metering.Meter, "stop", "meter: table sizes after the batch")
        self.wrap(record, "record_batch", "record: history, ledger, quarantine, then outcomes")
        self.wrap(record, "append_history", "append history")
        self.wrap(ledger, "record", "ledger append")
        self.wrap(system, "quarantine", "quarantine append")
        self.wrap(system, "write_outcomes", "outcomes append")
        logger = logging.getLogger("streaming.runtime.sink")
        self._level = logger.level
        logger.setLevel(logging.INFO)
        self._handler = _Capture(self.batch_lines)
        logger.addHandler(self._handler)
        return self

    def __exit__(self, *_exc: object) -> None:
        for owner, attr, original in reversed(self._patched):
            setattr(owner, attr, original)
        self._patched.clear()
        logger = logging.getLogger("streaming.runtime.sink")
        logger.removeHandler(self._handler)
        logger.setLevel(self._level)

    def batches(self) -> list[tuple[int, int, float]]:
        """(batch id, transactions, seconds) from the sink's log lines."""
        out = []
        for line in self.batch_lines:
            found = BATCH_LINE.match(line)
            if found:
                out.append((int(found[1]), int(found[2]), float(found[3])))
        return out

    def report(self) -> list[dict[str, Any]]:
        """The regions in call-tree order (a region before the ones nested in it)."""
        return [
            {
                "path": list(path),
                "seconds": round(region.seconds, 3),
                "calls": region.calls,
                **({"jobs": region.jobs} if self.count_jobs else {}),
            }
            for path, region in sorted(self.regions.items(), key=lambda kv: _order(kv[0], self))
        ]


def _dataframe_class() -> type:
    """The class whose ``localCheckpoint`` runs: PySpark 4's classic DataFrame subclass."""
    try:
        from pyspark.sql.classic.dataframe import DataFrame as Classic
    except ImportError:  # pragma: no cover - PySpark 3
        return DataFrame
    return Classic


def _order(path: tuple[str, ...], profiler: Profiler) -> tuple[Any, ...]:
    """Sort key: the order regions first ran in, parents before children."""
    keys = list(profiler.regions)
    return tuple(keys.index(path[: i + 1]) for i in range(len(path)))


class _Capture(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result
