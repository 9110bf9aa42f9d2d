"""Per micro-batch counts of any ``foreachBatch`` query, ours or a baseline, taken the same way.

While a ``BatchMeter`` is active it wraps every function given to
``DataStreamWriter.foreachBatch`` (and keeps every query ``DataStreamWriter.start`` returns), so
nothing in ``streaming/`` changes and both contenders are measured by the same code. Per call of
the wrapped function (one micro-batch) it records:

- ``sink_seconds``: wall time of the foreachBatch function;
- ``jobs``: Spark jobs started meanwhile, counted: the scheduler's next job id before and after
  (job ids are sequential; the same counter ``bench.profile`` reads);
- ``commits``: Delta commits written meanwhile, counted: new ``_delta_log/<version>.json``
  files in every Delta table under the meter's roots (the warehouse, ``_system/*`` included).

After the query, ``trigger_seconds`` of each batch comes from Spark's progress of the query
(``durationMs.triggerExecution``: the whole trigger — offsets and file listing, planning, the
foreachBatch function, the offset and commit logs).
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

COMMIT_FILE = re.compile(r"^\d{20}\.json$")


def delta_commits(roots: Sequence[Path]) -> int:
    """Commit files (``_delta_log/NNNNNNNNNNNNNNNNNNNN.json``) of every Delta table under
    ``roots``, counted by listing the folders."""
    total = 0
    for root in roots:
        for log in root.rglob("_delta_log"):
            total += sum(1 for name in _names(log) if COMMIT_FILE.match(name))
    return total


def _names(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except FileNotFoundError:  # a table removed meanwhile
        return []


@dataclass
class BatchRecord:
    batch_id: int
    started: float
    """``time.time()`` when the foreachBatch function was called."""
    sink_seconds: float
    jobs: int
    commits: int
    first_job: int = 0
    """The id of the batch's first Spark job (its jobs are ``first_job .. first_job + jobs``)."""
    trigger_seconds: float | None = None
    """Spark's ``durationMs.triggerExecution`` of the batch (filled after the query)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "batchId": self.batch_id,
            "trigger_seconds": self.trigger_seconds,
            "sink_seconds": round(self.sink_seconds, 3),
            "jobs": self.jobs,
            "commits": self.commits,
        }


@dataclass
class BatchMeter:
    spark: SparkSession
    roots: Sequence[Path]
    """Where the Delta tables written by the measured query live."""
    records: list[BatchRecord] = field(default_factory=list)
    queries: list[Any] = field(default_factory=list)

    def next_job(self) -> int:
        return int(self.spark.sparkContext._jsc.sc().dagScheduler().nextJobId())

    def wrap(self, func: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
        @functools.wraps(func)
        def measured(df: DataFrame, batch_id: int) -> None:
            jobs, commits = self.next_job(), delta_commits(self.roots)
            started, begun = time.time(), time.perf_counter()
            try:
                func(df, batch_id)
            finally:
                seconds = time.perf_counter() - begun
                self.records.append(
                    BatchRecord(
                        batch_id,
                        started,
                        seconds,
                        self.next_job() - jobs,
                        delta_commits(self.roots) - commits,
                        jobs,
                    )
                )

        return measured

    @contextmanager
    def active(self) -> Iterator[BatchMeter]:
        """Patch ``DataStreamWriter`` for the duration; afterwards fill the trigger times."""
        original_batch = DataStreamWriter.foreachBatch
        original_start = DataStreamWriter.start
        meter = self

        def foreach_batch(
            writer: DataStreamWriter, func: Callable[[DataFrame, int], None]
        ) -> DataStreamWriter:
            return original_batch(writer, meter.wrap(func))

        def start(writer: DataStreamWriter, *args: Any, **kwargs: Any) -> Any:
            query = original_start(writer, *args, **kwargs)
            meter.queries.append(query)
            return query

        setattr(DataStreamWriter, "foreachBatch", foreach_batch)  # noqa: B010
        setattr(DataStreamWriter, "start", start)  # noqa: B010
        try:
            yield self
        finally:
            setattr(DataStreamWriter, "foreachBatch", original_batch)  # noqa: B010
            setattr(DataStreamWriter, "start", original_start)  # noqa: B010
            self.fill_trigger_times()

    def fill_trigger_times(self) -> None:
        """Each record's ``triggerExecution`` from its query's recent progress."""
        durations: dict[int, float] = {}
        for query in self.queries:
            for progress in query.recentProgress:
                entry = json.loads(progress.json)
                ms = (entry.get("durationMs") or {}).get("triggerExecution")
                if ms is not None:
                    durations[int(entry["batchId"])] = ms / 1000
        for record in self.records:
            record.trigger_seconds = durations.get(record.batch_id)

    def warm(self) -> list[BatchRecord]:
        """The batches after the query's first (the first pays for first reads of the tables'
        logs and of the query's plan; a long-running job pays that once)."""
        ordered = sorted(self.records, key=lambda r: r.batch_id)
        return ordered[1:] if len(ordered) > 1 else ordered

    def summary(self) -> dict[str, Any]:
        """Medians over the warm batches, and every batch."""
        warm = self.warm()
        triggers = [r.trigger_seconds for r in warm if r.trigger_seconds is not None]
        first = min(self.records, key=lambda r: r.batch_id) if self.records else None
        return {
            "batches": len(self.records),
            "warm_batches": len(warm),
            "trigger_seconds": _median(triggers),
            "sink_seconds": _median([r.sink_seconds for r in warm]),
            "jobs": _median([float(r.jobs) for r in warm]),
            "commits": _median([float(r.commits) for r in warm]),
            "first_trigger_seconds": first.trigger_seconds if first else None,
            "per_batch": [r.as_json() for r in sorted(self.records, key=lambda r: r.batch_id)],
        }


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None
