"""Point-in-time reads of object tables (docs/interface.md, "SCD2 tables").

``as_of(spark, layout, dataset, schema, at)`` gives the rows of ``schema`` valid at ``at``:
from its SCD2 table when there is one — read at the version the ledger recorded for the last
batch (``storage.consistent``) — else from its history table. The same SQL works on any Delta
reader::

    SELECT * FROM delta.`<warehouse>/<dataset>/_scd2/<schema path>`
    WHERE __start_at <= TIMESTAMP '2026-01-01 12:00:00'
      AND (__end_at IS NULL OR __end_at > TIMESTAMP '2026-01-01 12:00:00')

An interval's ``__deleted`` says how it ended, not whether the row existed during it: the row
existed over all of ``[__start_at, __end_at)``, so the filter above is the whole rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from streaming.core.layout import Layout
from streaming.core.scd2 import END, START
from streaming.storage.consistent import consistent_versions, read_consistent_scd2
from streaming.storage.log import table_state
from streaming.storage.tables import read_table

__all__ = ["as_of", "as_of_history", "as_of_intervals"]


def as_of(
    spark: SparkSession,
    layout: Layout,
    dataset: str,
    schema: str,
    at: datetime,
    *,
    valid_from: str | None = None,
    versions: Mapping[str, int] | None = None,
) -> DataFrame:
    """The rows of ``schema`` valid at ``at`` (``id``, the properties, and from an SCD2 table
    ``__start_at``, ``__end_at``, ``__version``): from the SCD2 table when it exists, read
    consistently (``versions``: one ``consistent_versions`` result for several reads), else from
    history (``as_of_history``; ``valid_from``: the property holding each version's validity
    time, None: its commit time)."""
    if table_state(spark, layout.scd2(dataset, schema)) is not None:
        chosen = consistent_versions(spark, layout) if versions is None else versions
        return as_of_intervals(read_consistent_scd2(spark, layout, dataset, schema, chosen), at)
    return as_of_history(read_table(spark, layout.history(dataset, schema)), at, valid_from)


def as_of_intervals(scd2: DataFrame, at: datetime) -> DataFrame:
    """The intervals of an SCD2 table that hold ``at``."""
    stamp = F.lit(at).cast("timestamp")
    valid = (F.col(START) <= stamp) & (F.col(END).isNull() | (F.col(END) > stamp))
    return scd2.where(valid).drop("__is_current", "__deleted", "__transaction_id")


def as_of_history(history: DataFrame, at: datetime, valid_from: str | None = None) -> DataFrame:
    """Per id the last version of ``history`` whose validity time is at or before ``at``,
    unless it is a delete. Validity time: ``valid_from``'s value (a delete, or NULL: the
    commit time ``updated``), made non-decreasing per id. Every version counts (no tracking:
    that is the SCD2 table's)."""
    raw = F.col("updated")
    if valid_from is not None:
        raw = F.when(F.col("__deleted"), raw).otherwise(F.coalesce(F.col(valid_from), raw))
    by_version = Window.partitionBy("id").orderBy("version")
    upto = by_version.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    timed = history.withColumn("__valid_at", F.max(raw).over(upto)).where(
        F.col("__valid_at") <= F.lit(at).cast("timestamp")
    )
    last = timed.withColumn(
        "__last", F.row_number().over(Window.partitionBy("id").orderBy(F.desc("version")))
    )
    return last.where((F.col("__last") == 1) & ~F.col("__deleted")).drop(
        "__last", "__valid_at", "__deleted", "__op", "__transaction_id"
    )
