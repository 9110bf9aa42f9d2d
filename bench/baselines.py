"""The baselines a user would pick, fed the same files as our job:

- **naive**: a streaming query whose ``foreachBatch`` runs one Delta MERGE per transaction (the
  upsert-from-streaming pattern of the Delta docs), over the same landing files;
- **append**: a blind Delta append of the same rows (the limit: no read of the table at all);
- **delta-rs**: the ``deltalake`` package's MERGE of the same change sets, without Spark;
- **plain** (W2): one streaming micro-batch of every DMS file, one Delta MERGE of each key's
  latest change (``bench.plain`` is W1's plain, the same pattern per micro-batch);
- **full-load append** (FullLoad): a batch Spark read of the full-load file appended to Delta;
- **full-load layout** (FullLoad): the same file written plainly as the tables our layout
  keeps — the current rows (``id``, ``version``, ``created``, ``updated``, ``hash``, the
  properties) and their history rows (the same, plus ``__deleted``, ``__op``,
  ``__transaction_id``) — two Spark appends, spread over the cores as ours spreads a big file;
  no checks, ledger, outcomes or stream: what the layout itself costs.

The baselines keep no history, tombstones, ledger or outcomes; they do bump ``version``, set
``updated`` and recompute ``hash`` like a user keeping those columns would. W2's baselines
resolve several changes per key by the watermark (the largest ``TS`` wins) before their MERGE,
and skip stale changes with a ``s.ts >= t.ts`` condition, as Delta requires one source row per
target row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from bench.data import W1_PROPS, W2_PROPERTIES, Prop
from connectors.sources import BINARY_FILE_SCHEMA

W1_ROW = StructType(
    [
        StructField("id", StringType()),
        StructField("name", StringType()),
        StructField("qty", LongType()),
        StructField("price", DoubleType()),
        StructField("status", StringType()),
    ]
)
SPARK_TYPES = {"string": StringType(), "integer": LongType()}
"""The Spark type of a W2 property's DMS column, by its type in the dataset YAML."""


def dms_schema(props: Sequence[Prop] = W2_PROPERTIES) -> StructType:
    """The Spark schema of W2's DMS files with the properties ``props`` (``data.dms_types``)."""
    return StructType(
        [
            StructField("ID", StringType()),
            *[StructField(name.upper(), SPARK_TYPES[kind]) for name, kind, _ in props],
            StructField("Op", StringType()),
        ]
    )


DMS_SCHEMA = dms_schema()


