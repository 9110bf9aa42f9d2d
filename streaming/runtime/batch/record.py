"""The batch's outcomes built (``core.results``) and recorded: history, ledger, quarantine
and the waiting change records side by side, then the outcomes table, then the outcomes
topic."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TypeVar

from pyspark.sql import SparkSession

from streaming.apply.objects import append_history
from streaming.core.batch import Admitted, RawRequest, Verdict
from streaming.core.errors import CdcError, RejectedError
from streaming.core.faults import crash_point
from streaming.core.feedevents import Ready
from streaming.core.outcomes import Outcome, Status
from streaming.core.plan import PlannedTransaction
from streaming.core.results import batch_outcomes, with_scd2_versions
from streaming.inputs.changefeeds import FeedBatch
from streaming.runtime.batch.apply import Applied, HistoryItem
from streaming.runtime.batch.context import BatchContext
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring
from streaming.storage import ledger, system
from streaming.storage.commits import BatchCommit

__all__ = ["call", "history_append", "outcomes_of", "record_batch"]

R = TypeVar("R")


def outcomes_of(
    verdicts: Sequence[Verdict],
    planned: Sequence[PlannedTransaction],
    rejected: Mapping[str, RejectedError],
    applied: Applied,
    commit: BatchCommit,
    scd2: Mapping[tuple[str, str], int],
) -> list[Outcome]:
    """One outcome per request of the batch (``core.results.batch_outcomes``), with the
    versions of the SCD2 tables its MERGEs made."""
    valid = [p for p in planned if p.request.transaction_id not in rejected]
    outcomes = batch_outcomes(
        verdicts, valid, rejected, applied.failed, applied.loads, commit.batch_id, commit.at
    )
    with_scd2_versions(outcomes, scd2)
    return outcomes


def record_batch(
    wiring: SinkWiring,
    state: SinkState,
    ctx: BatchContext,
    verdicts: Sequence[Verdict],
    outcomes: Sequence[Outcome],
    history: Sequence[HistoryItem],
    commit: BatchCommit,
) -> None:
    """The batch's appends, side by side: history (what ``batch.scd2`` left), ledger and
    quarantine (a change feed's rejected items with their records,
    ``FeedBatch.quarantine``), the waiting change records; then the outcomes table, then the
    outcomes topic. Each is made once per batch (``tables.append``), so a batch that dies
    between them is finished by its replay."""
    feeds = ctx.feeds
    layout = wiring.layout
    hashes = [v.content_hash if isinstance(v, Admitted) else "" for v in verdicts]
    items = feeds.ready_by_id() if feeds else {}
    bad: list[tuple[RawRequest, str | None, CdcError]] = []
    bad_items: list[tuple[Ready, RawRequest, RejectedError]] = []
    for verdict, outcome in zip(verdicts, outcomes, strict=True):
        if outcome.status is Status.REJECTED and outcome.error is not None:
            error = RejectedError(outcome.error.message, code=outcome.error.code)
            raw = verdict.raw
            if raw.position.kind == "changes":  # kept with its records
                bad_items.append((items[outcome.transaction_id or ""], raw, error))
            else:
                bad.append((raw, outcome.transaction_id, error))
    kept = feeds.quarantine(bad_items, commit.batch_id) if feeds else None
    writes: list[Callable[[SparkSession], None]] = [
        *(partial(history_append, item=item) for item in history),
        partial(
            ledger.record,
            path=layout.ledger,
            entries=list(zip(outcomes, hashes, strict=True)),
            commit=commit,
            held=state.committed_ids,
        ),
        partial(
            system.quarantine,
            path=layout.quarantine,
            items=bad,
            commit=commit,
            more=kept,
        ),
    ]
    if feeds is not None:
        writes.append(partial(_pending, feeds=feeds, path=layout.pending, commit=commit))
    wiring.sessions.map(call, writes)
    crash_point("after_ledger")
    wiring.fence()
    system.write_outcomes(wiring.spark, layout.outcomes, outcomes, commit)
    crash_point("mid_outcomes")
    if wiring.publish is not None:
        wiring.publish(outcomes)


def call(spark: SparkSession, write: Callable[[SparkSession], R]) -> R:
    """Run ``write`` in ``spark`` (a session of ``Sessions.map``)."""
    return write(spark)


def history_append(_: SparkSession, item: HistoryItem) -> None:
    """Append one object table's history rows of the batch (``apply.objects.append_history``)."""
    append_history(*item)


def _pending(_: SparkSession, feeds: FeedBatch, path: str, commit: BatchCommit) -> None:
    feeds.write_pending(path, commit)
