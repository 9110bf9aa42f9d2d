"""One batch's steps, in the order they run: its change feeds opened, triage, plan, the
timeline opened, the segments applied, SCD2, outcomes, record, progress."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial

from pyspark.sql import DataFrame

from streaming.core.batch import Admitted, RawRequest
from streaming.core.faults import crash_point
from streaming.core.outcomes import Outcome
from streaming.core.steps import segments
from streaming.inputs.changefeeds import FeedBatch
from streaming.runtime.batch import apply, plan, progress, record, scd2, triage
from streaming.runtime.batch.context import BatchContext, query_key
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring
from streaming.runtime.metering import Meter
from streaming.storage.timeline import Timeline

__all__ = ["run_batch"]


def run_batch(
    wiring: SinkWiring,
    state: SinkState,
    raws: Sequence[RawRequest],
    batch_id: int,
    changes: DataFrame | None,
    *,
    replay: bool,
    clock: Callable[[], datetime],
) -> list[Outcome]:
    """Apply a batch's requests and change records (``Sink.process``); ``replay``: it may
    have run (in part) before in this process (a retried attempt), as it may after any
    restart."""
    started = time.monotonic()
    # Only a batch that follows the one this sink finished cannot have run before.
    replay_possible = replay or state.finished is None or batch_id != state.finished + 1
    query = query_key(wiring.layout.query_name, state.run_id)
    feeds: FeedBatch | None = None
    try:
        if state.changes is not None:
            # The batch's time first (a replay's is its first run's): a transaction given
            # up after ``max_wait`` is given up by the replay too.
            at = Timeline.open(
                wiring.spark,
                query,
                batch_id,
                [wiring.layout.pending, wiring.layout.ledger],
                clock,
                replay_possible=replay_possible,
            ).at
            clock = partial(_fixed, at)
            feeds = triage.open_feeds(
                wiring, state, changes, batch_id, at, query=query, replay_possible=replay_possible
            )
        ctx = BatchContext(batch_id, query, replay_possible, clock, started, feeds)
        return _steps(wiring, state, ctx, raws)
    finally:
        if feeds is not None:
            feeds.release()


def _steps(
    wiring: SinkWiring, state: SinkState, ctx: BatchContext, raws: Sequence[RawRequest]
) -> list[Outcome]:
    layout = wiring.layout
    verdicts = triage.triage_batch(wiring, state, ctx, raws)
    admitted = [v for v in verdicts if isinstance(v, Admitted)]
    planned, rejected = plan.plan_batch(wiring, state, ctx, admitted)
    tables = {p for t in planned for load in t.loads for p in plan.written(layout, load)}
    timeline = Timeline.open(
        wiring.spark,
        ctx.query,
        ctx.batch_id,
        tables,
        ctx.clock,
        replay_possible=ctx.replay_possible,
    )
    written = [*tables, *plan.histories(layout, planned), *plan.system_tables(layout)]
    if ctx.feeds is not None:
        written.append(layout.pending)
    state.touched.update(written)
    meter = Meter.start(wiring.spark, written)
    applied = apply.Applied()
    crash_point("before_first_commit")
    try:
        for segment in segments(planned):
            wiring.fence()
            apply.apply_segment(wiring, state, ctx, segment, timeline, applied, rejected)
        crash_point("after_tables")
        wiring.fence()
        commit = timeline.commit()
        versions, history = scd2.merge_scd2_tables(wiring, state, applied.history, commit)
        outcomes = record.outcomes_of(verdicts, planned, rejected, applied, commit, versions)
        record.record_batch(wiring, state, ctx, verdicts, outcomes, history, commit)
    finally:
        state.release()
    if ctx.feeds is not None:
        assert state.changes is not None
        state.changes.finished(ctx.feeds)
        progress.snapshots_applied(wiring, ctx.feeds, ctx.batch_id)
        if wiring.metrics is not None:
            wiring.metrics.waiting(ctx.feeds.waiting())
    seconds = time.monotonic() - ctx.started
    progress.report_progress(wiring, state, ctx, outcomes, applied, seconds, meter.stop())
    state.finished = ctx.batch_id
    return outcomes


def _fixed(at: datetime) -> datetime:
    return at