@dataclass
class BaselineRun:
    seconds: float
    transactions: int
    rows: int
    per_item: list[float] = field(default_factory=list)
    """Seconds of each MERGE (naive, delta-rs)."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seconds": round(self.seconds, 3),
            "transactions": self.transactions,
            "rows": self.rows,
        }
        if self.per_item:
            ordered = sorted(self.per_item)
            out["merge_seconds"] = {
                "count": len(ordered),
                "p50": round(ordered[len(ordered) // 2], 4),
                "max": round(ordered[-1], 4),
                "sum": round(sum(ordered), 3),
            }
        return out


def _files_stream(
    spark: SparkSession, folder: Path, glob: str, per_trigger: int | None
) -> DataFrame:
    reader = (
        spark.readStream.format("binaryFile")
        .schema(BINARY_FILE_SCHEMA)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", glob)
    )
    if per_trigger:
        reader = reader.option("maxFilesPerTrigger", per_trigger)
    return reader.load(str(folder))


def _in_order(df: DataFrame, *, content: bool) -> list[Row]:
    columns = ["path", "modificationTime", *(["content"] if content else [])]
    return sorted(df.select(*columns).collect(), key=lambda r: (r["modificationTime"], r["path"]))


def _run_stream(df: DataFrame, checkpoint: Path, batch: Callable[[DataFrame, int], None]) -> float:
    started = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"baseline query failed: {query.exception()}")
    return seconds


def _requests(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for row in rows
        for line in bytes(row["content"]).decode("utf-8").splitlines()
        if line.strip()
    ]


def _data_path(root: Path, action: dict[str, Any]) -> str:
    return str(root / action["locationUri"] / Path(*action["target"].split(".")))


def _hash(*columns: str) -> Column:
    return F.sha2(F.to_json(F.struct(*[F.expr(c) for c in columns])), 256)


# -- W1 ----------------------------------------------------------------------------------------
def naive_w1(
    spark: SparkSession,
    root: Path,
    landing: Path,
    tables: dict[str, str],
    per_trigger: int,
) -> BaselineRun:
    """One Delta MERGE per transaction, inside foreachBatch, in request order."""
    run = BaselineRun(0.0, 0, 0)
    props = list(W1_PROPS)
    now = "current_timestamp()"

    def batch(df: DataFrame, _batch_id: int) -> None:
        for request in _requests(_in_order(df, content=True)):
            for action in request["actions"]:
                op = action["operation"]
                source = spark.read.schema(W1_ROW).json(_data_path(root, action))
                started = time.perf_counter()
                merge = (
                    DeltaTable.forPath(spark, tables[action["target"]])
                    .alias("t")
                    .merge(source.alias("s"), "t.id = s.id")
                )
                if op == "DELETE":
                    merge = merge.whenMatchedDelete()
                elif op == "PATCH":
                    merge = merge.whenMatchedUpdate(
                        set={
                            "qty": F.col("s.qty"),
                            "status": F.col("s.status"),
                            "version": F.expr("t.version + 1"),
                            "updated": F.expr(now),
                            "hash": _hash("t.name", "s.qty", "t.price", "s.status"),
                        }
                    )
                else:
                    values = {p: F.col(f"s.{p}") for p in props}
                    merge = merge.whenMatchedUpdate(
                        set={
                            **values,
                            "version": F.expr("t.version + 1"),
                            "updated": F.expr(now),
                            "hash": _hash(*[f"s.{p}" for p in props]),
                        }
                    ).whenNotMatchedInsert(
                        values={
                            "id": F.col("s.id"),
                            **values,
                            "version": F.lit(1).cast("long"),
                            "created": F.expr(now),
                            "updated": F.expr(now),
                            "hash": _hash(*[f"s.{p}" for p in props]),
                        }
                    )
                merge.execute()
                run.per_item.append(time.perf_counter() - started)
            run.transactions += 1

    run.seconds = _run_stream(
        _files_stream(spark, landing, "*.jsonl", per_trigger), root / "checkpoints" / "naive", batch
    )
    return run


def append_w1(
    spark: SparkSession, root: Path, landing: Path, bronze: Path, per_trigger: int
) -> BaselineRun:
    """The limit: the requests' rows appended as they are (one append per table per batch)."""
    run = BaselineRun(0.0, 0, 0)

    def batch(df: DataFrame, _batch_id: int) -> None:
        by_table: dict[str, list[str]] = {}
        for request in _requests(_in_order(df, content=True)):
            run.transactions += 1
            for action in request["actions"]:
                by_table.setdefault(action["target"], []).append(_data_path(root, action))
        for target, paths in sorted(by_table.items()):
            rows = (
                spark.read.schema(W1_ROW)
                .json(paths)
                .withColumn("source_file", F.col("_metadata.file_path"))
            )
            rows.write.format("delta").mode("append").save(str(bronze / target))

    run.seconds = _run_stream(
        _files_stream(spark, landing, "*.jsonl", per_trigger),
        root / "checkpoints" / "append",
        batch,
    )
    return run


def _rs_now(rows: int) -> pa.Array:
    """The commit time as a source column (delta-rs expressions read it as ``s.now``)."""
    return pa.array([datetime.now(UTC)] * rows, pa.timestamp("us", tz="UTC"))


