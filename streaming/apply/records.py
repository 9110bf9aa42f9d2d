"""Writes that are not per-key folds: record tables and materialized views.

- INSERT_RECORD appends rows to a record table as they are (no meta columns, no history).
- DELETE_RECORD deletes the record rows its named query selects.
- REFRESH recomputes a materialized view (its ``sql`` over its ``using`` inputs) and merges the
  result into the view's table by ``primaryKey``: the whole view (rows no longer produced are
  deleted), or with a query, only the rows recomputed from the inputs the query selects.

Each is one idempotent Delta commit of one step; counts are computed against the table as read
at the step's version, so a replay reports the same counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.apply.objects import TableResult
from streaming.core.changes import SEQ_SHIFT
from streaming.core.codes import Code
from streaming.core.columns import ColumnFormat, resolve_columns
from streaming.core.errors import RejectedError
from streaming.core.fold import Effect
from streaming.core.plan import Load
from streaming.inputs.filters import to_column
from streaming.inputs.reader import Reader, filtered
from streaming.storage.commits import BatchCommit, append, idempotent
from streaming.storage.retry import on_conflict_retry
from streaming.storage.schemas import spark_schema

__all__ = ["delete_records", "insert_records", "refresh_view", "result"]


def insert_records(
    spark: SparkSession, changes: DataFrame, path: str, commit: BatchCommit
) -> dict[tuple[int, Effect], int]:
    """Append the ``data`` of change rows to the record table at ``path``; inserted per load."""
    rows = changes.select("__seq", "data.*").localCheckpoint(eager=True)
    counts = {
        (int(r["ordinal"]), "inserted"): int(r["n"])
        for r in rows.groupBy(F.shiftright("__seq", SEQ_SHIFT).alias("ordinal"))
        .agg(F.count("*").alias("n"))
        .collect()
    }
    append(rows.drop("__seq"), path, commit)
    return counts  # type: ignore[return-value]


def _condition(load: Load) -> Column:
    assert load.scope is not None
    return to_column(load.scope.expression, lambda n: F.col(f"`{n}`"), load.scope.arguments)


def delete_records(
    spark: SparkSession, load: Load, reader: Reader, commit: BatchCommit
) -> dict[tuple[int, Effect], int]:
    """DELETE_RECORD: delete the rows of the record table its query selects."""
    condition = _condition(load)
    deleted = reader.table(load.writes).where(condition).count()
    if deleted:

        def delete() -> None:
            with idempotent(spark, load.writes, commit):
                DeltaTable.forPath(spark, load.writes).delete(condition)

        on_conflict_retry(delete, what=load.writes)
    return {(load.ordinal, "deleted"): deleted}


def _view_rows(load: Load, reader: Reader) -> DataFrame:
    """The view's rows recomputed (from the inputs its REFRESH query selects), typed."""
    view = load.schema
    inputs: dict[str, DataFrame] = {}
    if load.scope is not None:
        catalog = reader.datasets[load.dataset]
        for ref, fqn in view.using.items():
            used = catalog.get(fqn)
            if used is not None and load.scope.name in used.queries:
                inputs[ref] = filtered(reader.schema(load.dataset, used, {}), load.scope)
    out = reader.sql(load.dataset, view, {}, inputs)
    props = view.data_columns()
    found = resolve_columns(props, out.columns, ColumnFormat.AS_SPECIFIED, relaxed=True)
    types = {f.name: f.dataType for f in spark_schema(view).fields}
    return out.select(
        *[
            (F.col(f"`{found[p]}`") if p in found else F.lit(None)).cast(types[p]).alias(p)
            for p in props
        ]
    )


def refresh_view(
    spark: SparkSession, load: Load, reader: Reader, commit: BatchCommit
) -> dict[tuple[int, Effect], int]:
    """REFRESH: merge the recomputed rows into the view's table by its primary key."""
    view = load.schema
    keys = view.primary_key or ["id"]
    props = view.data_columns()
    if any(k not in props for k in keys):
        raise RejectedError(f"{view.name}: primaryKey {keys} is not among its properties")
    rows = _view_rows(load, reader).localCheckpoint(eager=True)
    if rows.groupBy(*keys).count().where("count > 1").limit(1).count():
        raise RejectedError(
            f"{view.name}: its sql produces several rows per primaryKey {keys}",
            code=Code.DUPLICATE_ID,
        )
    counts = _refresh_counts(rows, reader.table(load.writes), keys, props, whole=load.scope is None)
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    differs = " OR ".join(f"NOT (t.`{p}` <=> s.`{p}`)" for p in props if p not in keys)

    def merge() -> None:
        with idempotent(spark, load.writes, commit):
            builder = (
                DeltaTable.forPath(spark, load.writes)
                .alias("t")
                .merge(rows.alias("s"), on)
                .whenMatchedUpdateAll(condition=differs or None)
                .whenNotMatchedInsertAll()
            )
            if load.scope is None:
                builder = builder.whenNotMatchedBySourceDelete()
            builder.execute()

    on_conflict_retry(merge, what=load.writes)
    return {(load.ordinal, effect): n for effect, n in counts.items()}


def _refresh_counts(
    rows: DataFrame, table: DataFrame, keys: list[str], props: list[str], *, whole: bool
) -> Mapping[Effect, int]:
    new = rows.select(*keys, F.struct(*props).alias("s"))
    old = table.select(*keys, F.struct(*props).alias("t"))
    joined = new.join(old, keys, "full_outer")
    stats = joined.agg(
        F.sum((F.col("t").isNull() & F.col("s").isNotNull()).cast("int")).alias("inserted"),
        F.sum((F.col("t").isNotNull() & F.col("s").isNull()).cast("int")).alias("gone"),
        F.sum(
            (
                F.col("t").isNotNull() & F.col("s").isNotNull() & ~F.col("t").eqNullSafe(F.col("s"))
            ).cast("int")
        ).alias("updated"),
        F.sum(F.col("t").eqNullSafe(F.col("s")).cast("int")).alias("unchanged"),
    ).first()
    assert stats is not None
    return {
        "inserted": int(stats["inserted"] or 0),
        "updated": int(stats["updated"] or 0),
        "deleted": int(stats["gone"] or 0) if whole else 0,
        "unchanged": int(stats["unchanged"] or 0),
    }


def result(counts: Mapping[tuple[int, Effect], int], version: int) -> TableResult:
    return TableResult(dict(counts), version, None)
