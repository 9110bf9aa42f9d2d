"""Apply a micro-batch's changes to one object table: fold per key, one MERGE, one history append.

Input: every change of the batch to one table, as rows of ``id``, ``__seq`` (the order:
``action ordinal << 32 | row``), ``__tx``, ``__kind`` (a ``ChangeKind``), ``__cols`` (PATCH:
the columns the source has), ``__flags`` (extended format: column → flags), ``__version`` and
``__created`` (REPLACE: the scope's new version and created time) and ``data`` (a struct of the
properties). The stored
state of each touched key is joined in, the rows are sorted by (id, seq) inside partitions, and
``core.fold`` runs once per key (Arrow batches, no per-key Spark job). Its output is
- ``state`` rows: the new current row of every key that changed → one Delta MERGE,
- ``history`` rows → one append to the append-only history table,
- ``effect`` rows: what each change did → the outcome counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.catalog import SchemaDef
from streaming.core.fold import Change, ChangeKind, Effect, Folded, Stored, fold
from streaming.layout import ObjectTable
from streaming.retry import on_conflict_retry
from streaming.tables import (
    BatchCommit,
    append,
    idempotent,
    latest_version,
    read_table,
)

SEQ_SHIFT = 32
"""``__seq >> SEQ_SHIFT`` is the action ordinal of a change (its position in the batch)."""


def _fold_schema(data: StructType, mark: StructType | None) -> StructType:
    fields = [
        StructField("row_kind", StringType()),
        StructField("id", StringType()),
        StructField("version", LongType()),
        StructField("created", TimestampType()),
        StructField("updated", TimestampType()),
        StructField("deleted", BooleanType()),
        StructField("op", StringType()),
        StructField("tx", StringType()),
        StructField("seq", LongType()),
        StructField("effect", StringType()),
        StructField("data", data),
    ]
    return StructType([*fields, StructField("mark", mark)] if mark else fields)


@dataclass(frozen=True)
class _Folder:
    """Runs ``core.fold`` over Arrow rows of one key; ``watermark`` = the schema's columns."""

    watermark: tuple[str, ...]

    def _mark(self, data: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
        if not self.watermark or data is None:
            return None
        return tuple(data.get(c) for c in self.watermark)

    def stored(self, row: dict[str, Any]) -> Stored:
        """A key's state before the batch: its live row, else its tombstone, else nothing."""
        if row["s_version"] is not None:
            data = row["s_data"]
            return Stored(
                data, row["s_version"], row["s_created"], row["s_updated"], self._mark(data)
            )
        if row["t_version"] is not None:
            return Stored(None, row["t_version"], watermark=self._mark(row.get("t_mark")))
        return Stored()

    def change(self, row: dict[str, Any]) -> Change:
        cols = row["__cols"]
        return Change(
            seq=row["__seq"],
            transaction_id=row["__tx"],
            kind=ChangeKind(row["__kind"]),
            at=row["__at"],
            data=row["data"],
            columns=tuple(cols) if cols is not None else None,
            watermark=self._mark(row["data"]),
            flags=dict(row["__flags"]) if row["__flags"] else None,
            version=row["__version"],
            created=row["__created"],
        )

    def output_rows(self, key: str, folded: Folded) -> Iterator[dict[str, Any]]:
        for seq, effect in folded.effects:
            yield {"row_kind": "effect", "id": key, "seq": seq, "effect": effect}
        if not folded.changed:
            return
        final = folded.final
        state = {
            "row_kind": "state",
            "id": key,
            "version": final.version,
            "created": final.created,
            "updated": final.updated,
            "deleted": not final.live,
            "data": dict(final.data) if final.data is not None else None,
        }
        if self.watermark and final.watermark is not None:
            state["mark"] = dict(zip(self.watermark, final.watermark, strict=True))
        yield state
        for h in folded.history:
            yield {
                "row_kind": "history",
                "id": key,
                "version": h.version,
                "created": h.created,
                "updated": h.updated,
                "deleted": h.deleted,
                "op": h.op,
                "tx": h.transaction_id,
                "data": dict(h.data),
            }

    def partitions(self, out: pa.Schema) -> Any:
        """A mapInArrow function folding runs of equal ids (rows arrive sorted by id, seq)."""

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            key: str | None = None
            group: list[dict[str, Any]] = []
            rows_out: list[dict[str, Any]] = []

            def flush() -> None:
                if key is not None and group:
                    folded = fold(self.stored(group[0]), [self.change(r) for r in group])
                    rows_out.extend(self.output_rows(key, folded))

            for batch in batches:
                for row in batch.to_pylist():
                    if row["id"] != key:
                        flush()
                        key, group = row["id"], []
                    group.append(row)
                if len(rows_out) >= 10_000:
                    yield pa.RecordBatch.from_pylist(rows_out, schema=out)
                    rows_out = []
            flush()
            if rows_out:
                yield pa.RecordBatch.from_pylist(rows_out, schema=out)

        return run


@dataclass
class TableResult:
    """What one table's apply did: counts per (action ordinal, effect), the version after, and
    the history rows still to append (``append_history``)."""

    counts: dict[tuple[int, Effect], int]
    version: int
    history: DataFrame | None


def apply_to_object_table(
    spark: SparkSession,
    *,
    changes: DataFrame,
    schema: SchemaDef,
    paths: ObjectTable,
    before: Mapping[str, int],
    commit: BatchCommit,
    partitions: int,
) -> TableResult:
    """Fold the batch's changes into one object schema's tables, each read as of its version
    ``before`` this batch (the same state again when the batch is replayed)."""
    data_schema = schema.spark_schema()
    props = [f.name for f in data_schema.fields]
    watermark = tuple(schema.watermark)
    mark = StructType([data_schema[c] for c in watermark]) if watermark else None
    stored = read_table(spark, paths.current, before[paths.current]).select(
        F.col("id").alias("s_id"),
        F.col("version").alias("s_version"),
        F.col("created").alias("s_created"),
        F.col("updated").alias("s_updated"),
        F.struct(*props).alias("s_data"),
    )
    tombstones = read_table(spark, paths.tombstones, before[paths.tombstones]).select(
        F.col("id").alias("t_id"),
        F.col("version").alias("t_version"),
        *([F.col("watermark").alias("t_mark")] if mark else []),
    )
    joined = (
        changes.withColumn("__at", F.lit(commit.at).cast("timestamp"))
        .join(stored, changes["id"] == stored["s_id"], "left")
        .join(tombstones, changes["id"] == tombstones["t_id"], "left")
        .drop("s_id", "t_id")
    )
    out_schema = _fold_schema(data_schema, mark)
    folder = _Folder(watermark)
    folded = (
        joined.repartition(partitions, "id")
        .sortWithinPartitions("id", "__seq")
        .mapInArrow(folder.partitions(to_arrow_schema(out_schema, timezone="UTC")), out_schema)
        # Materialised once: the counts, the MERGE and the history append all read this result,
        # and writing the table must not make Spark recompute it from the table's new state.
        .localCheckpoint(eager=True)
    )
    counts = {
        (int(r["ordinal"]), r["effect"]): int(r["n"])
        for r in folded.where("row_kind = 'effect'")
        .groupBy(F.shiftright("seq", SEQ_SHIFT).alias("ordinal"), "effect")
        .agg(F.count("*").alias("n"))
        .collect()
    }
    history = None
    if any(effect in ("inserted", "updated", "deleted") for _, effect in counts):
        _merge(spark, folded, props, paths, commit, with_mark=mark is not None)
        history = _history_rows(folded, props)
    return TableResult(counts, latest_version(spark, paths.current), history)


def append_history(result: TableResult, paths: ObjectTable, commit: BatchCommit) -> None:
    """Append a table's history rows. History is append-only: it cannot be restored, so it is
    written after every current table of the batch, and a failure here is rolled forward."""
    if result.history is not None:
        append(result.history, paths.history, commit)


def _with_hash(df: DataFrame, props: list[str]) -> DataFrame:
    mark = ["mark"] if "mark" in df.columns else []
    return df.select(
        "id",
        "version",
        "created",
        "updated",
        F.sha2(F.to_json(F.col("data")), 256).alias("hash"),
        *[F.col(f"data.{p}").alias(p) for p in props],
        "deleted",
        "op",
        "tx",
        *mark,
    )


def _merge(
    spark: SparkSession,
    folded: DataFrame,
    props: list[str],
    paths: ObjectTable,
    commit: BatchCommit,
    *,
    with_mark: bool,
) -> None:
    state = _with_hash(folded.where("row_kind = 'state'"), props)
    assignments: dict[str, str | Column] = {
        c: F.col(f"s.{c}") for c in ["version", "created", "updated", "hash", *props]
    }

    def merge_current() -> None:
        with idempotent(spark, paths.current, commit):
            (
                DeltaTable.forPath(spark, paths.current)
                .alias("t")
                .merge(state.alias("s"), "t.id = s.id")
                .whenMatchedDelete(condition="s.deleted")
                .whenMatchedUpdate(set=assignments)
                .whenNotMatchedInsert(
                    condition="NOT s.deleted", values={"id": F.col("s.id"), **assignments}
                )
                .execute()
            )

    on_conflict_retry(merge_current, what=paths.current)
    tomb: dict[str, str | Column] = {"version": "s.version", "deleted": "s.updated"}
    if with_mark:
        tomb["watermark"] = "s.mark"

    def merge_tombstones() -> None:
        with idempotent(spark, paths.tombstones, commit):
            (
                DeltaTable.forPath(spark, paths.tombstones)
                .alias("t")
                .merge(state.alias("s"), "t.id = s.id")
                .whenMatchedUpdate(condition="s.deleted", set=tomb)
                .whenMatchedDelete()  # re-inserted: the live row carries the version on
                .whenNotMatchedInsert(condition="s.deleted", values={"id": "s.id", **tomb})
                .execute()
            )

    on_conflict_retry(merge_tombstones, what=paths.tombstones)


def _history_rows(folded: DataFrame, props: list[str]) -> DataFrame:
    return _with_hash(folded.where("row_kind = 'history'"), props).select(
        "id",
        "version",
        "created",
        "updated",
        "hash",
        *props,
        F.col("deleted").alias("__deleted"),
        F.col("op").alias("__op"),
        F.col("tx").alias("__transaction_id"),
    )