def deltars_w1(root: Path, requests: Sequence[str], tables: dict[str, str]) -> BaselineRun:
    """delta-rs: one MERGE per transaction (read its JSON lines, merge), in order."""
    run = BaselineRun(0.0, 0, 0)
    started = time.perf_counter()
    hash_all = "encode(sha256(concat_ws('|', s.name, s.qty, s.price, s.status)), 'hex')"
    hash_patch = "encode(sha256(concat_ws('|', t.name, s.qty, t.price, s.status)), 'hex')"
    for line in requests:
        request = json.loads(line)
        for action in request["actions"]:
            folder = Path(_data_path(root, action))
            rows = [json.loads(x) for f in sorted(folder.glob("*.json")) for x in f.open()]
            op = action["operation"]
            fields = (
                ["id"] if op == "DELETE" else (["id", "qty", "status"] if op == "PATCH" else None)
            )
            schema = pa.schema(
                [
                    (f.name, _arrow(f.dataType))
                    for f in W1_ROW.fields
                    if not fields or f.name in fields
                ]
            )
            source = pa.Table.from_pylist(rows, schema=schema)
            source = source.append_column("now", _rs_now(len(rows)))
            begun = time.perf_counter()
            merger = deltalake.DeltaTable(tables[action["target"]]).merge(
                source, "t.id = s.id", source_alias="s", target_alias="t"
            )
            if op == "DELETE":
                merger = merger.when_matched_delete()
            elif op == "PATCH":
                merger = merger.when_matched_update(
                    {
                        "qty": "s.qty",
                        "status": "s.status",
                        "version": "t.version + 1",
                        "updated": "s.now",
                        "hash": hash_patch,
                    }
                )
            else:
                values = {p: f"s.{p}" for p in W1_PROPS}
                merger = merger.when_matched_update(
                    {**values, "version": "t.version + 1", "updated": "s.now", "hash": hash_all}
                ).when_not_matched_insert(
                    {
                        "id": "s.id",
                        **values,
                        "version": "1",
                        "created": "s.now",
                        "updated": "s.now",
                        "hash": hash_all,
                    }
                )
            merger.execute()
            run.per_item.append(time.perf_counter() - begun)
            run.rows += len(rows)
        run.transactions += 1
    run.seconds = time.perf_counter() - started
    return run


def _arrow(dtype: Any) -> pa.DataType:
    if isinstance(dtype, LongType):
        return pa.int64()
    if isinstance(dtype, DoubleType):
        return pa.float64()
    return pa.string()


# -- W2 ----------------------------------------------------------------------------------------
def _latest_per_key(df: DataFrame) -> DataFrame:
    """One row per key: the largest TS, on a tie the last in the file."""
    order = Window.partitionBy("ID").orderBy(F.col("TS").desc(), F.col("__row").desc())
    return (
        df.withColumn("__row", F.col("_metadata.row_index"))
        .withColumn("__rank", F.row_number().over(order))
        .where("__rank = 1")
        .drop("__rank", "__row")
    )


def _w2_merge_sets(
    props: Sequence[Prop],
) -> tuple[dict[str, str | Column], dict[str, str | Column]]:
    names = [name for name, _, _ in props]
    values: dict[str, str | Column] = {p: F.col(f"s.{p.upper()}") for p in names}
    digest = _hash(*[f"s.{p.upper()}" for p in names])
    now = F.expr("current_timestamp()")
    update: dict[str, str | Column] = {
        **values,
        "version": F.expr("t.version + 1"),
        "updated": now,
        "hash": digest,
    }
    insert: dict[str, str | Column] = {
        "id": F.col("s.ID"),
        **values,
        "version": F.lit(1).cast("long"),
        "created": now,
        "updated": now,
        "hash": digest,
    }
    return update, insert


def _w2_merge(
    spark: SparkSession, table: str, changes: DataFrame, props: Sequence[Prop] = W2_PROPERTIES
) -> None:
    """One MERGE of changes resolved per key (one row per ID), guarded against stale rows;
    it sets every property of ``props``."""
    update, insert = _w2_merge_sets(props)
    (
        DeltaTable.forPath(spark, table)
        .alias("t")
        .merge(changes.alias("s"), "t.id = s.ID")
        .whenMatchedDelete(condition="s.Op = 'D' AND s.TS >= t.ts")
        .whenMatchedUpdate(condition="s.Op <> 'D' AND s.TS >= t.ts", set=update)
        .whenNotMatchedInsert(condition="s.Op <> 'D'", values=insert)
        .execute()
    )


