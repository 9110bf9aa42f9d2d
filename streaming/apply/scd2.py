"""SCD type 2 tables on Spark: a batch's history rows → one MERGE of the schema's SCD2 table.

The rules are ``core.scd2``'s (the pure reference the tests hold this to). A batch's history
rows of one table are put after the *seeds* of their ids — what the SCD2 table knows of each
id's past that the batch can change: its open interval (a type-1 update, a close or, at the same
time, its removal) and the closed interval that ends where the open one starts or where the row
was deleted (whether the row lived on at that end time). Window functions per id then find the
boundaries, their non-decreasing times and the intervals between them, exactly as the reference
does over the complete history; the result goes into the table with ONE Delta MERGE keyed on
``(id, __version)``: matched rows are updated (closed, type-1 values) or deleted (an interval
that became empty), new ones inserted. The same code builds a whole table from history
(``backfill``: no seeds).

A batch folded on the driver (``on_driver``: a few thousand rows at most) skips the windows: its
rows and their seeds are collected (a small Spark job each) and ``core.scd2.step`` — the
reference's own rules — gives the rows that change, the MERGE's source. At that size the window
plans cost about 11 Spark jobs per table, the driver path 8 (bench/history/rounds.md).

The MERGE is made once per batch: Delta's ``txnAppId`` / ``txnVersion`` (``commits.idempotent``)
skip it in a replayed batch, and a replay that finds the batch's commit in the table's log
(``commits.batch_commits``) computes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from streaming.core.catalog import SchemaDef
from streaming.core.scd2 import (
    COLUMNS,
    CURRENT,
    DELETED,
    DROP,
    END,
    START,
    TRANSACTION,
    VERSION,
    step,
)
from streaming.storage.commits import BatchCommit, batch_commits, idempotent
from streaming.storage.log import latest_version
from streaming.storage.retry import on_conflict_retry
from streaming.storage.tables import one_of, read_table

log = logging.getLogger(__name__)

KEY_PUSHDOWN_MAX = 2_000
"""Up to this many ids are pushed into the read of the seeds and the MERGE condition
(``id IN (...)``) for Delta's file skipping; more are a semi-join."""

_ORD, _RAW, _DEL, _SEED, _BOUNDARY, _SEG = (
    "__ord",
    "__raw",
    "__del",
    "__seed",
    "__boundary",
    "__seg",
)
_L_OPEN, _L_DELETE, _O_OPEN = -3, -2, -1
"""``__ord`` of the seeds: before every history version (versions are positive)."""


def _steps(history: DataFrame, schema: SchemaDef, seeds: DataFrame | None) -> DataFrame:
    """History rows (and seeds) → the MERGE source: every interval from the seeds on, and the
    seeds' intervals that no longer exist (``__drop``)."""
    props = schema.data_columns()
    track = schema.scd2_tracked()
    valid_from = schema.scd2_valid_from()
    raw = F.col("updated")
    if valid_from is not None:
        raw = F.when(F.col("__deleted"), F.col("updated")).otherwise(
            F.coalesce(F.col(valid_from), F.col("updated"))
        )
    rows = history.select(
        "id",
        *props,
        F.col("version").alias(_ORD),
        raw.alias(_RAW),
        F.col("__deleted").alias(_DEL),
        F.col("version").alias(VERSION),
        F.col("__transaction_id").alias(TRANSACTION),
        F.lit(False).alias(_SEED),
    )
    if seeds is not None:
        rows = seeds.unionByName(rows)
    by_id = Window.partitionBy("id").orderBy(_ORD)
    upto = by_id.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    changed: Column = F.lit(False)
    if track:
        tracked = F.struct(*track)
        changed = ~tracked.eqNullSafe(F.lag(tracked).over(by_id))
    before = F.lag(_DEL).over(by_id)
    boundary = F.col(_SEED) | F.col(_DEL) | before.isNull() | before | changed
    marked = rows.withColumn(_BOUNDARY, boundary)
    timed = marked.select(
        "*",
        F.max(F.when(F.col(_BOUNDARY), F.col(_RAW))).over(upto).alias(START),
        F.sum(F.col(_BOUNDARY).cast("int")).over(upto).alias(_SEG),
    )
    first = F.struct(START, _DEL, VERSION, TRANSACTION, _SEED)
    segments = (
        timed.groupBy("id", _SEG)
        .agg(
            F.min_by(first, F.col(_ORD)).alias("f"),
            F.max_by(F.struct(*props), F.col(_ORD)).alias("v"),
        )
        .select("id", _SEG, "f.*", "v")
    )
    by_seg = Window.partitionBy("id").orderBy(_SEG)
    same_start = (
        Window.partitionBy("id", START)
        .orderBy(_SEG)
        .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    )
    ended = segments.select(
        "*",
        F.lead(START).over(by_seg).alias(END),
        F.last(~F.col(_DEL)).over(same_start).alias("__lives"),
    ).select("*", F.lead("__lives").over(by_seg).alias("__lives_at_end"))
    opens = ~F.col(_DEL)
    survives = opens & (F.col(END).isNull() | (F.col(END) > F.col(START)))
    lives_on = F.coalesce(F.col("__lives_at_end"), F.lit(True))
    return ended.where(opens & (survives | F.col(_SEED))).select(
        "id",
        *[F.col("v." + p).alias(p) for p in props],
        F.col(START),
        F.col(END),
        F.col(END).isNull().alias(CURRENT),
        (F.col(END).isNotNull() & ~lives_on).alias(DELETED),
        F.col(TRANSACTION),
        F.col(VERSION),
        (~survives).alias(DROP),
    )


