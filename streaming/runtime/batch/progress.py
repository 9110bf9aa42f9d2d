"""What the batch did, told: the initial snapshots its change feeds finished, then its
progress — one line logged, the metrics fed, an entry of the sink's history — and, once the
sink has finished it, the table upkeep after it (its seconds added to that entry)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from streaming.core.outcomes import Outcome, Status
from streaming.inputs.changefeeds import FeedBatch
from streaming.runtime.batch.apply import Applied
from streaming.runtime.batch.context import BatchContext
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring, log
from streaming.runtime.metering import Cost
from streaming.storage.tables import read_table

__all__ = ["report_progress", "snapshots_applied", "upkeep"]


def snapshots_applied(wiring: SinkWiring, feeds: FeedBatch, batch_id: int) -> None:
    """Say (one line each) which feeds' initial snapshots this batch applied the end of, with
    the rows their tables hold now; set ``cdc_change_feed_snapshot_complete``."""
    before, after = feeds.snapshots
    for feed in wiring.feeds:
        if feed.name in after and feed.name not in before:
            tables = sorted(set(feed.tables.values()))
            rows = {
                t: read_table(wiring.spark, wiring.layout.table(feed.dataset, t)).count()
                for t in tables
            }
            log.info(
                "feed %s: initial snapshot applied in batch %s (%s rows in tables %s)",
                feed.name,
                batch_id,
                sum(rows.values()),
                ", ".join(f"{t} {n}" for t, n in rows.items()),
            )
    if wiring.metrics is not None and after != before:
        wiring.metrics.snapshots(wiring.feeds, after)


def report_progress(
    wiring: SinkWiring,
    state: SinkState,
    ctx: BatchContext,
    outcomes: Sequence[Outcome],
    applied: Applied,
    seconds: float,
    cost: Cost,
) -> None:
    """The batch's line (transactions by status, rows changed, tables, Delta commits, Spark
    jobs, seconds), a line per REJECTED transaction before it; the metrics; the history."""
    batch_id = ctx.batch_id
    by_status: dict[str, int] = defaultdict(int)
    for o in outcomes:
        by_status[o.status.value] += 1
        if o.status is Status.REJECTED and o.error is not None:  # one line each, no trace
            log.warning(
                "batch %s: %s from %s REJECTED [%s]: %s",
                batch_id,
                o.transaction_id or "a request",
                o.source,
                o.error.code,
                o.error.message,
            )
    written = ("inserted", "updated", "deleted")
    rows = sum(n for counts, _ in applied.loads.values() for e, n in counts.items() if e in written)
    tables = len({v for o in outcomes for v in o.table_versions})
    entry: dict[str, object] = {
        "batchId": batch_id,
        "transactions": len(outcomes),
        **by_status,
        "rowsChanged": rows,
        "tables": tables,
        "deltaCommits": cost.commits,
        "sparkJobs": cost.jobs,
        "seconds": round(seconds, 3),
    }
    state.history.append(entry)
    if wiring.metrics is not None:
        wiring.metrics.batch(outcomes, spark_jobs=cost.jobs, delta_commits=cost.commits)
    log.info(
        "batch %s: %s transactions (%s), %s rows changed in %s tables, "
        "%s Delta commits, %s Spark jobs, %.2fs",
        batch_id,
        len(outcomes),
        ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())),
        rows,
        tables,
        cost.commits,
        cost.jobs,
        seconds,
    )


def upkeep(
    wiring: SinkWiring, state: SinkState, batch_id: int, *, stopping: Callable[[], bool]
) -> None:
    """After a batch that read something: the table upkeep of the tables it may have written
    (``runtime.upkeep``), its seconds added to the batch's history entry."""
    assert state.upkeep is not None
    written, state.touched = state.touched, set()
    upkept = state.upkeep.after_batch(written, fence=wiring.fence, stopping=stopping)
    if upkept and state.history and state.history[-1].get("batchId") == batch_id:
        seconds = sum(task.seconds for task in upkept)
        state.history[-1]["upkeepSeconds"] = round(seconds, 3)