def naive_w2(
    spark: SparkSession,
    root: Path,
    zone: Path,
    table: str,
    props: Sequence[Prop] = W2_PROPERTIES,
) -> BaselineRun:
    """One Delta MERGE per DMS file (its changes resolved per key first), in file order."""
    run = BaselineRun(0.0, 0, 0)
    schema = dms_schema(props)

    def batch(df: DataFrame, _batch_id: int) -> None:
        for row in _in_order(df, content=False):
            changes = _latest_per_key(spark.read.schema(schema).parquet(row["path"]))
            started = time.perf_counter()
            _w2_merge(spark, table, changes, props)
            run.per_item.append(time.perf_counter() - started)
            run.transactions += 1

    run.seconds = _run_stream(
        _files_stream(spark, zone, "*.parquet", None), root / "checkpoints" / "naive", batch
    )
    return run


def _latest_of_all(df: DataFrame) -> DataFrame:
    """One row per key over several files: the largest TS; on a tie the later row (the later
    file name, then the later row in the file), the order the DMS files were written in."""
    order = Window.partitionBy("ID").orderBy(
        F.col("TS").desc(), F.col("__file").desc(), F.col("__row").desc()
    )
    return (
        df.withColumn("__rank", F.row_number().over(order))
        .where("__rank = 1")
        .drop("__rank", "__file", "__row")
    )


def plain_w2(
    spark: SparkSession,
    root: Path,
    zone: Path,
    table: str,
    props: Sequence[Prop] = W2_PROPERTIES,
) -> BaselineRun:
    """What a user writes instead of our job: a streaming query over the DMS zone (every file
    in one micro-batch), whose ``foreachBatch`` keeps each key's latest change and runs ONE
    Delta MERGE of all of them, ``s.TS >= t.ts`` guarding stale changes (as naive does).
    ``transactions`` counts its micro-batches (one MERGE each): 1 when all went in one."""
    run = BaselineRun(0.0, 0, 0)
    stream = (
        spark.readStream.schema(dms_schema(props))
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(str(zone))
        .select(
            "*",
            F.col("_metadata.file_name").alias("__file"),
            F.col("_metadata.row_index").alias("__row"),
        )
    )

    def batch(df: DataFrame, _batch_id: int) -> None:
        started = time.perf_counter()
        _w2_merge(spark, table, _latest_of_all(df), props)
        run.per_item.append(time.perf_counter() - started)
        run.transactions += 1

    run.seconds = _run_stream(stream, root / "checkpoints" / "plain", batch)
    return run


def append_w2(
    spark: SparkSession,
    root: Path,
    zone: Path,
    bronze: Path,
    props: Sequence[Prop] = W2_PROPERTIES,
) -> BaselineRun:
    """The limit: the DMS files' rows appended as they are by a streaming Delta sink."""
    started = time.perf_counter()
    query = (
        spark.readStream.schema(dms_schema(props))
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(str(zone))
        .writeStream.format("delta")
        .option("checkpointLocation", str(root / "checkpoints" / "append"))
        .trigger(availableNow=True)
        .start(str(bronze))
    )
    query.awaitTermination()
    return BaselineRun(time.perf_counter() - started, 0, 0)


def _dms_table(paths: Sequence[Path]) -> pa.Table:
    """The files' rows with lower-case names (DataFusion folds unquoted names) and their order."""
    tables = []
    for number, path in enumerate(paths):
        table = pq.read_table(path)
        table = table.rename_columns([c.lower() for c in table.column_names])
        order = pa.array([(number << 32) + i for i in range(table.num_rows)], pa.int64())
        tables.append(table.append_column("seq", order))
    return pa.concat_tables(tables)


