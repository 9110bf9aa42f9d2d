"""Independent Delta writes of a batch run side by side, each in a session of its own.

A batch writes several tables that do not depend on each other (the tables of a wave, then their
history, then the system tables). On a small batch each write is mostly driver work — planning,
reading the log, committing — so running them from threads overlaps it (Spark runs jobs from
several threads; Delta commits to different tables independently).

Each task gets a child session of the query's (``SparkSession.newSession``: the same context,
cache and Delta log cache, its own SQL conf): Delta takes a MERGE's idempotency keys
(``txnAppId`` / ``txnVersion`` / ``userMetadata``) from session conf, so two tables' MERGEs must
not share one. Threads inherit the calling thread's Spark local properties (the streaming
query's job group), so stopping the query still cancels their jobs.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from pyspark.sql import SparkSession
from pyspark.util import inheritable_thread_target

__all__ = ["CHILD_CONF", "Sessions"]

T = TypeVar("T")
R = TypeVar("R")

CHILD_CONF = {
    # The sources of our MERGEs are rows folded on the driver: deterministic, already in memory.
    # Delta would otherwise copy them into its block manager first (a Spark job per MERGE).
    "spark.databricks.delta.merge.materializeSource": "none",
    # The plans here are tiny (a batch's rows, a table's log): adaptive execution has nothing to
    # coalesce, and runs each of their shuffle stages as a Spark job of its own (78 → 52 jobs
    # for a batch of 12 transactions over 3 tables; tests/integration/test_batch_budget.py).
    "spark.sql.adaptive.enabled": "false",
}


class Sessions:
    """A pool of child sessions of ``spark`` and the threads that use them."""

    def __init__(self, spark: SparkSession, workers: int) -> None:
        self.spark = spark
        self.workers = max(1, workers)
        self._idle: queue.SimpleQueue[SparkSession] = queue.SimpleQueue()

    def _session(self) -> SparkSession:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            child = self.spark.newSession()
            for key, value in CHILD_CONF.items():
                child.conf.set(key, value)
            return child

    def _run(self, fn: Callable[[SparkSession, T], R], item: T) -> R:
        session = self._session()
        try:
            return fn(session, item)
        finally:
            self._idle.put(session)

    def map(self, fn: Callable[[SparkSession, T], R], items: Sequence[T]) -> list[R]:
        """``fn(session, item)`` for every item, concurrently, results in item order. Waits for
        every task to end before it returns or raises (a caller that restores tables after a
        failure must not race a commit still in flight); raises the first failure in item
        order."""
        if len(items) <= 1:
            return [self._run(fn, item) for item in items]
        task = inheritable_thread_target(self.spark)(self._run)
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items))) as pool:
            futures = [pool.submit(task, fn, item) for item in items]
            errors = [f.exception() for f in futures]  # waits for all
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]
