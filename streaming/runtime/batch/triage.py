"""The batch's input, read and sorted out: its requests collected, its change feeds' records
decoded and decided (``inputs.changefeeds``), then every request and ready item looked up in
the ledger and triaged (``core.batch.triage``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from functools import partial

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from connectors.sources import passed_over_dms_files, to_raw_requests
from streaming.core.batch import RawRequest, Verdict, transaction_ids, triage
from streaming.inputs.changefeeds import FeedBatch
from streaming.runtime.batch.context import BatchContext
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring
from streaming.storage import ledger

__all__ = ["ledger_holds", "open_feeds", "read_requests", "triage_batch"]


def read_requests(
    wiring: SinkWiring, df: DataFrame, batch_id: int
) -> tuple[list[RawRequest], DataFrame | None]:
    """The batch's records (``df``, again on a retry): its requests collected, a change feed's
    records left in Spark (``inputs.changefeeds``), None if it has none."""
    kind = F.col("kind")
    rows = (df.where(kind != "changes") if wiring.feeds else df).collect()
    if wiring.dms_zone:  # a file of 0 bytes has no row: it gets one, and an outcome
        query = wiring.layout.query_name
        rows += passed_over_dms_files(wiring.spark, query, batch_id, rows, wiring.dms_zone)
    raws = to_raw_requests(rows, wiring.dms_zone)
    changes = df.where(kind == "changes") if wiring.feeds else None
    if changes is not None and changes.isEmpty():
        changes = None
    return raws, changes


def open_feeds(
    wiring: SinkWiring,
    state: SinkState,
    changes: DataFrame | None,
    batch_id: int,
    at: datetime,
    *,
    query: str,
    replay_possible: bool,
) -> FeedBatch:
    """The change feeds' records (this batch's and those waiting) decoded and decided
    (``inputs.changefeeds``); the feeds' new source columns followed, by each feed's policy,
    before anything of the batch is applied."""
    assert state.changes is not None
    feeds = state.changes.open(
        changes,
        batch_id,
        at,
        query=query,
        replay_possible=replay_possible,
        committed=partial(ledger_holds, wiring, state),
        cached=state.held,
    )
    for feed in wiring.feeds:
        shapes = feeds.shapes.get(feed.name, [])
        state.datasets = state.columns.follow(feed, state.datasets, shapes, batch_id)
    return feeds


def ledger_holds(wiring: SinkWiring, state: SinkState, ids: Sequence[str]) -> Collection[str]:
    """Which of ``ids`` the ledger holds (a source transaction a connector sent again)."""
    return ledger.committed(wiring.spark, wiring.layout.ledger, ids, state.committed_ids).keys()


def triage_batch(
    wiring: SinkWiring, state: SinkState, ctx: BatchContext, raws: Sequence[RawRequest]
) -> list[Verdict]:
    """The batch's requests parsed and sorted (``core.batch.triage``), then the change
    feeds' ready items (``FeedBatch.verdicts``): their ids looked up in the ledger at once."""
    feeds = ctx.feeds
    ids = transaction_ids(raws, wiring.decode)
    items = [item.transaction_id for _, item in feeds.ready()] if feeds else []
    known = ledger.committed(
        wiring.spark, wiring.layout.ledger, [*ids, *items], state.committed_ids
    )
    verdicts = triage(raws, known, ctx.batch_id, wiring.decode, ctx.query)
    if feeds is not None:
        verdicts += feeds.verdicts(known, ctx.batch_id, ctx.query)
    return verdicts