def _deltars_merge(table: str, changes: pa.Table, props: Sequence[Prop] = W2_PROPERTIES) -> None:
    frame = changes.to_pandas().sort_values(["id", "ts", "seq"], kind="stable")
    latest = pa.Table.from_pandas(
        frame.drop_duplicates("id", keep="last").drop(columns=["seq"]), preserve_index=False
    )
    types = changes.schema.remove(changes.schema.get_field_index("seq"))
    if latest.schema != types:  # pandas made an integer column with NULLs float64: back
        latest = latest.cast(types)
    latest = latest.append_column("now", _rs_now(latest.num_rows))
    names = [name for name, _, _ in props]
    digest = f"encode(sha256(concat_ws('|', {', '.join(f's.{p}' for p in names)})), 'hex')"
    values = {p: f"s.{p}" for p in names}
    (
        deltalake.DeltaTable(table)
        .merge(latest, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete(predicate="s.op = 'D' AND s.ts >= t.ts")
        .when_matched_update(
            {**values, "version": "t.version + 1", "updated": "s.now", "hash": digest},
            predicate="s.op <> 'D' AND s.ts >= t.ts",
        )
        .when_not_matched_insert(
            {
                "id": "s.id",
                **values,
                "version": "1",
                "created": "s.now",
                "updated": "s.now",
                "hash": digest,
            },
            predicate="s.op <> 'D'",
        )
        .execute()
    )


def without_change_feed(table: str) -> None:
    """Turn the change data feed off on a delta-rs baseline's table copy: delta-rs 1.6.6's MERGE
    fails on a CDF-enabled table when a matched row meets no clause (a stale change here) with
    "N rows failed validation check" (all-null rows). Our table keeps it on."""
    deltalake.DeltaTable(table).alter.set_table_properties(
        {"delta.enableChangeDataFeed": "false"}, raise_if_not_exists=True
    )


def deltars_w2(
    paths: Sequence[Path],
    table: str,
    *,
    per_file: bool,
    props: Sequence[Prop] = W2_PROPERTIES,
) -> BaselineRun:
    """delta-rs MERGE of the DMS changes: one per file (``per_file``) or one of all of them."""
    run = BaselineRun(0.0, 0, 0)
    started = time.perf_counter()
    groups = [[p] for p in paths] if per_file else [list(paths)]
    for group in groups:
        begun = time.perf_counter()
        _deltars_merge(table, _dms_table(group), props)
        run.per_item.append(time.perf_counter() - begun)
        run.transactions += len(group)
    run.seconds = time.perf_counter() - started
    return run


def append_full_load(spark: SparkSession, path: Path, target: Path) -> BaselineRun:
    """FullLoad's limit: the full-load file read by Spark and appended to a new Delta table."""
    started = time.perf_counter()
    spark.read.parquet(str(path)).write.format("delta").mode("append").save(str(target))
    return BaselineRun(time.perf_counter() - started, 1, 0)


def layout_full_load(
    spark: SparkSession, path: Path, target: Path, props: Sequence[Prop] = W2_PROPERTIES
) -> BaselineRun:
    """FullLoad's layout floor: the full-load file appended as current rows to
    ``target/current`` and as history rows to ``target/history``, hashed as a user keeping
    those columns would (``_hash``), each append a Spark read of the file spread over the
    cores by id (a file of one row group is read by one task)."""
    names = [name for name, _, _ in props]
    started = time.perf_counter()
    rows = (
        spark.read.parquet(str(path))
        .repartition(spark.sparkContext.defaultParallelism, "ID")
        .select(
            F.col("ID").alias("id"),
            F.lit(1).cast("long").alias("version"),
            F.current_timestamp().alias("created"),
            F.current_timestamp().alias("updated"),
            _hash(*[p.upper() for p in names]).alias("hash"),
            *[F.col(p.upper()).alias(p) for p in names],
        )
    )
    rows.write.format("delta").mode("append").save(str(target / "current"))
    history = rows.select(
        "*",
        F.lit(False).alias("__deleted"),
        F.lit("i").alias("__op"),
        F.lit(f"dms:{path.name}").alias("__transaction_id"),
    )
    history.write.format("delta").mode("append").save(str(target / "history"))
    return BaselineRun(time.perf_counter() - started, 1, 0)