def _kept(table: DataFrame) -> DataFrame:
    """The stored intervals (of the batch's ids: ``table``) the batch can change: the open one
    and the closed one that ends where it starts, or (a deleted row) the last one."""
    by_id = Window.partitionBy("id")
    is_open = F.col(END).isNull()
    known = table.select(
        "*",
        F.max(F.col(END)).over(by_id).alias("__last_end"),
        F.max(F.when(is_open, F.col(START))).over(by_id).alias("__open_start"),
    )
    last = ~is_open & (F.col(END) == F.col("__last_end"))
    adjacent = F.col("__open_start").isNull() | (F.col(END) == F.col("__open_start"))
    return known.where(is_open | (last & adjacent))


def _seeds(table: DataFrame, props: Sequence[str]) -> DataFrame:
    """``_kept``'s intervals as seed rows: each one's start, and the delete at the end of a
    closed one when no interval is open."""
    kept = _kept(table)
    is_open = F.col(END).isNull()

    def seed(ord_: Column, at: str, deleted: bool) -> list[Column]:
        return [
            F.col("id"),
            *[F.col(p) for p in props],
            ord_.cast("long").alias(_ORD),
            F.col(at).alias(_RAW),
            F.lit(deleted).alias(_DEL),
            F.col(VERSION),
            F.col(TRANSACTION),
            F.lit(True).alias(_SEED),
        ]

    opening = kept.select(*seed(F.when(is_open, _O_OPEN).otherwise(_L_OPEN), START, False))
    deleting = kept.where(~is_open & F.col("__open_start").isNull()).select(
        *seed(F.lit(_L_DELETE), END, True)
    )
    return opening.unionByName(deleting)


