"""One batch as its steps see it (``BatchContext``): its id, whose commits it makes, whether
it may have run before, its clock and its change feeds' share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from streaming.inputs.changefeeds import FeedBatch

__all__ = ["BatchContext", "query_key"]


@dataclass(frozen=True)
class BatchContext:
    """The running batch, passed from step to step. Its cached frames are the state's
    (``SinkState.held``): the job releases a stopped batch's once the query has ended."""

    batch_id: int
    query: str
    """Whose commits these are (``query_key``)."""
    replay_possible: bool
    """It may have run (in part) before: its commits are looked for, not assumed absent."""
    clock: Callable[[], datetime]
    """The batch's time (with change feeds: its first run's, fixed)."""
    started: float
    """When ``Sink.process`` started it (``time.monotonic``)."""
    feeds: FeedBatch | None
    """The batch's change feeds (their staged rows are read by its waves); None without."""


def query_key(query_name: str, run_id: str | None) -> str:
    """Whose commits these are: the query name and the checkpoint's id. Batch ids start at 0
    again on a new checkpoint; the id keeps its commits apart from the old checkpoint's in
    Delta's idempotency keys (``txnAppId``) and in the commit metadata."""
    return f"{query_name}@{run_id}" if run_id else query_name
