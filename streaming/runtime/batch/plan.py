"""The admitted requests planned (``core.plan``): their loads numbered in the batch's order, a
request found wrong rejected before anything is written; and the tables those loads may
write."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Literal

from pyspark.sql import SparkSession

from streaming.core.batch import Admitted
from streaming.core.catalog import SchemaDef
from streaming.core.errors import RejectedError
from streaming.core.feedevents import Ready
from streaming.core.layout import Layout, ObjectTable
from streaming.core.plan import Load, PlannedTransaction, plan_transaction
from streaming.platform import hadoop
from streaming.runtime.batch.context import BatchContext
from streaming.runtime.batch.state import SinkState
from streaming.runtime.batch.wiring import SinkWiring

__all__ = ["histories", "object_table", "path_kind", "plan_batch", "system_tables", "written"]


def plan_batch(
    wiring: SinkWiring, state: SinkState, ctx: BatchContext, admitted: Sequence[Admitted]
) -> tuple[list[PlannedTransaction], dict[str, RejectedError]]:
    """The admitted requests' loads, numbered in the batch's order; a change feed's items
    are planned from their staged counts (``FeedBatch.plan``), and their staged rows
    numbered by those loads (``FeedBatch.stage``)."""
    feeds = ctx.feeds
    planned: list[PlannedTransaction] = []
    rejected: dict[str, RejectedError] = {}
    ordinal = 0
    exists = path_kind(wiring.spark)
    items = feeds.ready_by_id() if feeds else {}
    staged: list[tuple[Ready, list[Load]]] = []
    for verdict in admitted:
        tid = verdict.request.transaction_id
        try:
            if verdict.raw.position.kind == "changes":
                assert feeds is not None
                item = items[tid]
                loads = feeds.plan(item, ordinal, state.datasets, wiring.layout)
                plan = PlannedTransaction(verdict.request, loads)
                staged.append((item, loads))
            else:
                plan = plan_transaction(
                    verdict.request,
                    first_ordinal=ordinal,
                    datasets=state.datasets,
                    layout=wiring.layout,
                    base_dir=wiring.base_dir,
                    allowed_locations=wiring.allowed_locations,
                    exists=exists,
                )
        except RejectedError as e:
            rejected[tid] = e
            continue
        ordinal += len(plan.loads)
        planned.append(plan)
    if feeds is not None:
        feeds.stage(staged)
    return planned, rejected


def written(layout: Layout, load: Load) -> list[str]:
    """Every table a load may write: an object's current and tombstone tables (its history
    is appended with the same commits), or the record / view table."""
    if load.schema.is_object:
        return list(layout.object_table(load.dataset, load.schema.name).restorable)
    return [load.writes]


def histories(layout: Layout, planned: Sequence[PlannedTransaction]) -> set[str]:
    """The history (and SCD2) tables of the object tables the transactions write."""
    return {
        path
        for plan in planned
        for load in plan.loads
        if load.schema.is_object
        for path in object_table(layout, load.dataset, load.schema).derived
    }


def object_table(layout: Layout, dataset: str, schema: SchemaDef) -> ObjectTable:
    return layout.object_table(dataset, schema.name, scd2=schema.scd2 is not None)


def system_tables(layout: Layout) -> tuple[str, ...]:
    """The system tables every batch writes: ledger, outcomes, quarantine."""
    return (layout.ledger, layout.outcomes, layout.quarantine)


def path_kind(spark: SparkSession) -> Callable[[str], Literal["dir", "file"] | None]:
    """Whether a path is a directory, a file or absent: local paths and Hadoop URIs (s3a://)."""

    def kind(path: str) -> Literal["dir", "file"] | None:
        if "://" not in path:
            if os.path.isdir(path):
                return "dir"
            return "file" if os.path.isfile(path) else None
        return hadoop.kind(spark, path)

    return kind