def merge_scd2(
    spark: SparkSession,
    history: DataFrame,
    schema: SchemaDef,
    path: str,
    commit: BatchCommit,
    *,
    seeded: bool = True,
    on_driver: bool = False,
) -> int:
    """Apply ``history`` (one table's history rows of a batch, in the history table's columns)
    to the SCD2 table at ``path`` with one MERGE, once per batch; the table's version after it.
    ``seeded``: read the intervals the rows' ids have (False: the table holds none of them —
    a backfill). ``on_driver``: ``history`` is a small batch's rows held on the driver (a local
    relation): its intervals are computed there by ``core.scd2.step`` over the seeds it reads,
    and the MERGE's source is the few rows that change."""
    if commit.replay_possible:
        done = batch_commits(spark, path, commit.query, commit.batch_id).get(commit.step)
        if done is not None:
            return done[0]
    props = schema.data_columns()
    condition = (F.col("t.id") == F.col("s.id")) & (F.col(f"t.{VERSION}") == F.col(f"s.{VERSION}"))
    if on_driver:
        source, keys = _driver_source(spark, history, schema, props, path)
        if source is None:  # nothing changes (e.g. a row inserted and deleted at one time)
            return latest_version(spark, path)
        if keys is not None:
            condition = condition & one_of(F.col("t.id"), keys)
    else:
        seeds = None
        if seeded:
            keys = _keys(history)
            seeds = _seeds(_of_ids(read_table(spark, path), keys, history), props)
            if keys is not None:
                condition = condition & one_of(F.col("t.id"), keys)
        source = _steps(history, schema, seeds)
    values = {c: F.col(f"s.{c}") for c in ["id", *props, *COLUMNS]}

    def merge() -> None:
        with idempotent(spark, path, commit):
            (
                DeltaTable.forPath(spark, path)
                .alias("t")
                .merge(source.alias("s"), condition)
                .whenMatchedDelete(condition=f"s.{DROP}")
                .whenMatchedUpdate(set=values)  # type: ignore[arg-type]
                .whenNotMatchedInsert(condition=f"NOT s.{DROP}", values=values)  # type: ignore[arg-type]
                .execute()
            )

    on_conflict_retry(merge, what=path)
    return latest_version(spark, path)


def _driver_source(
    spark: SparkSession, history: DataFrame, schema: SchemaDef, props: list[str], path: str
) -> tuple[DataFrame | None, list[str] | None]:
    """The MERGE source of a small batch (``core.scd2.step`` over its history rows and the
    seeds of their ids, each collected with one Spark job), and its ids when few enough to
    push down."""
    rows = [r.asDict() for r in history.collect()]  # rows made on the driver: a small job
    table = read_table(spark, path)
    # The columns the MERGE writes (a removed property's column stays, not written: a closed
    # interval keeps its value, a new one gets NULL, as in the current table).
    columns = ["id", *props, *COLUMNS]
    stored = _of_ids(table, _pushed(sorted({r["id"] for r in rows})), history)
    kept = [r.asDict() for r in _kept(stored).select(*columns).collect()]
    changes = step(kept, rows, props, schema.scd2_tracked(), schema.scd2_valid_from())
    if not changes:
        return None, None
    out = StructType([*(table.schema[c] for c in columns), StructField(DROP, BooleanType(), False)])
    source = spark.createDataFrame([tuple(r[f] for f in out.fieldNames()) for r in changes], out)
    return source, _pushed(sorted({r["id"] for r in changes}))


def _keys(history: DataFrame) -> list[str] | None:
    """The ids of ``history``, sorted, if at most ``KEY_PUSHDOWN_MAX``; else None."""
    found = history.select("id").distinct().limit(KEY_PUSHDOWN_MAX + 1).collect()
    return _pushed(sorted(r["id"] for r in found))


def _pushed(ids: list[str]) -> list[str] | None:
    """``ids`` if few enough to push down (``KEY_PUSHDOWN_MAX``), else None."""
    return ids if len(ids) <= KEY_PUSHDOWN_MAX else None


def _of_ids(table: DataFrame, keys: list[str] | None, history: DataFrame) -> DataFrame:
    """The rows of ``table`` whose ids ``history`` has: ``id IN (keys)`` for Delta's file
    skipping when ``keys`` (all of them) were few enough, else a semi-join."""
    if keys is not None:
        return table.where(one_of(F.col("id"), keys))
    return table.join(history.select("id").distinct(), "id", "left_semi")


def backfill(
    spark: SparkSession, history_path: str, schema: SchemaDef, path: str, commit: BatchCommit
) -> tuple[int, int]:
    """Build the (empty) SCD2 table at ``path`` from the whole history table: (history
    versions read, intervals written)."""
    history = read_table(spark, history_path)
    merge_scd2(spark, history, schema, path, commit, seeded=False)
    return history.count(), read_table(spark, path).count()


__all__ = ["KEY_PUSHDOWN_MAX", "backfill", "merge_scd2"]
